"""``x.mean(dims)`` (``aten::mean``): nndct has no type for it; a float operator."""
import torch

from .record import Absent, OpRecord, OpSpec

MEAN = "aten::mean"

RECORD = OpRecord(
    family="mean",
    specs={MEAN: OpSpec("float", False, False, False)},
    functions={torch.mean: MEAN},
    methods={"mean": MEAN},
    approximation=Absent("a float operator on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
)
