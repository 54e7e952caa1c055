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

from .builder import ROUNDING_METHODS, Builder, Unsupported, arg, pair, pow2

FAKE_QUANT_MODULE = "pipeline.quantizers.fixpoint"
FAKE_QUANT_NAME = "fake_quant"



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


def _pool_geometry(b: Builder, node: torch.fx.Node, mod: Any) -> Dict[str, Any]:
    """kernel/stride/pads/dilations of a 2-D pool; refuses ceil_mode when it changes the output."""
    _one_input(node, mod)
    kernel = pair(mod.kernel_size)
    stride = pair(mod.stride or mod.kernel_size)  # torch: stride None (or []) means the kernel
    pad = pair(mod.padding)
    dil = pair(getattr(mod, "dilation", 1))
    shape_in, shape_out = b.shape(node.args[0]), b.shape(node)
    if len(shape_in) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape_in))
    floor_out = tuple((shape_in[2 + i] + 2 * pad[i] - dil[i] * (kernel[i] - 1) - 1) // stride[i] + 1
                      for i in range(2))
    if tuple(shape_out[2:]) != floor_out:
        raise Unsupported("output %s differs from the floor-mode output %s (ceil_mode)"
                           % (tuple(shape_out), floor_out))
    return {"kernel_shape": list(kernel), "strides": list(stride), "pads": list(pad) * 2,
            "dilations": list(dil)}


def _maxpool(b: Builder, node: torch.fx.Node, mod: nn.MaxPool2d) -> str:
    if mod.return_indices:
        raise Unsupported("return_indices=True")
    return b.op("MaxPool", [b.tensor(node.args[0])], node.name, **_pool_geometry(b, node, mod))


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


def _nearest(b: Builder, node: torch.fx.Node, mode: str, call: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Nearest resize as Gather(rows) then Gather(cols), with the source indices torch computes."""
    if mode not in ("nearest", "nearest-exact"):
        raise Unsupported("mode %r (only 'nearest' and 'nearest-exact' resize exactly)" % mode)
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
    return _nearest(b, node, mod.mode, mod)


def _interpolate(b: Builder, node: torch.fx.Node, mod: None) -> str:
    args = b.static(tuple(node.args[1:]))
    kwargs = {k: b.static(v) for k, v in node.kwargs.items()}
    mode = arg(node, 3, "mode", "nearest")
    return _nearest(b, node, mode, lambda t: F.interpolate(t, *args, **kwargs))


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


def _grid_of(b: Builder, x: Any) -> Optional[Tuple[int, int]]:
    """``(fix_pos, bitwidth)`` when tensor ``x`` is a fake_quant's output (its values lie on that
    grid), else None."""
    if not (isinstance(x, torch.fx.Node) and x.op == "call_function" and _is_fake_quant(x.target)):
        return None
    fix_pos, bitwidth = b.static(arg(x, 1, "fix_pos")), b.static(arg(x, 2, "bitwidth"))
    if isinstance(fix_pos, int) and isinstance(bitwidth, int) and 2 <= bitwidth <= 16:
        return fix_pos, bitwidth
    return None


def _element_table(b: Builder, node: torch.fx.Node, mod: Any, standard: Callable[[], str]) -> str:
    """An element-wise float operator. When its input lies on a fake_quant grid (always, unless
    it follows an unquantized node): a Gather from the table of torch's own values for every code
    (the op as the model calls it, on all 2^b codes), so ONNX Runtime gives torch's bits in both
    flavours (its Sigmoid, Tanh and Erf differ from torch's in the last bits, which a float output
    shows and a following quantization can turn into 1 LSB). Otherwise ``standard()``, the
    standard ONNX op."""
    x = node.args[0]
    grid = _grid_of(b, x) if len(node.args) == 1 and not node.kwargs else None
    if grid is None:
        return standard()
    fix_pos, bitwidth = grid
    lo, hi = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
    codes = torch.arange(lo, hi + 1, dtype=torch.float32) * pow2(-fix_pos)
    with torch.no_grad():
        if node.op == "call_module":
            values = mod(codes)
        elif node.op == "call_method":
            values = getattr(codes, node.target)()
        else:
            values = node.target(codes)
    if not isinstance(values, torch.Tensor) or values.shape != codes.shape or values.dtype != torch.float32:
        return standard()
    name = node.name
    index = b.op("Sub", [b.op("Mul", [b.tensor(x), b.scalar(name + "/amp", pow2(fix_pos))], name + "/scaled"),
                         b.scalar(name + "/lo", float(lo))], name + "/offset")
    from onnx import TensorProto
    index = b.op("Cast", [index], name + "/index", to=TensorProto.INT64)
    return b.op("Gather", [b.init(name + "/table", values.numpy()), index], name, axis=0)


def _unary(op_type: str) -> Callable[[Builder, torch.fx.Node, Any], str]:
    def handler(b: Builder, node: torch.fx.Node, mod: Any) -> str:
        return _element_table(b, node, mod, lambda: b.op(op_type, [b.tensor(node.args[0])], node.name))
    return handler


def _silu(b: Builder, node: torch.fx.Node, mod: Any) -> str:
    def standard() -> str:
        x = b.tensor(node.args[0])
        return b.op("Mul", [x, b.op("Sigmoid", [x], node.name + "/sigmoid")], node.name)
    return _element_table(b, node, mod, standard)


def _gelu(b: Builder, node: torch.fx.Node, mod: Optional[nn.GELU]) -> str:
    """torch's exact GELU, ``x * 0.5 * (1 + erf(x * sqrt(1/2)))`` (the tanh form is refused)."""
    approximate = mod.approximate if mod is not None else b.static(node.kwargs.get("approximate", "none"))
    if approximate != "none":
        raise Unsupported("GELU(approximate=%r): only the exact erf form" % approximate)
    return _element_table(b, node, mod, lambda: _gelu_erf(b, node))


