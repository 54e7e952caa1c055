"""What each node of the lowered test-mode model becomes in ONNX, flavour-independent (the same
float32 arithmetic torch computes; see the package docstring). Each handler gets (builder, fx
node, module or None) and returns the ONNX tensor name of the node's result; it raises
Unsupported with the reason when an argument cannot be written.

This module holds the tensor and layout ops and the registries; the layers (convolutions, linear,
activations, pools, resizing) are in ``layer_ops.py``, the float operators in ``float_ops.py``."""
import operator
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from .....fx.attention import SCALED_DOT_PRODUCT_ATTENTION
from .builder import ROUNDING_METHODS, Builder, Unsupported, arg, is_fake_quant
from .float_ops import batch_norm, gelu, getitem, mean, pad, silu, softmax, unary
from .layer_norm import layer_norm_module
from .layer_ops import (adaptive_avgpool, avgpool, clamp, conv, conv_transpose, functional, hardtanh, interpolate, leaky,
                        linear, maxpool, relu, relu6_fn, upsample)


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
    """``F.scaled_dot_product_attention`` (``fx.attention.SCALED_DOT_PRODUCT_ATTENTION``): refused. torch's CPU kernel (a blocked, online softmax
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
    nn.Conv2d: conv,
    nn.ConvTranspose2d: conv_transpose,
    nn.Linear: linear,
    nn.modules.linear.NonDynamicallyQuantizableLinear: linear,  # nn.MultiheadAttention's out_proj
    nn.ReLU: relu,
    nn.ReLU6: hardtanh,
    nn.Hardtanh: hardtanh,
    nn.LeakyReLU: leaky,
    nn.MaxPool2d: maxpool,
    nn.AvgPool2d: avgpool,
    nn.AdaptiveAvgPool2d: adaptive_avgpool,
    nn.Upsample: upsample,
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
    torch.clamp: clamp,
    torch.relu: relu, F.relu: relu,
    F.relu6: relu6_fn,
    F.leaky_relu: leaky,
    F.interpolate: interpolate,
    F.max_pool2d: functional(("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
                             {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                              "return_indices": False})(maxpool),
    F.avg_pool2d: functional(("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                              "divisor_override"),
                             {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                              "divisor_override": None})(avgpool),
    F.adaptive_avg_pool2d: functional(("output_size",), {})(adaptive_avgpool),
    torch.flatten: _reshape, torch.reshape: _reshape,
    torch.squeeze: _reshape, torch.unsqueeze: _reshape,
    torch.permute: _permute, torch.transpose: _transpose,
    torch.select: _select, SCALED_DOT_PRODUCT_ATTENTION: _attention,
    torch.sigmoid: unary("Sigmoid"), torch.tanh: unary("Tanh"), F.silu: silu, F.gelu: gelu,
    torch.softmax: softmax, F.softmax: softmax, torch.mean: mean, F.pad: pad,
    operator.getitem: getitem,
    torch.matmul: _matmul, operator.matmul: _matmul,
    torch.roll: _roll,
}  # type: Dict[Any, Callable[..., str]]

METHOD_HANDLERS = {
    "add": _binary("Add"), "sub": _binary("Sub"), "mul": _binary("Mul"), "div": _binary("Div"),
    "clamp": clamp, "relu": relu,
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
