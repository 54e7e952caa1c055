"""Axis reorders (``nndct_permute``, ``nndct_transpose``). A transpose is not in nndct's
``QUANTIZABLE_OPS`` and joins its producer's group (``SoftFuseTranspose``)."""
import torch

from .record import Absent, OpRecord, OpSpec

PERMUTE = "nndct_permute"
TRANSPOSE = "nndct_transpose"

RECORD = OpRecord(
    family="permute",
    specs={PERMUTE: OpSpec("layout", False, True, True), TRANSPOSE: OpSpec("layout", False, False, True)},
    functions={torch.permute: PERMUTE, torch.transpose: TRANSPOSE},
    methods={"permute": PERMUTE, "transpose": TRANSPOSE},
    signatures={TRANSPOSE: (("input", "dim0", "dim1"), {})},
    approximation=Absent("moves no value"),
    source="nndct_shared/quantization/commander.py (SoftFuseTranspose)",
)
