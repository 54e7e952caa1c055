"""What each node of the lowered test-mode model becomes in ONNX, flavour-independent (the same
float32 arithmetic torch computes; see the package docstring). Each handler gets (builder, fx
node, module or None) and returns the ONNX tensor name of the node's result; it raises
Unsupported with the reason when an argument cannot be written."""
import operator
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from .bilinear import bilinear
from .builder import ROUNDING_METHODS, Builder, Unsupported, arg, is_fake_quant, pair
from .float_ops import batch_norm, gelu, getitem, mean, pad, silu, softmax, unary
from .layer_norm import layer_norm_module




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


def _conv(b: Builder, node: torch.fx.Node, mod: nn.Conv2d) -> str:
    inputs = _conv_weights(b, node, mod)
    if isinstance(mod.padding, str):
        total = [d * (k - 1) if mod.padding == "same" else 0
                 for d, k in zip(mod.dilation, mod.kernel_size)]
        pads = [t // 2 for t in total] + [t - t // 2 for t in total]  # torch puts the odd pixel last
    else:
        pads = list(mod.padding) * 2
    return b.op("Conv", inputs, node.name, kernel_shape=list(mod.kernel_size), strides=list(mod.stride),
                pads=pads, dilations=list(mod.dilation), group=mod.groups)


def _conv_transpose(b: Builder, node: torch.fx.Node, mod: nn.ConvTranspose2d) -> str:
    inputs = _conv_weights(b, node, mod)
    return b.op("ConvTranspose", inputs, node.name, kernel_shape=list(mod.kernel_size),
                strides=list(mod.stride), pads=list(mod.padding) * 2, dilations=list(mod.dilation),
                group=mod.groups, output_padding=list(mod.output_padding))


def _linear(b: Builder, node: torch.fx.Node, mod: nn.Linear) -> str:
    inputs = _conv_weights(b, node, mod)
    if len(b.shape(node.args[0])) == 2:
        return b.op("Gemm", inputs, node.name, transB=1)
    y = b.op("MatMul", inputs[:2], node.name if len(inputs) == 2 else node.name + "/matmul")
    return y if len(inputs) == 2 else b.op("Add", [y, inputs[2]], node.name)


def _relu(b: Builder, node: torch.fx.Node, mod: Optional[nn.Module]) -> str:
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


def _hardtanh(b: Builder, node: torch.fx.Node, mod: nn.Hardtanh) -> str:
    return _clip(b, node, float(mod.min_val), float(mod.max_val))


def _relu6_fn(b: Builder, node: torch.fx.Node, mod: None) -> str:
    return _clip(b, node, 0.0, 6.0)


def _clamp(b: Builder, node: torch.fx.Node, mod: None) -> str:
    return _clip(b, node, arg(node, 1, "min", None), arg(node, 2, "max", None))


def _leaky(b: Builder, node: torch.fx.Node, mod: Optional[nn.LeakyReLU]) -> str:
    slope = mod.negative_slope if mod is not None else b.static(arg(node, 1, "negative_slope", 0.01))
    return b.op("LeakyRelu", [b.tensor(node.args[0])], node.name, alpha=float(slope))


def _one_input(node: torch.fx.Node, mod: Any) -> None:
    """A pooling module call takes its input only (functional forms carry their settings as args)."""
    if isinstance(mod, nn.Module) and (len(node.args) != 1 or node.kwargs):
        raise Unsupported("expected one input")


def _functional(names: Sequence[str], defaults: Dict[str, Any]) -> Callable[..., str]:
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


def _maxpool(b: Builder, node: torch.fx.Node, mod: nn.MaxPool2d) -> str:
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


def _avgpool(b: Builder, node: torch.fx.Node, mod: nn.AvgPool2d) -> str:
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


def _adaptive_avgpool(b: Builder, node: torch.fx.Node, mod: nn.AdaptiveAvgPool2d) -> str:
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


def _upsample(b: Builder, node: torch.fx.Node, mod: nn.Upsample) -> str:
    return _resize(b, node, mod.mode, mod)


def _interpolate(b: Builder, node: torch.fx.Node, mod: None) -> str:
    args = b.static(tuple(node.args[1:]))
    kwargs = {k: b.static(v) for k, v in node.kwargs.items()}
    mode = arg(node, 3, "mode", "nearest")
    return _resize(b, node, mode, lambda t: F.interpolate(t, *args, **kwargs))


def _reshape(b: Builder, node: torch.fx.Node, mod: Optional[nn.Module]) -> str:
    """flatten / view / reshape / squeeze / unsqueeze: Reshape to the recorded output shape."""
    target = list(b.shape(node))
    batch = b.batch_dims(node)
    if len(batch) > 1:
        raise Unsupported("the batch size reaches %d output dimensions" % len(batch))
    for i in batch:
        target[i] = -1
    return b.op("Reshape", [b.tensor(node.args[0]), b.ints(node.name + "/shape", target)], node.name)


def _permute(b: Builder, node: torch.fx.Node, mod: None) -> str:
    if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)):
        dims = node.args[1]
    else:
        dims = node.args[1:] or arg(node, 1, "dims")
    rank = len(b.shape(node))
    perm = [int(d) % rank for d in b.static(tuple(dims))]
    return b.op("Transpose", [b.tensor(node.args[0])], node.name, perm=perm)


