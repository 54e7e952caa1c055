"""A batch norm with no conv before it (``nndct_batch_norm``): a per-channel scale and offset layer.
nndct's BatchNorm module does no bias correction."""
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .dpu_support import CPU, DPU, Fix, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import ArgDef, IN, OPTIONAL, OpDef, REQUIRED, XirOp, like_input, one, opt, optional
from .xmodel_support import XmodelForm, no_attrs

BATCH_NORM = "nndct_batch_norm"


def _onnx_batch_norm(b: Any, node: Any, mod: nn.modules.batchnorm._BatchNorm) -> str:
    """An unfused BatchNorm of the lowered model (quantized weight and bias, mean 0, var 1, eps 0:
    ``x * weight + bias``) as BatchNormalization."""
    if len(node.args) != 1 or node.kwargs:
        raise Unsupported("expected one input")
    if mod.eps != 0.0 or bool((mod.running_mean != 0).any()) or bool((mod.running_var != 1).any()):
        raise Unsupported("BatchNorm statistics other than mean 0, var 1, eps 0 (the quantizer's converted form)")
    bits = getattr(mod, "bitwidth", None)
    w = b.param(node.target, "weight", mod.weight, getattr(mod, "weight_fix_pos", None), bits)
    bias = b.param(node.target, "bias", mod.bias, getattr(mod, "bias_fix_pos", None), bits)
    c = int(mod.num_features)
    return b.op("BatchNormalization", [b.tensor(node.args[0]), w, bias,
                                       b.init(node.name + "/mean", np.zeros(c, np.float32)),
                                       b.init(node.name + "/var", np.ones(c, np.float32))],
                node.name, epsilon=0.0)


_CONV_FAMILY = ("conv2d", "depthwise_conv2d", "conv_transpose2d")


def dpu_batch_norm(node: Any, ctx: Any) -> Verdict:
    """BatchNorm2d folds into the conv before it (conv, depthwise or transposed, with no other
    consumer; docs/arithmetic.md#bn-folding) and runs where that conv runs; otherwise the quantizer
    rewrites it as a per-channel scale and offset, which runs as a depthwise 1x1 conv where the target has
    one (an inference)."""
    src = ctx.producer(node)
    if src is not None and src.op in _CONV_FAMILY and len(ctx.consumers[src.name]) == 1:
        note = "folded into {} {!r} (conv_bn_merge).".format(src.op, src.name)
        if ctx.on_dpu(src.name):
            return Verdict(DPU, [], [note], src.name)
        return Verdict(CPU, ["folded into {} {!r}, which is on the CPU.".format(src.op, src.name)],
                       [], src.name, [], [follows(src.name, "the " + src.op)])
    if ctx.target.engines.depthwise_limits() is not None:
        return Verdict(DPU, [], ["not foldable: the quantizer rewrites it as a per-channel scale and "
                                 "offset, run as a depthwise 1x1 conv."])
    return cpu_verdict("batch_norm can't be folded into a conv here, and {} has no depthwise-conv engine "
                "to run it alone.".format(ctx.target.name),
                fixes=[Fix("put the BatchNorm2d right after a conv that nothing else reads, so that it folds into "
                           "the conv's weights.", exact=False)])


def _create_scale(w, node) -> None:
    """XIR ``scale`` of the input by the folded weights, plus the bias (``xop_creator.py`` ``batch_norm``)."""
    inputs = {"scale": [w.op_of(node.params["weights"].name)], "bias": [w.op_of(node.params["bias"].name)],
              "input": w.data_inputs(node)}
    w.fixed_op(node.name, "scale", {}, inputs)


def _run_scale(run, op, ins):
    """``F.batch_norm(x, zeros, ones, scale, bias, False, 0.0, 0.0)`` over ``axis`` (-1: the last)."""
    x, weight, bias = one(ins), one(ins, "scale"), optional(ins, "bias")
    channels = weight.numel()

    def bn(t, axes):
        moved = t.movedim(axes[0], 1) if axes[0] != 1 else t
        y = F.batch_norm(moved, torch.zeros(channels), torch.ones(channels), weight.reshape(-1),
                         None if bias is None else bias.reshape(-1), False, 0.0, 0.0)
        return y.movedim(1, axes[0]) if axes[0] != 1 else y
    return run.in_model_layout(x, [op.attr("axis", -1)], bn)


RECORD = OpRecord(
    family="batch_norm",
    specs={BATCH_NORM: OpSpec("dpu", True, False, False)},
    modules={nn.BatchNorm1d: BATCH_NORM, nn.BatchNorm2d: BATCH_NORM},
    roles={"params": (BATCH_NORM,)},
    approximation=Absent("folded into a scale and an offset, quantized as parameters"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/nn/modules/batchnorm.py",
    onnx={BATCH_NORM: _onnx_batch_norm},
    dpu_rule={BATCH_NORM: DpuRule(("batch_norm",), dpu_batch_norm)},
    xmodel={BATCH_NORM: XmodelForm(no_attrs, _create_scale, nhwc=True)},
    xir_ops={"scale": XirOp(OpDef("scale", IN + (ArgDef("scale", REQUIRED), ArgDef("bias", OPTIONAL)),
                                  (opt("axis", "int32", -1),), like_input), _run_scale, "batch_norm")},
    traced={BATCH_NORM: ("batch_norm",)},
    refusals={},
    sim={BATCH_NORM: TORCH},
)
