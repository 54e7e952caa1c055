"""1-D convolutions: ``nn.Conv1d`` as nndct's ``nndct_conv1d`` (``op_dispatcher``: ``_convolution`` with 3-D
weights), a conv with weights, bias and output on fix-point grids, written as XIR ``conv1d`` (NWC); the calls
this project refuses (``F.conv1d``, a grouped or depthwise ``nn.Conv1d``, ``nn.ConvTranspose1d``).

Quantization (``pytorch_nndct/nn/modules/conv1d.py``, ``deephi_Conv1d.forward``): the weight and bias quantized
at their first call, ``F.conv1d`` of the quantized input with them (stride, padding, dilation, groups), the
output quantized. Bias correction as a 2-D conv's, but the error's mean is taken over dims ``[0, 1, 2]``
(nndct's ``error.mean(dim = [0, 1, 2])``: one number for every channel, not one per channel). nndct's fix
position rules: a conv's (``fix_pos_adjust``: ``shift_cut_bias`` for ``CONV1D``); cross-layer equalization
leaves it out (``commander._CLE_TYPES``); fast finetune tunes it (``adaquant``: ``is_conv_like``, nndct's
``CONV_LIKE_OPS``), without an activation partner (``collect_layer_act_pair`` names 2-D and 3-D convs only): the
rule, not yet checked against a real fast-finetune run.

The xmodel: an "implicit" op of nndct's ``layout_tranform`` (its 3-D tensors go ``[0, 2, 1]``: NCW -> NWC),
weights ``(out, kernel, in)`` (``parser._load_data``), XIR ``conv1d`` (``xop_creator``) with kernel, stride,
dilation as 1-lists, pad ``[left, right]``, pad_mode FLOOR, group, bias_term, in_dim, out_dim.
"""
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import QuantizationError
from .conv.onnx import onnx_conv
from .conv.xmodel import CONV_ARGS, create_conv
from .dpu_support import Fix, Verdict, cpu_verdict
from .record import Absent, DpuRule, OpRecord, OpSpec
from .refusal import ALL_STAGES, Known, NOT_IN_REAL, NOT_YET, REAL_QUANTIZER
from .sim_support import TORCH, LayerForm
from .xir_support import OpDef, XirOp, fail, one, op_input, opt, optional, req, unsupported, vec, window_size
from .xmodel_support import XmodelForm

CONV1D = "nndct_conv1d"

CONV1D_CALL = Known(
    what="Conv1d", kind=NOT_YET, stops=ALL_STAGES, several=False,
    real="the real quantizer quantizes it as a conv, its own op nndct_conv1d with weights, bias and output on "
         "fix-point grids, and writes XIR conv1d",
    instead=REAL_QUANTIZER + ", or write it as nn.Conv2d with kernel (1, k) on x.unsqueeze(2), which this "
            "project simulates and exports")
CONV_TRANSPOSE1D = Known(
    what="ConvTranspose1d", kind=NOT_IN_REAL, stops=ALL_STAGES, several=False,
    real="the real quantizer's parser raises 'ConvTranpose1D is unsupported'",
    instead="write it as nn.ConvTranspose2d with kernel (1, k) and stride (1, s) on x.unsqueeze(2)")


def conv1d_type(m: nn.Module, strict: bool = True) -> str:
    """The type of an ``nn.Conv1d``: :data:`CONV1D`.

    Raises:
        QuantizationError: with ``strict``, a ``padding_mode`` other than zeros (nndct's module calls ``F.conv1d``
            with the padding: zeros), padding given as a string (torch.jit traces ``aten::_convolution_mode``,
            a float operator of the real quantizer), or ``groups`` other than 1 (grouped and depthwise 1-D convs:
            no form of this project's yet)."""
    if not strict:
        return CONV1D
    if m.padding_mode != "zeros":
        raise QuantizationError("Conv1d with padding_mode=%r: the real quantizer's conv module pads with zeros (it "
                                "calls F.conv1d with the padding); use padding_mode='zeros' or an explicit pad"
                                % m.padding_mode)
    if isinstance(m.padding, str):
        raise QuantizationError("Conv1d with padding=%r: torch.jit traces aten::_convolution_mode, which the real "
                                "quantizer keeps as a float operator; give the padding as numbers" % m.padding)
    if m.groups != 1:
        raise QuantizationError("Conv1d with groups=%d: this project has no form for a grouped or depthwise 1-D "
                                "conv yet (the real quantizer parses a depthwise one as nndct_depthwise_conv1d); "
                                "meanwhile %s" % (m.groups, REAL_QUANTIZER))
    return CONV1D