def _transpose(b: Builder, node: torch.fx.Node, mod: None) -> str:
    rank = len(b.shape(node))
    d0, d1 = (int(b.static(arg(node, i, n))) % rank for i, n in ((1, "dim0"), (2, "dim1")))
    perm = list(range(rank))
    perm[d0], perm[d1] = d1, d0
    return b.op("Transpose", [b.tensor(node.args[0])], node.name, perm=perm)


def _select(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``torch.select(x, dim, index)`` (``x[:, i]``): a Gather of that one index, then Squeeze of the dim."""
    x = arg(node, 0, "input")
    rank = len(b.shape(x))
    dim, index = (int(b.static(arg(node, i, n))) for i, n in ((1, "dim"), (2, "index")))
    dim %= rank
    if dim in b.batch_dims(x):
        raise Unsupported("selecting from the batch dimension")
    index %= b.shape(x)[dim]
    taken = b.op("Gather", [b.tensor(x), b.ints(node.name + "/index", [index])], node.name + "/gathered", axis=dim)
    return b.op("Squeeze", [taken, b.ints(node.name + "/axes", [dim])], node.name)


def _expand(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``x.expand(n, -1, ...)`` where only batch-size-1 dimensions grow with the batch (ViT's class
    token): an Expand to the recorded shape whose batch dimension is the model input's (copies, no
    arithmetic)."""
    x = arg(node, 0, "self")
    shape = list(b.shape(node))
    batch = b.batch_dims(node)
    if len(batch) > 1 or any(shape[i] != 1 for i in batch) or any(i in b.batch_dims(x) for i in batch):
        raise Unsupported("only an expand whose one batch-sized dimension is 1 at batch 1")
    if not batch:
        return b.op("Expand", [b.tensor(x), b.ints(node.name + "/shape", shape)], node.name)
    first = next(iter(b.input_names.values()))
    n = b.op("Shape", [first], node.name + "/input_shape")
    n = b.op("Slice", [n, b.ints(node.name + "/zero", [0]), b.ints(node.name + "/one", [1])], node.name + "/batch")
    parts = [b.ints(node.name + "/dim%d" % i, [d]) if i not in batch else n for i, d in enumerate(shape)]
    target = b.op("Concat", parts, node.name + "/shape", axis=0)
    return b.op("Expand", [b.tensor(x), target], node.name)


def _attention(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``F.scaled_dot_product_attention``: refused. torch's CPU kernel (a blocked, online softmax
    with vectorized exp, normalizing after the second product) and any ONNX composition
    (MatMul, Softmax, MatMul) round differently in the last bits, and the result is quantized right
    after it (its output entry), so ONNX Runtime cannot reproduce the quantizer bit for bit."""
    raise Unsupported("scaled_dot_product_attention (nn.MultiheadAttention) has no bit-exact ONNX "
                      "form: torch's CPU attention kernel and an ONNX MatMul/Softmax/MatMul round "
                      "differently in the last bits before the quantization that follows it")


def _alias(b: Builder, node: torch.fx.Node, mod: Optional[nn.Module]) -> str:
    return b.tensor(node.args[0])


def _cat(b: Builder, node: torch.fx.Node, mod: None) -> str:
    tensors = arg(node, 0, "tensors")
    dim = int(b.static(arg(node, 1, "dim", 0)))
    return b.op("Concat", [b.tensor(t) for t in tensors], node.name, axis=dim % len(b.shape(node)))


def _binary(op_type: str) -> Callable[[Builder, torch.fx.Node, None], str]:
    def handler(b: Builder, node: torch.fx.Node, mod: None) -> str:
        if b.static(node.kwargs.get("alpha", 1)) != 1 or node.kwargs.get("rounding_mode") is not None:
            raise Unsupported("alpha != 1 or a rounding_mode")
        a, c = arg(node, 0, "input"), arg(node, 1, "other")
        return b.op(op_type, [b.operand(a, node.name + "/a"), b.operand(c, node.name + "/b")], node.name)
    return handler


def _matmul(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``a @ b`` (torch.matmul, Tensor.matmul): MatMul, the same broadcasting rules."""
    return b.op("MatMul", [b.tensor(arg(node, 0, "input")), b.tensor(arg(node, 1, "other"))], node.name)


def _roll(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``torch.roll(x, shifts, dims)``: per dimension a Gather by the rolled positions (data moves
    only: exact)."""
    shifts, dims = b.static(arg(node, 1, "shifts")), b.static(arg(node, 2, "dims", None))
    if dims is None:
        raise Unsupported("roll without dims (of the flattened tensor)")
    shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    size = b.shape(node.args[0])
    y = b.tensor(node.args[0])
    for k, (shift, dim) in enumerate(zip(shifts, dims)):
        dim = int(dim) % len(size)
        if dim in b.batch_dims(node.args[0]):
            raise Unsupported("rolling the batch dimension")
        index = [(i - int(shift)) % size[dim] for i in range(size[dim])]
        name = node.name if k == len(dims) - 1 else "%s/dim%d" % (node.name, dim)
        y = b.op("Gather", [y, b.ints("%s/index%d" % (node.name, dim), index)], name, axis=dim)
    return y


def _fake_quant(b: Builder, node: torch.fx.Node, mod: None) -> str:
    x = b.tensor(arg(node, 0, "x"))
    fix_pos, bitwidth, method = (b.static(arg(node, i, n))
                                 for i, n in ((1, "fix_pos"), (2, "bitwidth"), (3, "method")))
    if isinstance(fix_pos, bool) or not isinstance(fix_pos, int) or isinstance(bitwidth, bool) \
            or not isinstance(bitwidth, int) or bitwidth < 2 or method not in ROUNDING_METHODS:
        raise Unsupported("fake_quant(fix_pos=%r, bitwidth=%r, method=%r): expected ints and a "
                           "method in %s" % (fix_pos, bitwidth, method, ROUNDING_METHODS))
    b.fix_table["activations"][node.name] = {"fix_pos": fix_pos, "bitwidth": bitwidth, "method": method}
    return b.quantize(x, node.name, fix_pos, bitwidth, method)


# Literal registries: what the exporter writes. Exact type / object / name matches only.
MODULE_HANDLERS = {
    nn.Conv2d: _conv,
    nn.ConvTranspose2d: _conv_transpose,
    nn.Linear: _linear,
    nn.modules.linear.NonDynamicallyQuantizableLinear: _linear,  # nn.MultiheadAttention's out_proj
    nn.ReLU: _relu,
    nn.ReLU6: _hardtanh,
    nn.Hardtanh: _hardtanh,
    nn.LeakyReLU: _leaky,
    nn.MaxPool2d: _maxpool,
    nn.AvgPool2d: _avgpool,
    nn.AdaptiveAvgPool2d: _adaptive_avgpool,
    nn.Upsample: _upsample,
    nn.Flatten: _reshape,
    nn.Identity: _alias,
    nn.Sigmoid: unary("Sigmoid"),
    nn.Tanh: unary("Tanh"),
    nn.SiLU: silu,
    nn.GELU: gelu,
    nn.Softmax: softmax,
    nn.ZeroPad2d: pad,
    nn.BatchNorm1d: batch_norm,
    nn.BatchNorm2d: batch_norm,
    nn.LayerNorm: layer_norm_module,
}  # type: Dict[type, Callable[..., str]]

FUNCTION_HANDLERS = {
    operator.add: _binary("Add"), torch.add: _binary("Add"),
    operator.sub: _binary("Sub"), torch.sub: _binary("Sub"),
    operator.mul: _binary("Mul"), torch.mul: _binary("Mul"),
    operator.truediv: _binary("Div"), torch.div: _binary("Div"),
    torch.cat: _cat,
    torch.clamp: _clamp,
    torch.relu: _relu, F.relu: _relu,
    F.relu6: _relu6_fn,
    F.leaky_relu: _leaky,
    F.interpolate: _interpolate,
    F.max_pool2d: _functional(("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
                              {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                               "return_indices": False})(_maxpool),
    F.avg_pool2d: _functional(("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                               "divisor_override"),
                              {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                               "divisor_override": None})(_avgpool),
    F.adaptive_avg_pool2d: _functional(("output_size",), {})(_adaptive_avgpool),
    torch.flatten: _reshape, torch.reshape: _reshape,
    torch.squeeze: _reshape, torch.unsqueeze: _reshape,
    torch.permute: _permute, torch.transpose: _transpose,
    torch.select: _select, F.scaled_dot_product_attention: _attention,
    torch.sigmoid: unary("Sigmoid"), torch.tanh: unary("Tanh"), F.silu: silu, F.gelu: gelu,
    torch.softmax: softmax, F.softmax: softmax, torch.mean: mean, F.pad: pad,
    operator.getitem: getitem,
    torch.matmul: _matmul, operator.matmul: _matmul,
    torch.roll: _roll,
}  # type: Dict[Any, Callable[..., str]]

METHOD_HANDLERS = {
    "add": _binary("Add"), "sub": _binary("Sub"), "mul": _binary("Mul"), "div": _binary("Div"),
    "clamp": _clamp, "relu": _relu,
    "flatten": _reshape, "view": _reshape, "reshape": _reshape,
    "squeeze": _reshape, "unsqueeze": _reshape, "unflatten": _reshape,
    "select": _select, "expand": _expand,
    "permute": _permute, "transpose": _transpose,
    "contiguous": _alias, "matmul": _matmul,
    "sigmoid": unary("Sigmoid"), "tanh": unary("Tanh"), "softmax": softmax, "mean": mean,
}  # type: Dict[str, Callable[..., str]]


def target_name(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return "%s (%s)" % (node.target, type(gm.get_submodule(node.target)).__name__)
    if callable(node.target):
        return "%s.%s" % (getattr(node.target, "__module__", None) or "",
                          getattr(node.target, "__name__", repr(node.target)))
    return str(node.target)


def handler_of(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Tuple[Optional[Callable[..., str]], Any]:
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        return MODULE_HANDLERS.get(type(mod)), mod
    if node.op == "call_function":
        if is_fake_quant(node.target):
            return _fake_quant, None
        try:
            return FUNCTION_HANDLERS.get(node.target), None
        except TypeError:  # an unhashable target
            return None, None
    if node.op == "call_method":
        return METHOD_HANDLERS.get(node.target), None
    return None, None
