"""``x.mean(dims)`` (``aten::mean``): nndct has no type for it; a float operator."""
import torch

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import XmodelForm, custom, no_attrs

MEAN = "aten::mean"

RECORD = OpRecord(
    family="mean",
    specs={MEAN: OpSpec("float", False, False, False)},
    functions={torch.mean: MEAN},
    methods={"mean": MEAN},
    approximation=Absent("a float operator on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
    xmodel={MEAN: XmodelForm(no_attrs, custom)},  # a custom op: XIR's reduction_mean is not what nndct writes
    xir_ops=Absent("a custom op (aten::mean: a type XIR does not define; the interpreter's own)"),
    traced={MEAN: ("mean",)},
)