def _gelu_erf(b: Builder, node: torch.fx.Node) -> str:
    x = b.tensor(node.args[0])
    e = b.op("Erf", [b.op("Mul", [x, b.scalar(node.name + "/rsqrt2", 0.7071067811865476)], node.name + "/scaled")],
             node.name + "/erf")
    one = b.op("Add", [e, b.scalar(node.name + "/one", 1.0)], node.name + "/one_plus")
    half = b.op("Mul", [x, b.scalar(node.name + "/half", 0.5)], node.name + "/half_x")
    return b.op("Mul", [half, one], node.name)


def _softmax(b: Builder, node: torch.fx.Node, mod: Optional[nn.Softmax]) -> str:
    dim = mod.dim if mod is not None else b.static(arg(node, 1, "dim"))
    if dim is None:
        raise Unsupported("softmax without dim")
    return b.op("Softmax", [b.tensor(node.args[0])], node.name, axis=int(dim) % len(b.shape(node.args[0])))


def _mean(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """``mean(dim, keepdim)`` as ReduceSum then Div by the count: torch's sum and division, exact
    on quantized inputs (their partial sums are exact in any order)."""
    rank = len(b.shape(node.args[0]))
    dim = b.static(arg(node, 1, "dim", None))
    dims = list(range(rank)) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    axes = sorted(int(d) % rank for d in dims)
    keep = int(bool(b.static(arg(node, 2, "keepdim", False))))
    if node.kwargs.get("dtype") is not None:
        raise Unsupported("mean with a dtype")
    count = 1
    for a in axes:
        count *= b.shape(node.args[0])[a]
    total = b.op("ReduceSum", [b.tensor(node.args[0]), b.ints(node.name + "/axes", axes)], node.name + "/sum",
                 keepdims=keep)
    return b.op("Div", [total, b.scalar(node.name + "/count", float(count))], node.name)


def _pad(b: Builder, node: torch.fx.Node, mod: Optional[nn.ZeroPad2d]) -> str:
    """Constant padding (F.pad mode 'constant', nn.ZeroPad2d) as Pad; torch lists the last
    dimension first, ONNX every dimension's begins then ends."""
    if mod is not None:
        pad, value, mode = list(mod.padding), 0.0, "constant"
    else:
        pad = list(b.static(arg(node, 1, "pad")))
        mode = b.static(arg(node, 2, "mode", "constant"))
        value = b.static(arg(node, 3, "value", None))
    if mode != "constant":
        raise Unsupported("pad mode %r (only 'constant')" % mode)
    rank = len(b.shape(node.args[0]))
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(begins + ends) < 0:
        raise Unsupported("negative padding")
    return b.op("Pad", [b.tensor(node.args[0]), b.ints(node.name + "/pads", begins + ends),
                        b.scalar(node.name + "/value", float(value or 0.0))], node.name, mode="constant")


def _batch_norm(b: Builder, node: torch.fx.Node, mod: nn.modules.batchnorm._BatchNorm) -> str:
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


SPLIT_FUNCTIONS = (torch.chunk, torch.split)
SPLIT_METHODS = ("chunk", "split")


def is_split(node: Any) -> bool:
    return isinstance(node, torch.fx.Node) and (
        (node.op == "call_function" and node.target in SPLIT_FUNCTIONS)
        or (node.op == "call_method" and node.target in SPLIT_METHODS))


def _getitem(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """One piece of a chunk/split (Slice along its dim, bounds from the traced sizes)."""
    base, index = node.args
    if not is_split(base):
        raise Unsupported("indexing a tensor (only the pieces of chunk/split)")
    x = base.args[0]
    size = b.shape(x)
    dim = int(b.static(arg(base, 2, "dim", 0))) % len(size)
    how = b.static(arg(base, 1, "chunks" if base.target in ("chunk", torch.chunk) else "split_size_or_sections"))
    if base.target in ("chunk", torch.chunk):
        step = -(-size[dim] // int(how))
        bounds = [(i, min(i + step, size[dim])) for i in range(0, size[dim], step)]
    elif isinstance(how, int):
        bounds = [(i, min(i + how, size[dim])) for i in range(0, size[dim], how)]
    else:
        starts = np.cumsum([0] + list(how)).tolist()
        bounds = list(zip(starts[:-1], starts[1:]))
    start, end = bounds[int(b.static(index))]
    if dim in b.batch_dims(x):
        raise Unsupported("splitting the batch dimension")
    return b.op("Slice", [b.tensor(x), b.ints(node.name + "/starts", [start]), b.ints(node.name + "/ends", [end]),
                          b.ints(node.name + "/axes", [dim])], node.name)


# Literal registries: what the exporter writes. Exact type / object / name matches only.
MODULE_HANDLERS = {
    nn.Conv2d: _conv,
    nn.ConvTranspose2d: _conv_transpose,
    nn.Linear: _linear,
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
    nn.Sigmoid: _unary("Sigmoid"),
    nn.Tanh: _unary("Tanh"),
    nn.SiLU: _silu,
    nn.GELU: _gelu,
    nn.Softmax: _softmax,
    nn.ZeroPad2d: _pad,
    nn.BatchNorm1d: _batch_norm,
    nn.BatchNorm2d: _batch_norm,
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
    torch.sigmoid: _unary("Sigmoid"), torch.tanh: _unary("Tanh"), F.silu: _silu, F.gelu: _gelu,
    torch.softmax: _softmax, F.softmax: _softmax, torch.mean: _mean, F.pad: _pad,
    operator.getitem: _getitem,
}  # type: Dict[Any, Callable[..., str]]

METHOD_HANDLERS = {
    "add": _binary("Add"), "sub": _binary("Sub"), "mul": _binary("Mul"), "div": _binary("Div"),
    "clamp": _clamp, "relu": _relu,
    "flatten": _reshape, "view": _reshape, "reshape": _reshape,
    "squeeze": _reshape, "unsqueeze": _reshape,
    "permute": _permute, "transpose": _transpose,
    "contiguous": _alias,
    "sigmoid": _unary("Sigmoid"), "tanh": _unary("Tanh"), "softmax": _softmax, "mean": _mean,
}  # type: Dict[str, Callable[..., str]]


def _is_fake_quant(target: Any) -> bool:
    return (getattr(target, "__module__", None) == FAKE_QUANT_MODULE
            and getattr(target, "__name__", None) == FAKE_QUANT_NAME)


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
        if _is_fake_quant(node.target):
            return _fake_quant, None
        try:
            return FUNCTION_HANDLERS.get(node.target), None
        except TypeError:  # an unhashable target
            return None, None
    if node.op == "call_method":
        return METHOD_HANDLERS.get(node.target), None
    return None, None
