"""Ops that view data in a new shape (``nndct_flatten``, ``nndct_reshape``, ``nndct_contiguous``,
``nndct_squeeze``, ``nndct_unsqueeze``): never their own fix position, they defer to their producer."""
from typing import Any, Optional

import torch
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .onnx_form import Unsupported, alias

FLATTEN = "nndct_flatten"
RESHAPE = "nndct_reshape"
CONTIGUOUS = "nndct_contiguous"
SQUEEZE = "nndct_squeeze"
UNSQUEEZE = "nndct_unsqueeze"

def _onnx_reshape(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """flatten / view / reshape / squeeze / unsqueeze: Reshape to the recorded output shape, -1 at the one
    dimension that follows the batch size."""
    target = list(b.shape(node))
    batch = b.batch_dims(node)
    if len(batch) > 1:
        raise Unsupported("the batch size reaches %d output dimensions" % len(batch))
    for i in batch:
        target[i] = -1
    return b.op("Reshape", [b.tensor(node.args[0]), b.ints(node.name + "/shape", target)], node.name)


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
    onnx={FLATTEN: _onnx_reshape, RESHAPE: _onnx_reshape, CONTIGUOUS: alias, SQUEEZE: _onnx_reshape,
          UNSQUEEZE: _onnx_reshape},
)