def _forward(m: nn.Module, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``deephi_Conv1d``'s call: ``F.conv1d`` of ``x`` (N, C, L) with the given weight (out, in/g, k) and bias."""
    return F.conv1d(x, weight, bias, m.stride, m.padding, m.dilation, m.groups)


# ---- the xmodel ------------------------------------------------------------------------------------------

def _lower(lo: Any, node: Any) -> dict:
    """nndct's deploy attributes of a Conv1d (``parser.py``): kernel, stride, dilation as 1-lists, pad
    ``[left, right]``, pad_mode 0 (FLOOR), group, bias_term, in_dim, out_dim."""
    m = lo.module(node)
    return {"kernel": [int(m.kernel_size[0])], "stride": [int(m.stride[0])], "dilation": [int(m.dilation[0])],
            "pad_mode": 0, "pad": [int(m.padding[0])] * 2, "group": m.groups, "bias_term": m.bias is not None,
            "in_dim": m.in_channels, "out_dim": m.out_channels}


def owi(m: nn.Module, weight: np.ndarray) -> np.ndarray:
    """A Conv1d's ``(out, in, k)`` as nndct's ``(out, k, in)``."""
    return weight.transpose(0, 2, 1)


def shape_conv1d(op: Any) -> Any:
    """``shape_infer_conv1d``: ``[n, ol, weights[0]]`` from the NWC input and ``cal_out_1d`` (``pad`` is
    ``[left, right]``)."""
    dims, weights = list(op_input(op).shape), list(op_input(op, "weights").shape)
    if len(dims) != 3:
        raise unsupported(op, "input %s is not 3-d (NWC)" % dims)
    if len(weights) != 3:
        raise fail(op, "the number of dimension of weights here is %d, but it should be 3" % len(weights))
    pad = vec(op, "pad", 2)
    length = window_size(op, dims[1] + pad[0] + pad[1], vec(op, "kernel", 1)[0], vec(op, "stride", 1)[0],
                         vec(op, "dilation", 1)[0])
    return [dims[0], length, weights[0]], {}


def run_conv1d(run: Any, op: Any, ins: Any) -> torch.Tensor:
    """XIR ``conv1d``: ``F.conv1d`` on the NWC input read as NCW (contiguous), the weights ``(out, k, in)`` as
    torch's ``(out, in, k)``, an asymmetric pad applied first; back to NWC."""
    x, w = one(ins), one(ins, "weights")
    if x.dim() != 3:
        raise run.error(op, "expects a 3-D NWC input, got dims %s" % list(x.shape))
    x = x.permute(0, 2, 1).contiguous()
    left, right = op.attr("pad", [0, 0])
    if left != right:
        x, left = F.pad(x, [left, right]), 0
    y = F.conv1d(x, w.permute(0, 2, 1).contiguous(), optional(ins, "bias"), op.attr("stride")[0], left,
                 op.attr("dilation", [1])[0], op.attr("group", 1))
    return run.checked(op, y.permute(0, 2, 1))


# ---- the DPU inspector -------------------------------------------------------------------------------------

def dpu_conv1d(node: Any, ctx: Any) -> Verdict:
    """A 1-D conv, on any target: on the CPU. The real Inspector's partition (``hardware/dpu_partition.py``,
    ``DPUPartition.simple_allocate_op_device``) leaves ``nndct_conv1d`` out of the types it maps to XIR (its line
    is commented out) and says "nndct_conv1d can't be converted to XIR."; the fix is the same conv written as a
    2-D one, which the conv engine takes (the same values)."""
    return cpu_verdict(
        "conv1d ({}): the real Inspector puts it on the CPU on every target (\"nndct_conv1d can't be converted to "
        "XIR.\": its DPU partition leaves the 1-D conv out, though the quantizer writes XIR conv1d)."
        .format(node.source),
        fixes=[Fix("write the 1-D conv as a 2-D one of kernel (1, k) on x.unsqueeze(2) (weight.unsqueeze(2)), "
                   "squeezing dim 2 after: the same values, and the DPU's conv engine takes it.",
                   "nn.Conv1d(cin, cout, k, stride=s, padding=p) -> nn.Conv2d(cin, cout, (1, k), stride=(1, s), "
                   "padding=(0, p)); y = conv(x.unsqueeze(2)).squeeze(2)")])


RECORD = OpRecord(
    family="conv1d",
    specs={CONV1D: OpSpec("dpu", True, False, False)},
    module_rules={nn.Conv1d: conv1d_type},
    roles={"params": (CONV1D,), "bias_corr": (CONV1D,), "adaquant": (CONV1D,)},  # is_conv_like: CONV_LIKE_OPS
    approximation=Absent("integer multiply-accumulate with the bias added at the accumulator's scale: exact "
                         "fixed point, as a 2-D conv's"),
    source="pytorch_nndct/parse/op_dispatcher.py, pytorch_nndct/nn/modules/conv1d.py, "
           "nndct_shared/compile/xop_creator.py, nndct_shared/compile/deploy_optimizer.py (layout_tranform), "
           "nndct_shared/base/key_names.py (CONV1D)",
    onnx={CONV1D: onnx_conv},
    dpu_rule={CONV1D: DpuRule(("conv1d",), dpu_conv1d)},
    xmodel={CONV1D: XmodelForm(_lower, create_conv("conv1d"), nhwc=True, weights=owi)},
    xir_ops={"conv1d": XirOp(OpDef("conv1d", CONV_ARGS,
                                   (req("kernel", "int32_vec"), req("stride", "int32_vec"),
                                    opt("dilation", "int32_vec", [1]), req("pad_mode", "string"),
                                    opt("pad", "int32_vec", [0, 0])), shape_conv1d),
                             run_conv1d, "conv1d")},
    traced={CONV1D: ("_convolution",)},
    refusals={F.conv1d: CONV1D_CALL, nn.ConvTranspose1d: CONV_TRANSPOSE1D, F.conv_transpose1d: CONV_TRANSPOSE1D},
    sim={CONV1D: TORCH},
    layer={CONV1D: LayerForm(_forward, (0, 1, 2))},
)
