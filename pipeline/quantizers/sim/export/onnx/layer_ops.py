"""ONNX handlers of the layers: convolutions, linear layers, ReLU-family activations and clamps,
pooling and resizing (flavour-independent, as every handler in ``handlers.py``: each gets (builder,
fx node, module or None) and returns the ONNX tensor name of the node's result; it raises
Unsupported with the reason when an argument cannot be written). ``handlers.py`` registers them.
"""
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from .bilinear import bilinear
from .builder import Builder, Unsupported, arg, pair


def _conv_weights(b: Builder, node: torch.fx.Node, mod: nn.Module) -> List[str]:
    if len(node.args) != 1 or node.kwargs:
        raise Unsupported("expected one input, got %d args and kwargs %s"
                           % (len(node.args), sorted(node.kwargs)))
    if getattr(mod, "padding_mode", "zeros") != "zeros":
        raise Unsupported("padding_mode %r (only 'zeros')" % mod.padding_mode)
    bits = getattr(mod, "bitwidth", None)
    inputs = [b.tensor(node.args[0]),
              b.param(node.target, "weight", mod.weight, getattr(mod, "weight_fix_pos", None), bits,
                      transpose=isinstance(mod, nn.Linear) and len(b.shape(node.args[0])) != 2)]
    if mod.bias is not None:
        inputs.append(b.param(node.target, "bias", mod.bias, getattr(mod, "bias_fix_pos", None), bits))
    return inputs


