"""A batch norm with no conv before it (``nndct_batch_norm``): a per-channel scale and offset layer.
nndct's BatchNorm module does no bias correction."""
import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xir_support import IN, OPTIONAL, REQUIRED, ArgDef, OpDef, XirOp, like_input, one, opt, optional
from .xmodel_support import XmodelForm, no_attrs

BATCH_NORM = "nndct_batch_norm"


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
    xmodel={BATCH_NORM: XmodelForm(no_attrs, _create_scale, nhwc=True)},
    xir_ops={"scale": XirOp(OpDef("scale", IN + (ArgDef("scale", REQUIRED), ArgDef("bias", OPTIONAL)),
                                  (opt("axis", "int32", -1),), like_input), _run_scale, "batch_norm")},
    traced={BATCH_NORM: ("batch_norm",)},
)
