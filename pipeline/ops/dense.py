"""Fully connected layers (``nndct_dense``): ``nn.Linear`` and ``nn.MultiheadAttention``'s ``out_proj``."""
from typing import Any

from torch import nn

from .dpu_support import DPU, Verdict
from .record import Absent, DpuRule, OpRecord, OpSpec

DENSE = "nndct_dense"


def dpu_dense(node: Any, ctx: Any) -> Verdict:
    """Linear layers run on the conv engine as 1x1 convs (matmul is turned into conv2d, UG1414)."""
    return Verdict(DPU)


RECORD = OpRecord(
    family="dense",
    specs={DENSE: OpSpec("dpu", True, False, False)},
    modules={nn.Linear: DENSE, nn.modules.linear.NonDynamicallyQuantizableLinear: DENSE},
    roles={"params": (DENSE,), "bias_corr": (DENSE,)},
    approximation=Absent("integer multiply-accumulate, exact fixed point"),
    source="nndct_shared/base/key_names.py",
    dpu_rule={DENSE: DpuRule(("dense",), dpu_dense)},
)