def conv(b: Builder, node: torch.fx.Node, mod: nn.Conv2d) -> str:
    if isinstance(mod.padding, str) and getattr(mod, "weight_fix_pos", None) is None:
        # the capture's aten::_convolution_mode (pipeline/ops/conv.py): the model's own float conv
        raise Unsupported("a Conv2d with padding=%r is a float operator of the real quantizer (torch.jit traces "
                          "aten::_convolution_mode, which it has no op for: weights, bias and output stay float), "
                          "and ONNX Runtime's float conv is not bit-exact with torch's; give the padding as numbers "
                          "(padding=k // 2, or nn.ZeroPad2d before the conv for an even kernel) and the conv is a "
                          "quantized DPU conv that both exports carry" % mod.padding)
    inputs = _conv_weights(b, node, mod)
    if isinstance(mod.padding, str):
        total = [d * (k - 1) if mod.padding == "same" else 0
                 for d, k in zip(mod.dilation, mod.kernel_size)]
        pads = [t // 2 for t in total] + [t - t // 2 for t in total]  # torch puts the odd pixel last
    else:
        pads = list(mod.padding) * 2
    return b.op("Conv", inputs, node.name, kernel_shape=list(mod.kernel_size), strides=list(mod.stride),
                pads=pads, dilations=list(mod.dilation), group=mod.groups)


def conv_transpose(b: Builder, node: torch.fx.Node, mod: nn.ConvTranspose2d) -> str:
    inputs = _conv_weights(b, node, mod)
    return b.op("ConvTranspose", inputs, node.name, kernel_shape=list(mod.kernel_size),
                strides=list(mod.stride), pads=list(mod.padding) * 2, dilations=list(mod.dilation),
                group=mod.groups, output_padding=list(mod.output_padding))


def linear(b: Builder, node: torch.fx.Node, mod: nn.Linear) -> str:
    inputs = _conv_weights(b, node, mod)
    if len(b.shape(node.args[0])) == 2:
        return b.op("Gemm", inputs, node.name, transB=1)
    y = b.op("MatMul", inputs[:2], node.name if len(inputs) == 2 else node.name + "/matmul")
    return y if len(inputs) == 2 else b.op("Add", [y, inputs[2]], node.name)


def relu(b: Builder, node: torch.fx.Node, mod: Optional[nn.Module]) -> str:
    return b.op("Relu", [b.tensor(node.args[0])], node.name)


def _clip(b: Builder, node: torch.fx.Node, lo: Any, hi: Any) -> str:
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
        raise Unsupported("clamp bounds must be numbers, not tensors")
    inputs = [b.tensor(node.args[0]),
              "" if lo is None else b.operand(lo, node.name + "/min"),
              "" if hi is None else b.operand(hi, node.name + "/max")]
    while inputs[-1] == "":
        inputs.pop()
    return b.op("Clip", inputs, node.name)


def hardtanh(b: Builder, node: torch.fx.Node, mod: nn.Hardtanh) -> str:
    return _clip(b, node, float(mod.min_val), float(mod.max_val))


def relu6_fn(b: Builder, node: torch.fx.Node, mod: None) -> str:
    return _clip(b, node, 0.0, 6.0)


def clamp(b: Builder, node: torch.fx.Node, mod: None) -> str:
    return _clip(b, node, arg(node, 1, "min", None), arg(node, 2, "max", None))


def leaky(b: Builder, node: torch.fx.Node, mod: Optional[nn.LeakyReLU]) -> str:
    slope = mod.negative_slope if mod is not None else b.static(arg(node, 1, "negative_slope", 0.01))
    return b.op("LeakyRelu", [b.tensor(node.args[0])], node.name, alpha=float(slope))


def _one_input(node: torch.fx.Node, mod: Any) -> None:
    """A pooling module call takes its input only (functional forms carry their settings as args)."""
    if isinstance(mod, nn.Module) and (len(node.args) != 1 or node.kwargs):
        raise Unsupported("expected one input")


def functional(names: Sequence[str], defaults: Dict[str, Any]) -> Callable[..., str]:
    """Handler for F.max_pool2d / F.avg_pool2d / F.adaptive_avg_pool2d: the call's arguments after
    the input become the attributes of a module-like namespace, passed to the module's handler."""
    def wrap(handler: Callable[..., str]) -> Callable[..., str]:
        def functional(b: Builder, node: torch.fx.Node, mod: None) -> str:
            params = types.SimpleNamespace(**{
                name: b.static(arg(node, i + 1, name, defaults.get(name, Unsupported)))
                for i, name in enumerate(names)})
            return handler(b, node, params)
        return functional
    return wrap


def _pool_geometry(b: Builder, node: torch.fx.Node, mod: Any, ceil_as_padding: bool = False) -> Dict[str, Any]:
    """kernel/stride/pads/dilations of a 2-D pool. Where ceil_mode adds a last, partial window,
    ``ceil_as_padding`` (max pool) pads the bottom/right ends by what that window lacks (ONNX's
    MaxPool never picks a padded value, as torch's never looks past the input); otherwise refused."""
    _one_input(node, mod)
    kernel = pair(mod.kernel_size)
    stride = pair(mod.stride or mod.kernel_size)  # torch: stride None (or []) means the kernel
    pad = pair(mod.padding)
    dil = pair(getattr(mod, "dilation", 1))
    shape_in, shape_out = b.shape(node.args[0]), b.shape(node)
    if len(shape_in) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape_in))
    # the input extent the output's windows span, beyond the input and its padding
    extra = [(shape_out[2 + i] - 1) * stride[i] + dil[i] * (kernel[i] - 1) + 1 - (shape_in[2 + i] + 2 * pad[i])
             for i in range(2)]
    if any(e > 0 for e in extra) and not ceil_as_padding:
        raise Unsupported("output %s has a partial last window (ceil_mode); only max pool writes it"
                          % (tuple(shape_out),))
    ends = [pad[i] + max(extra[i], 0) for i in range(2)]
    return {"kernel_shape": list(kernel), "strides": list(stride), "pads": list(pad) + ends,
            "dilations": list(dil)}


def maxpool(b: Builder, node: torch.fx.Node, mod: nn.MaxPool2d) -> str:
    if mod.return_indices:
        raise Unsupported("return_indices=True")
    return b.op("MaxPool", [b.tensor(node.args[0])], node.name, **_pool_geometry(b, node, mod, True))


def _window_sum(b: Builder, node: torch.fx.Node, kernel: Sequence[int], stride: Sequence[int],
                pads: Sequence[int]) -> str:
    """Exact per-channel window sums: a depthwise Conv with a ones kernel (no rounding on grid values)."""
    channels = b.shape(node.args[0])[1]
    ones = b.init(node.name + "/window", np.ones((channels, 1) + tuple(kernel), dtype=np.float32))
    return b.op("Conv", [b.tensor(node.args[0]), ones], node.name + "/sum", kernel_shape=list(kernel),
                strides=list(stride), pads=list(pads), group=channels)


