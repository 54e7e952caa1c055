"""Fully connected layers (``nndct_dense``): ``nn.Linear`` and ``nn.MultiheadAttention``'s ``out_proj``."""
from typing import Any

from torch import nn

from .dpu_support import DPU, Verdict
from .onnx_form import layer_inputs
from .record import Absent, DpuRule, OpRecord, OpSpec

DENSE = "nndct_dense"


def _onnx_linear(b: Any, node: Any, mod: nn.Linear) -> str:
    """ONNX of an ``nn.Linear``: Gemm (transB) on a 2-D input, else MatMul by the transposed weight and Add
    of the bias."""
    inputs = layer_inputs(b, node, mod)
    if len(b.shape(node.args[0])) == 2:
        return b.op("Gemm", inputs, node.name, transB=1)
    y = b.op("MatMul", inputs[:2], node.name if len(inputs) == 2 else node.name + "/matmul")
    return y if len(inputs) == 2 else b.op("Add", [y, inputs[2]], node.name)


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
    onnx={DENSE: _onnx_linear},
    dpu_rule={DENSE: DpuRule(("dense",), dpu_dense)},
)
