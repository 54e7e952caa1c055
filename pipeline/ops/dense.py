"""Fully connected layers (``nndct_dense``): ``nn.Linear`` and ``nn.MultiheadAttention``'s ``out_proj``."""
from torch import nn

from .record import Absent, OpRecord, OpSpec

DENSE = "nndct_dense"

RECORD = OpRecord(
    family="dense",
    specs={DENSE: OpSpec("dpu", True, False, False)},
    modules={nn.Linear: DENSE, nn.modules.linear.NonDynamicallyQuantizableLinear: DENSE},
    roles={"params": (DENSE,), "bias_corr": (DENSE,)},
    approximation=Absent("integer multiply-accumulate, exact fixed point"),
    source="nndct_shared/base/key_names.py",
)
