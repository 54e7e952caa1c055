"""The conv family's ONNX forms (exact and QDQ alike: the builder's flavour writes the parameters)."""
from typing import Any

from torch import nn

from ..onnx_form import Unsupported, layer_inputs


def onnx_conv(b: Any, node: Any, mod: nn.Conv2d) -> str:
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


def onnx_conv_mode(b: Any, node: Any, mod: nn.Conv2d) -> str:
    """A Conv2d with string padding: a quantized one (a lowered model made with its fix positions) is an
    ONNX Conv like any other; the capture's float ``aten::_convolution_mode`` is refused with the fix."""
    if getattr(mod, "weight_fix_pos", None) is not None:
        return onnx_conv(b, node, mod)
    raise Unsupported("a Conv2d with padding=%r is a float operator of the real quantizer (torch.jit traces "
                      "aten::_convolution_mode, which it has no op for: weights, bias and output stay float), "
                      "and ONNX Runtime's float conv is not bit-exact with torch's; give the padding as numbers "
                      "(padding=k // 2, or nn.ZeroPad2d before the conv for an even kernel) and the conv is a "
                      "quantized DPU conv that both exports carry" % (mod.padding,))


def onnx_conv_transpose(b: Any, node: Any, mod: nn.ConvTranspose2d) -> str:
    """ONNX ConvTranspose of an ``nn.ConvTranspose2d`` (plain or depthwise), output_padding kept."""
    inputs = layer_inputs(b, node, mod)
    return b.op("ConvTranspose", inputs, node.name, kernel_shape=list(mod.kernel_size),
                strides=list(mod.stride), pads=list(mod.padding) * 2, dilations=list(mod.dilation),
                group=mod.groups, output_padding=list(mod.output_padding))