def avgpool(b: Builder, node: torch.fx.Node, mod: nn.AvgPool2d) -> str:
    geo = _pool_geometry(b, node, mod)
    total = b.op("Div", [_window_sum(b, node, geo["kernel_shape"], geo["strides"], geo["pads"]),
                         node.name + "/divisor"], node.name)
    kh, kw = geo["kernel_shape"]
    if mod.divisor_override:
        b.scalar(node.name + "/divisor", float(mod.divisor_override))
    elif mod.count_include_pad or not any(geo["pads"]):
        b.scalar(node.name + "/divisor", float(kh * kw))
    else:  # torch divides by the number of input pixels inside each window
        h, w = b.shape(node.args[0])[2:]
        counts = F.conv2d(torch.ones(1, 1, h, w, dtype=torch.float64),
                          torch.ones(1, 1, kh, kw, dtype=torch.float64), stride=geo["strides"],
                          padding=geo["pads"][:2])
        b.init(node.name + "/divisor", counts.float().contiguous().numpy())
    return total


def adaptive_avgpool(b: Builder, node: torch.fx.Node, mod: nn.AdaptiveAvgPool2d) -> str:
    _one_input(node, mod)
    shape = b.shape(node.args[0])
    if len(shape) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape))
    h, w = shape[2:]
    oh, ow = b.shape(node)[2:]
    if (oh, ow) == (1, 1):  # torch computes mean(): sum, then one division by h*w
        total = b.op("ReduceSum", [b.tensor(node.args[0]), b.ints(node.name + "/axes", [2, 3])],
                     node.name + "/sum", keepdims=1)
        return b.op("Div", [total, b.scalar(node.name + "/divisor", float(h * w))], node.name)
    if h % oh or w % ow:
        raise Unsupported("output %s does not divide the input %s (uneven windows)" % ((oh, ow), (h, w)))
    kh, kw = h // oh, w // ow  # torch's kernel divides by kh, then by kw
    total = _window_sum(b, node, (kh, kw), (kh, kw), (0, 0, 0, 0))
    total = b.op("Div", [total, b.scalar(node.name + "/kh", float(kh))], node.name + "/div_kh")
    return b.op("Div", [total, b.scalar(node.name + "/kw", float(kw))], node.name)


def _resize(b: Builder, node: torch.fx.Node, mode: str, call: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Nearest resize as Gather(rows) then Gather(cols), with the source indices torch computes;
    bilinear where it is exact (``bilinear.py``)."""
    if mode == "bilinear":
        return bilinear(b, node, call)
    if mode not in ("nearest", "nearest-exact"):
        raise Unsupported("mode %r (only 'nearest', 'nearest-exact' and 'bilinear' resize exactly)" % mode)
    shape = b.shape(node.args[0])
    if len(shape) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape))
    h, w = shape[2:]
    rows = torch.arange(h, dtype=torch.float32).view(h, 1).expand(h, w)
    cols = torch.arange(w, dtype=torch.float32).view(1, w).expand(h, w)
    with torch.no_grad():
        probe = call(torch.stack([rows, cols]).unsqueeze(0).contiguous())
    r, c = probe[0, 0, :, 0], probe[0, 1, 0, :]
    if (tuple(probe.shape[2:]) != tuple(b.shape(node)[2:]) or not bool((probe[0, 0] == r[:, None]).all())
            or not bool((probe[0, 1] == c[None, :]).all())):
        raise Unsupported("the resize is not a separable row/column selection")
    y = b.op("Gather", [b.tensor(node.args[0]), b.ints(node.name + "/rows", r.long().tolist())],
             node.name + "/rows_gathered", axis=2)
    return b.op("Gather", [y, b.ints(node.name + "/cols", c.long().tolist())], node.name, axis=3)


def upsample(b: Builder, node: torch.fx.Node, mod: nn.Upsample) -> str:
    return _resize(b, node, mod.mode, mod)


def interpolate(b: Builder, node: torch.fx.Node, mod: None) -> str:
    args = b.static(tuple(node.args[1:]))
    kwargs = {k: b.static(v) for k, v in node.kwargs.items()}
    mode = arg(node, 3, "mode", "nearest")
    return _resize(b, node, mode, lambda t: F.interpolate(t, *args, **kwargs))
