"""Ops that view data in a new shape (``nndct_flatten``, ``nndct_reshape``, ``nndct_contiguous``,
``nndct_squeeze``, ``nndct_unsqueeze``): never their own fix position, they defer to their producer."""
import torch
from torch import nn

from .record import Absent, OpRecord, OpSpec

FLATTEN = "nndct_flatten"
RESHAPE = "nndct_reshape"
CONTIGUOUS = "nndct_contiguous"
SQUEEZE = "nndct_squeeze"
UNSQUEEZE = "nndct_unsqueeze"

RECORD = OpRecord(
    family="reshape",
    specs={
        FLATTEN: OpSpec("layout", False, True, True),
        RESHAPE: OpSpec("layout", False, True, False),
        CONTIGUOUS: OpSpec("layout", False, True, True),
        UNSQUEEZE: OpSpec("layout", False, True, True),
        SQUEEZE: OpSpec("layout", False, True, True),
    },
    modules={nn.Flatten: FLATTEN},
    functions={torch.flatten: FLATTEN, torch.reshape: RESHAPE, torch.unsqueeze: UNSQUEEZE,
               torch.squeeze: SQUEEZE},
    methods={"flatten": FLATTEN, "view": RESHAPE, "reshape": RESHAPE, "contiguous": CONTIGUOUS,
             "unsqueeze": UNSQUEEZE, "squeeze": SQUEEZE},
    signatures={FLATTEN: (("input", "start_dim", "end_dim"), {"start_dim": 0, "end_dim": -1})},
    approximation=Absent("moves no value"),
    source="nndct_shared/base/key_names.py",
)
