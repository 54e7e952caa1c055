"""Concatenation along one axis (``nndct_concat``): ``torch.cat``."""
import torch

from .record import Absent, OpRecord, OpSpec

CONCAT = "nndct_concat"

RECORD = OpRecord(
    family="concat",
    specs={CONCAT: OpSpec("dpu", True, False, False)},
    functions={torch.cat: CONCAT},
    signatures={CONCAT: (("tensors", "dim"), {"dim": 0})},
    approximation=Absent("copies codes (inputs aligned to the output's fix position)"),
    source="nndct_shared/base/key_names.py",
)
