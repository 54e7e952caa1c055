"""The 2-D convolutions: plain, depthwise, transposed and transposed depthwise (``nndct_conv2d``,
``nndct_depthwise_conv2d``, ``nndct_conv_transpose_2d``, ``nndct_depthwise_conv_transpose_2d``), told
apart by the module's groups as nndct's ``op_dispatcher`` does."""
from typing import Any

from torch import nn

from ..errors import QuantizationError
from .record import Absent, OpRecord, OpSpec
from .onnx_form import layer_inputs

CONV2D = "nndct_conv2d"
DEPTHWISE_CONV2D = "nndct_depthwise_conv2d"
CONVTRANSPOSE2D = "nndct_conv_transpose_2d"
DEPTHWISE_CONVTRANSPOSE2D = "nndct_depthwise_conv_transpose_2d"
CONV_TYPES = (CONV2D, DEPTHWISE_CONV2D, CONVTRANSPOSE2D, DEPTHWISE_CONVTRANSPOSE2D)


def conv_type(m: nn.Module, strict: bool = True) -> str:
    """The nndct type of an ``nn.Conv2d`` or ``nn.ConvTranspose2d``: depthwise when ``groups`` equals the
    input channels (a transposed conv: weight ``(in, out/g)`` with ``out/g == 1`` and ``groups == in``).

    Raises:
        QuantizationError: with ``strict``, a ``padding_mode`` other than zeros (nndct's conv module calls
            ``F.conv2d`` with the padding, so it pads with zeros)."""
    if strict and m.padding_mode != "zeros":
        raise QuantizationError("conv with padding_mode=%r: the real quantizer's conv module pads with zeros "
                                "(it calls F.conv2d with the padding); use padding_mode='zeros' or an "
                                "explicit pad" % m.padding_mode)
    if isinstance(m, nn.Conv2d):
        cin = m.in_channels
        depthwise = m.groups != 1 and m.groups == cin and m.out_channels % cin == 0
        return DEPTHWISE_CONV2D if depthwise else CONV2D
    depthwise = m.weight.shape[1] == 1 and m.groups == m.weight.shape[0] and m.groups != 1
    return DEPTHWISE_CONVTRANSPOSE2D if depthwise else CONVTRANSPOSE2D


_DPU_Q = OpSpec("dpu", True, False, False)

def _onnx_conv(b: Any, node: Any, mod: nn.Conv2d) -> str:
    """ONNX Conv of an ``nn.Conv2d`` (plain or depthwise: ``group``); ``padding="same"`` pads the odd
    pixel last, as torch does."""
    inputs = layer_inputs(b, node, mod)
    if isinstance(mod.padding, str):
        total = [d * (k - 1) if mod.padding == "same" else 0
                 for d, k in zip(mod.dilation, mod.kernel_size)]
        pads = [t // 2 for t in total] + [t - t // 2 for t in total]  # torch puts the odd pixel last
    else:
        pads = list(mod.padding) * 2
    return b.op("Conv", inputs, node.name, kernel_shape=list(mod.kernel_size), strides=list(mod.stride),
                pads=pads, dilations=list(mod.dilation), group=mod.groups)


def _onnx_conv_transpose(b: Any, node: Any, mod: nn.ConvTranspose2d) -> str:
    """ONNX ConvTranspose of an ``nn.ConvTranspose2d`` (plain or depthwise), output_padding kept."""
    inputs = layer_inputs(b, node, mod)
    return b.op("ConvTranspose", inputs, node.name, kernel_shape=list(mod.kernel_size),
                strides=list(mod.stride), pads=list(mod.padding) * 2, dilations=list(mod.dilation),
                group=mod.groups, output_padding=list(mod.output_padding))


RECORD = OpRecord(
    family="conv",
    specs={t: _DPU_Q for t in CONV_TYPES},
    module_rules={nn.Conv2d: conv_type, nn.ConvTranspose2d: conv_type},
    roles={"conv": CONV_TYPES, "params": CONV_TYPES, "bias_corr": CONV_TYPES},
    approximation=Absent("integer multiply-accumulate with the bias added at the accumulator's scale: exact "
                         "fixed point, the shifts are docs/arithmetic.md's"),
    source="pytorch_nndct/parse/op_dispatcher.py, nndct_shared/base/key_names.py",
    onnx={CONV2D: _onnx_conv, DEPTHWISE_CONV2D: _onnx_conv, CONVTRANSPOSE2D: _onnx_conv_transpose,
          DEPTHWISE_CONVTRANSPOSE2D: _onnx_conv_transpose},
)
