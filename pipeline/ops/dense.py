"""Fully connected layers (``nndct_dense``): ``nn.Linear`` and ``nn.MultiheadAttention``'s ``out_proj``."""
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_support import DPU, Verdict
from .onnx_form import layer_inputs
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import ArgDef, INS, OPTIONAL, OpDef, XirOp, attr, broadcast_dims, fail, optional, req
from .xmodel_support import XmodelForm, no_attrs

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


def _create_dense(w, node) -> None:
    """XIR ``matmul`` of the input by the ``[out, in]`` weights, transposed, plus the bias
    (``xop_creator.py`` ``dense``)."""
    inputs = {"input": w.data_inputs(node) + [w.op_of(node.params["weights"].name)]}
    if "bias" in node.params:
        inputs["bias"] = [w.op_of(node.params["bias"].name)]
    w.fixed_op(node.name, "matmul", {"transpose_a": False, "transpose_b": True}, inputs)


def _shape_matmul(op):
    """Batched matmul of exactly two inputs ([..., a, b] x [..., b, c] -> [..., a, c], batch dims
    broadcast, each input's last two dims swapped when transposed); a bias must be [c]."""
    ins = op.inputs.get("input", [])
    if len(ins) != 2:
        raise fail(op, "needs exactly 2 inputs, got %d" % len(ins))
    a, b = list(ins[0].shape), list(ins[1].shape)
    if len(a) < 2 or len(b) < 2:
        raise fail(op, "inputs %s and %s must be at least 2-d" % (a, b))
    if attr(op, "transpose_a", "bool"):
        a[-2], a[-1] = a[-1], a[-2]
    if attr(op, "transpose_b", "bool"):
        b[-2], b[-1] = b[-1], b[-2]
    for bias in op.inputs.get("bias", []):
        if list(bias.shape) != [b[-1]]:
            raise fail(op, "bias shape %s does not match [%d]" % (list(bias.shape), b[-1]))
    batch = broadcast_dims(a[:-2], b[:-2])
    if batch is None or a[-1] != b[-2]:
        raise fail(op, "input shapes %s and %s do not multiply" % (a, b))
    return batch + [a[-2], b[-1]], {}


def _run_matmul(run, op, ins):
    """``F.linear(a, b, bias)`` when only ``transpose_b`` is set and ``b`` is 2-D (the simulation's
    nn.Linear), else ``torch.matmul`` then ``torch.add`` of the bias."""
    a, b = ins["input"]
    bias = optional(ins, "bias")
    if op.attr("transpose_b") and not op.attr("transpose_a") and b.dim() == 2:
        return F.linear(a, b, bias)  # the simulation's nn.Linear
    if op.attr("transpose_a"):
        a = a.transpose(-1, -2)
    if op.attr("transpose_b"):
        b = b.transpose(-1, -2)
    y = torch.matmul(a, b)
    return y if bias is None else torch.add(y, bias)


RECORD = OpRecord(
    family="dense",
    specs={DENSE: OpSpec("dpu", True, False, False)},
    modules={nn.Linear: DENSE, nn.modules.linear.NonDynamicallyQuantizableLinear: DENSE},
    roles={"params": (DENSE,), "bias_corr": (DENSE,), "adaquant": (DENSE,)},
    approximation=Absent("integer multiply-accumulate, exact fixed point"),
    source="nndct_shared/base/key_names.py",
    onnx={DENSE: _onnx_linear},
    dpu_rule={DENSE: DpuRule(("dense",), dpu_dense)},
    xmodel={DENSE: XmodelForm(no_attrs, _create_dense)},
    xir_ops={"matmul": XirOp(OpDef("matmul", INS + (ArgDef("bias", OPTIONAL),),
                                   (req("transpose_a", "bool"), req("transpose_b", "bool")), _shape_matmul),
                             _run_matmul, "dense")},
    traced={DENSE: ("linear", "addmm", "matmul")},
    refusals={},
    sim={DENSE: TORCH},
)
