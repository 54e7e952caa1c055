"""ONNX handlers of the float operators (Sigmoid, Tanh, SiLU, GELU, Softmax, mean), constant
padding, the unfused BatchNorm and the pieces of chunk/split; the registries in ``handlers.py``
list them. An element-wise float operator on a quantized input is a table of torch's own values
(``element_table``)."""
from typing import Any, Callable, Optional, Tuple

import numpy as np
import torch
import torch.fx
import torch.nn as nn

from .builder import Builder, Unsupported, arg, is_fake_quant, pow2


def grid_of(b: Builder, x: Any) -> Optional[Tuple[int, int]]:
    """``(fix_pos, bitwidth)`` when tensor ``x`` is a fake_quant's output (its values lie on that
    grid), else None."""
    if not (isinstance(x, torch.fx.Node) and x.op == "call_function" and is_fake_quant(x.target)):
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
    grid = grid_of(b, x) if len(node.args) == 1 and not node.kwargs else None
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


def unary(op_type: str) -> Callable[[Builder, torch.fx.Node, Any], str]:
    def handler(b: Builder, node: torch.fx.Node, mod: Any) -> str:
        return _element_table(b, node, mod, lambda: b.op(op_type, [b.tensor(node.args[0])], node.name))
    return handler


def silu(b: Builder, node: torch.fx.Node, mod: Any) -> str:
    def standard() -> str:
        x = b.tensor(node.args[0])
        return b.op("Mul", [x, b.op("Sigmoid", [x], node.name + "/sigmoid")], node.name)
    return _element_table(b, node, mod, standard)


def gelu(b: Builder, node: torch.fx.Node, mod: Optional[nn.GELU]) -> str:
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


def softmax(b: Builder, node: torch.fx.Node, mod: Optional[nn.Softmax]) -> str:
    dim = mod.dim if mod is not None else b.static(arg(node, 1, "dim"))
    if dim is None:
        raise Unsupported("softmax without dim")
    return b.op("Softmax", [b.tensor(node.args[0])], node.name, axis=int(dim) % len(b.shape(node.args[0])))


def mean(b: Builder, node: torch.fx.Node, mod: None) -> str:
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


def pad(b: Builder, node: torch.fx.Node, mod: Optional[nn.ZeroPad2d]) -> str:
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


def batch_norm(b: Builder, node: torch.fx.Node, mod: nn.modules.batchnorm._BatchNorm) -> str:
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


def getitem(b: Builder, node: torch.fx.Node, mod: None) -> str:
    """One piece of a chunk/split (Slice along its dim, bounds from the traced sizes), or a
    tensor indexed by slices (``x[:, :8]``, see ``_slice``)."""
    base, index = node.args
    if not is_split(base):
        return _slice(b, node, base, index)
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


def _slice(b: Builder, node: torch.fx.Node, x: Any, index: Any) -> str:
    """``x[s0, s1, ...]`` with constant, positive-step slices (dims from the left; an Ellipsis
    stands for the full slices it covers) as one Slice; ``x[i]`` as a Gather; other integers,
    None, tensors and a slice of the batch dimension are refused."""
    index = b.static(index)
    index = index if isinstance(index, tuple) else (index,)
    size = b.shape(x)
    if len(index) == 1 and isinstance(index[0], int) and not isinstance(index[0], bool):
        # x[i]: aten::select of dim 0, a Gather by a scalar index (drops the dimension)
        if 0 in b.batch_dims(x):
            raise Unsupported("selecting along the batch dimension")
        return b.op("Gather", [b.tensor(x), b.index(node.name + "/index", index[0] % size[0])],
                    node.name, axis=0)
    index = tuple(slice(*(b.static(v) for v in (i.start, i.stop, i.step))) if isinstance(i, slice) else i
                  for i in index)  # a bound from the traced sizes (x[:, :H]) is a number here
    if any(i is Ellipsis for i in index):
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(size) - len(index) + 1) + index[at + 1:]
    if not all(isinstance(i, slice) for i in index):
        raise Unsupported("indexing a tensor by %s (only slices: x[:, a:b])" % (index,))
    starts, ends, axes, steps = [], [], [], []
    for dim, piece in enumerate(index):
        if not all(v is None or isinstance(v, int) for v in (piece.start, piece.stop, piece.step)):
            raise Unsupported("a slice bound is not a constant: %s" % (piece,))
        start, stop, step = piece.indices(size[dim])
        if step <= 0:
            raise Unsupported("slice step %d (only positive steps)" % step)
        if (start, stop, step) == (0, size[dim], 1):
            continue
        if dim in b.batch_dims(x):
            raise Unsupported("slicing the batch dimension")
        starts.append(start)
        ends.append(stop)
        axes.append(dim)
        steps.append(step)
    if not axes:  # x[:] and the like
        return b.op("Identity", [b.tensor(x)], node.name)
    return b.op("Slice", [b.tensor(x), b.ints(node.name + "/starts", starts), b.ints(node.name + "/ends", ends),
                          b.ints(node.name + "/axes", axes), b.ints(node.name + "/steps", steps)], node.name)
