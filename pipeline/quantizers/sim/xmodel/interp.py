"""Run an XIR graph (an :class:`xgraph.XGraph`: the writer's, or a file rebuilt by ``reader.check``) on
the CPU with torch, bit for bit as the simulation's test-mode model computes it.

Layout. Every value is a float32 tensor of the file's dims (the file's layout: a 4-D feature map
is NHWC). Where the simulation holds the same values in NCHW memory, the interpreter keeps that
memory and hands out an NHWC *view* of it (``permute(0, 2, 3, 1)``): a 4-D data op's input is the
caller's NCHW tensor seen as NHWC, and convolutions, pools and resizes run on NCHW tensors, as the
simulation does, and return NHWC views of their NCHW results. Element-wise torch ops on such views
run over the memory in the same order as on the simulation's tensors, and the layout-sensitive ops
(softmax, reductions, ``scale``) run on the NCHW tensor, with the axis mapped. So every op is the
same torch call on the same memory layout as in the simulation, which makes the results equal bit
for bit (the sums of convolutions and matmuls of values on fix-point grids are moreover exact in
float32 in any order for these sizes; see :func:`run` for the limits).

Semantics per op type (``_OPS``; XIR's definitions, restated where the simulation differs):

- ``data``: the caller's input (see :func:`run`); ``const``: its ``data`` as float32 of its ``shape``;
- ``fix``: ``fixpoint.fake_quant(x, fix_point, bit_width, "half_up")`` for DPU_ROUND (signed),
  ``"std_round"`` for STD_ROUND, ties to even for PY3_ROUND; unsigned: codes clamped to
  ``[0, 2**bit_width - 1]``;
- ``conv2d``/``depthwise-conv2d``: ``F.conv2d`` on NCHW, weights OHWI -> OIHW (depthwise: the file's
  ``(multiplier, kh, kw, C)`` is torch's ``(C * multiplier, 1, kh, kw)`` with out channel
  ``m * C + c``, nndct's reshape); ``transposed-conv2d``/``transposed-depthwise-conv2d``: the H/W flip
  undone, ``(out/groups, kh, kw, in)`` -> torch's ``(in, out/groups, kh, kw)``, ``F.conv_transpose2d``
  with ``output_padding = pad_top - pad_bottom, pad_left - pad_right``. Attributes: kernel, stride,
  dilation ``[w, h]``; pad ``[left, right, top, bottom]`` (asymmetric: padded explicitly first);
- ``maxpool2d``/``avgpool2d``: ``F.max_pool2d``/``F.avg_pool2d`` (``ceil_mode`` from pad_mode CEIL,
  ``count_include_pad``); ``global``: ``F.adaptive_avg_pool2d(x, 1)`` (the simulation's
  AdaptiveAvgPool2d) / ``F.adaptive_max_pool2d(x, 1)``;
- ``add``/``sub``/``mul``/``div``/``min``/``max``: torch's broadcasting ops, folded left over the
  inputs. A ``mul`` of a ``hard-sigmoid`` op by a 1-element const ``c`` (or its fix) is the writer's
  hsigmoid/hswish pattern, computed as the simulation does: ``torch.mul(torch.clamp(torch.add(x, 3.0),
  0.0, 6.0), float32(c / 6))`` (``c / 6`` in float64: ``2731/16384`` for nndct's
  ``c = 6 * 2731/16384``) with ``x`` the hard-sigmoid's input;
- ``hard-sigmoid`` by itself: XIR's ``relu6(x + 3) / 6`` (``torch.div(torch.clamp(x + 3, 0, 6), 6.0)``);
  ``hard-swish``: ``x * relu6(x + 3) / 6``; ``hard-tanh``: ``clamp(x, -1, 1)``;
- ``relu``, ``relu6``, ``leaky-relu`` (``alpha``), ``prelu``, ``elu``, ``celu``, ``selu``,
  ``sigmoid``, ``swish``, ``mish``, ``tanh``, ``exp``, ``neg``, ``gelu`` (``approximate`` ``'none'``
  or ``'tanh'``, quotes included, as nndct writes it; none: erf): torch's functions;
- ``softmax`` (``axis``), ``reduction_mean``/``_sum``/``_max``/``_product`` (``axis``, ``keep_dims``);
- ``scale``: ``F.batch_norm(x, zeros, ones, scale, bias, False, 0.0, 0.0)`` over ``axis`` (-1: the last);
- ``matmul``: ``F.linear(a, b, bias)`` when only ``transpose_b`` is set and ``b`` is 2-D (the
  simulation's nn.Linear), else ``torch.matmul`` then ``torch.add`` of the bias;
- ``concat`` (``axis``), ``reshape`` and ``squeeze`` (to the op's output dims), ``flatten``,
  ``transpose`` (``order``), ``strided_slice`` (TensorFlow's begin/end/strides and masks, made dense
  as libxir does; negative strides are not run), ``stack``, ``shape``, ``pad`` (CONSTANT);
- ``resize``: ``F.interpolate`` on NCHW; NEAREST (``nearest-exact`` with ``half_pixel_centers``) or
  BILINEAR (``align_corners``), with ``scale_factor = (scale[1], scale[0])`` from the ``scale``
  attribute ``[w, h]``, or the output size when the op has a ``size`` input;
- custom op types (``aten::silu``, ``aten::mean``, ``nndct_clamp``, ...): the file carries only their
  output ``shape`` and ``data_type``. The caller's ``float_ops[op name]`` computes them; without one,
  ``aten::silu`` is ``F.silu`` and ``aten::mean`` the mean over the dims the output drops (see
  :func:`_mean`); any other raises :class:`InterpreterError`.

``verify.compare`` runs a graph against the simulation (the writer's self-check), with the custom
ops' functions taken from the simulation's test-mode model.
"""
import re
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F

from ....errors import ExportError
from ... import fixpoint
from . import opdefs, shapes
from .xgraph import XGraph, XOp

FloatOp = Callable[[List[torch.Tensor]], torch.Tensor]
Inputs = Dict[str, List[torch.Tensor]]
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)
_INPUT_NAME = re.compile(r"input_(\d+)$")


class InterpreterError(ExportError):
    """The graph cannot be run as asked: an op type or case the interpreter does not cover, a custom
    op without semantics, inputs that do not fit the data ops. The message names the op."""


def _error(op: XOp, text: str) -> InterpreterError:
    return InterpreterError("xmodel interpreter: op %r (%s): %s" % (op.name, op.type, text))


# --------------------------------------------------------------------------------------- layout
def _nchw(op: XOp, x: torch.Tensor) -> torch.Tensor:
    """A 4-D NHWC value as a contiguous NCHW tensor (no copy when its memory is NCHW already)."""
    if x.dim() != 4:
        raise _error(op, "expects a 4-D NHWC input, got dims %s" % list(x.shape))
    return x.permute(TO_NCHW).contiguous()


def _model_layout(x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, ...]]:
    """``(t, perm)`` with ``x == t.permute(inverse(perm))``: a 4-D value held in NCHW memory as that
    NCHW tensor (``perm`` = (0, 3, 1, 2): dim ``j`` of ``t`` is dim ``perm[j]`` of ``x``), anything
    else as itself."""
    if x.dim() == 4 and not x.is_contiguous() and x.permute(TO_NCHW).is_contiguous():
        return x.permute(TO_NCHW), TO_NCHW
    return x, tuple(range(x.dim()))


def _in_model_layout(x: torch.Tensor, axes: Sequence[int],
                     fn: Callable[[torch.Tensor, List[int]], torch.Tensor]) -> torch.Tensor:
    """``fn(t, mapped axes)`` on ``x`` in the simulation's memory layout, the result back in the
    file's layout (``fn`` must keep the rank)."""
    t, perm = _model_layout(x)
    y = fn(t, [perm.index(a % x.dim()) for a in axes])
    if perm == tuple(range(x.dim())):
        return y
    return y.permute([perm.index(i) for i in range(len(perm))])


def _checked(op: XOp, y: torch.Tensor) -> torch.Tensor:
    if list(y.shape) != list(op.shape):
        raise _error(op, "computes dims %s, but the file says %s (a pad_mode or padding case the interpreter "
                         "does not reproduce)" % (list(y.shape), list(op.shape)))
    return y


# --------------------------------------------------------------------------------------- ops
def _one(ins: Inputs, arg: str = "input") -> torch.Tensor:
    return ins[arg][0]


def _optional(ins: Inputs, arg: str) -> Optional[torch.Tensor]:
    return ins[arg][0] if ins.get(arg) else None


def _window(op: XOp) -> Tuple[Tuple[int, int], Tuple[int, int], Tuple[int, int], List[int]]:
    """(kernel, stride, dilation) as torch's (h, w) pairs, and pad [left, right, top, bottom]."""
    kw, kh = op.attr("kernel")
    sw, sh = op.attr("stride")
    dw, dh = op.attr("dilation", [1, 1])
    return (kh, kw), (sh, sw), (dh, dw), list(op.attr("pad", [0, 0, 0, 0]))


def _padded(x: torch.Tensor, pad: List[int], value: float = 0.0) -> Tuple[torch.Tensor, Tuple[int, int]]:
    """``x`` and torch's symmetric ``padding``; an asymmetric pad is applied explicitly first."""
    left, right, top, bottom = pad
    if left == right and top == bottom:
        return x, (top, left)
    return F.pad(x, (left, right, top, bottom), value=value), (0, 0)


def _conv(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, w = _nchw(op, _one(ins)), _one(ins, "weights")
    kernel, stride, dilation, pad = _window(op)
    if op.type == "conv2d":
        weight, groups = w.permute(TO_NCHW).contiguous(), op.attr("group", 1)
    else:  # depthwise: (multiplier, kh, kw, C) -> (multiplier, C, kh, kw) -> (multiplier * C, 1, kh, kw)
        mult, kh, kw, channels = w.shape
        weight, groups = w.permute(TO_NCHW).reshape(mult * channels, 1, kh, kw), channels
    x, padding = _padded(x, pad)
    return _checked(op, F.conv2d(x, weight, _optional(ins, "bias"), stride, padding, dilation, groups)
                    .permute(TO_NHWC))


def _conv_transpose(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, w = _nchw(op, _one(ins)), _one(ins, "weights")
    kernel, stride, dilation, (left, right, top, bottom) = _window(op)
    # the file's (out/groups, kh, kw, in), flipped in H and W, is torch's (in, out/groups, kh, kw);
    # a transposed depthwise conv's (multiplier, kh, kw, C) is torch's (C, multiplier, kh, kw)
    weight = w.flip((1, 2)).permute(3, 0, 1, 2).contiguous()
    groups = op.attr("group", 1) if op.type == "transposed-conv2d" else int(w.shape[3])
    out_pad = (top - bottom, left - right)
    if min(out_pad) < 0:
        raise _error(op, "pad %s: a bottom/right pad larger than the top/left one is not run"
                         % ([left, right, top, bottom],))
    y = F.conv_transpose2d(x, weight, _optional(ins, "bias"), stride, (top, left), out_pad, groups, dilation)
    return _checked(op, y.permute(TO_NHWC))


def _pool(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, is_max = _nchw(op, _one(ins)), op.type == "maxpool2d"
    if op.attr("global", False):
        y = F.adaptive_max_pool2d(x, 1) if is_max else F.adaptive_avg_pool2d(x, 1)
        return _checked(op, y.permute(TO_NHWC))
    kernel, stride, _, pad = _window(op)
    ceil = op.attr("pad_mode") == "CEIL"
    if is_max:
        x, padding = _padded(x, pad, float("-inf"))
        y = F.max_pool2d(x, kernel, stride, padding, 1, ceil)
    else:
        include = bool(op.attr("count_include_pad", True))
        if not include and (pad[0] != pad[1] or pad[2] != pad[3]):
            raise _error(op, "an asymmetric pad %s without count_include_pad is not run" % (pad,))
        x, padding = _padded(x, pad)
        y = F.avg_pool2d(x, kernel, stride, padding, ceil, include)
    return _checked(op, y.permute(TO_NHWC))


def _const_input(op: XOp) -> bool:
    """A const op, or a fix of one."""
    while op.type == "fix":
        op = op.inputs["input"][0]
    return op.type == "const"


def _hard_sigmoid_mul(run: "_Run", op: XOp, ins: Inputs) -> Optional[torch.Tensor]:
    """The writer's hsigmoid/hswish pair ``mul(hard-sigmoid(x), c)`` as the simulation computes it."""
    srcs = op.inputs.get("input", [])
    if op.type != "mul" or len(srcs) != 2:
        return None
    for i in (0, 1):
        sig, const = srcs[i], srcs[1 - i]
        if sig.type == "hard-sigmoid" and _const_input(const) and ins["input"][1 - i].numel() == 1:
            x = run.values[sig.inputs["input"][0].name]
            scale = float(np.float32(float(ins["input"][1 - i].reshape(-1)[0]) / 6.0))
            return torch.mul(torch.clamp(torch.add(x, 3.0), 0.0, 6.0), scale)
    return None


_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "min": torch.minimum,
           "max": torch.maximum}  # type: Dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]


def _binary(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    pair = _hard_sigmoid_mul(run, op, ins)
    if pair is not None:
        return pair
    xs, fn = ins["input"], _BINARY[op.type]
    out = xs[0]
    for other in xs[1:]:
        out = fn(out, other)
    return out


def _unary(fn: Callable[..., torch.Tensor], *attrs: str) -> Callable[["_Run", XOp, Inputs], torch.Tensor]:
    def apply(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
        return fn(_one(ins), *[op.attr(a) for a in attrs])
    return apply


def _gelu(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    approximate = str(op.attr("approximate", "none")).strip("'\"")
    return F.gelu(_one(ins), approximate=approximate)


def _hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.div(torch.clamp(torch.add(x, 3.0), 0.0, 6.0), 6.0)


def _prelu(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, w = _one(ins), _one(ins, "weight")
    return torch.where(x >= 0, x, torch.mul(x, w))  # w: one value, or one per channel (the last axis)


def _softmax(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    return _in_model_layout(_one(ins), [op.attr("axis")], lambda t, a: F.softmax(t, a[0]))


_REDUCTIONS = {"reduction_mean": torch.mean, "reduction_sum": torch.sum, "reduction_product": None,
               "reduction_max": torch.amax}


def _reduction(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, axes, keep = _one(ins), list(op.attr("axis")), bool(op.attr("keep_dims"))
    fn = _REDUCTIONS[op.type]
    if fn is None:  # product: one axis at a time
        def fn(t: torch.Tensor, dim: List[int], keepdim: bool) -> torch.Tensor:
            for d in sorted(dim, reverse=True):
                t = torch.prod(t, d, keepdim)
            return t
    t, perm = _model_layout(x)
    mapped = [perm.index(a % x.dim()) for a in axes]
    y = fn(t, mapped, keepdim=True)
    if perm != tuple(range(x.dim())):
        y = y.permute([perm.index(i) for i in range(len(perm))])
    return y.reshape(op.shape) if not keep or y.dim() != x.dim() else y


def _scale(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, weight, bias = _one(ins), _one(ins, "scale"), _optional(ins, "bias")
    channels = weight.numel()

    def bn(t: torch.Tensor, axes: List[int]) -> torch.Tensor:
        moved = t.movedim(axes[0], 1) if axes[0] != 1 else t
        y = F.batch_norm(moved, torch.zeros(channels), torch.ones(channels), weight.reshape(-1),
                         None if bias is None else bias.reshape(-1), False, 0.0, 0.0)
        return y.movedim(1, axes[0]) if axes[0] != 1 else y
    return _in_model_layout(x, [op.attr("axis", -1)], bn)


def _matmul(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    a, b = ins["input"]
    bias = _optional(ins, "bias")
    if op.attr("transpose_b") and not op.attr("transpose_a") and b.dim() == 2:
        return F.linear(a, b, bias)  # the simulation's nn.Linear
    if op.attr("transpose_a"):
        a = a.transpose(-1, -2)
    if op.attr("transpose_b"):
        b = b.transpose(-1, -2)
    y = torch.matmul(a, b)
    return y if bias is None else torch.add(y, bias)


def _concat(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    xs, axis = ins["input"], op.attr("axis")
    held = [_model_layout(x) for x in xs]
    if len({p for _, p in held}) == 1 and held[0][1] == TO_NCHW:  # all in NCHW memory: concatenate there
        y = torch.cat([t for t, _ in held], TO_NCHW.index(axis % 4))
        return y.permute(TO_NHWC)
    return torch.cat(xs, axis)


def _strided_slice(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x = _one(ins)
    begin, end, strides, _ = shapes._strided_dense(op, list(x.shape))  # libxir's dense form
    if any(s < 0 for s in strides):
        raise _error(op, "negative strides %s are not run" % (strides,))
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].reshape(op.shape)


def _resize(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, mode = _nchw(op, _one(ins)), op.attr("mode")
    if mode == "NEAREST":
        kwargs = {"mode": "nearest-exact" if op.attr("half_pixel_centers") else "nearest"}  # type: Dict[str, Any]
    elif mode == "BILINEAR":
        kwargs = {"mode": "bilinear", "align_corners": bool(op.attr("align_corners"))}
    else:
        raise _error(op, "mode %r is not run (NEAREST, BILINEAR)" % mode)
    scale = op.attr("scale") or []
    if not op.inputs.get("size") and len(scale) == 2:
        y = F.interpolate(x, scale_factor=(float(scale[1]), float(scale[0])), **kwargs)
    else:
        y = F.interpolate(x, size=(op.shape[1], op.shape[2]), **kwargs)
    return _checked(op, y.permute(TO_NHWC))


def _pad(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, paddings = _one(ins), list(op.attr("paddings"))
    if op.attr("mode") != "CONSTANT":
        raise _error(op, "mode %r is not run (CONSTANT)" % op.attr("mode"))
    values = op.attr("constant_values") or [0.0]
    if len(set(values)) > 1:
        raise _error(op, "per-dim constant_values %s are not run" % (values,))
    flat = []  # type: List[int]
    for d in reversed(range(x.dim())):  # F.pad lists the last dim first
        flat += [paddings[2 * d], paddings[2 * d + 1]]
    return F.pad(x, flat, value=float(values[0]))


def _fix(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x = _one(ins)
    point, width, mode, signed = (op.attr(k) for k in ("fix_point", "bit_width", "round_mode", "if_signed"))
    if signed and mode in ("DPU_ROUND", "STD_ROUND"):
        return fixpoint.fake_quant(x, point, width, "half_up" if mode == "DPU_ROUND" else "std_round")
    v = x * 2.0 ** point
    if mode == "DPU_ROUND":
        codes = fixpoint.round_half_up(v)
    elif mode == "STD_ROUND":
        codes = fixpoint.round_std(v)
    elif mode == "PY3_ROUND":
        codes = torch.round(v)
    else:
        raise _error(op, "round_mode %r is none of DPU_ROUND, STD_ROUND, PY3_ROUND" % mode)
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    return codes.clamp_(lo, hi).mul_(2.0 ** -point)


def _mean(op: XOp, x: torch.Tensor) -> torch.Tensor:
    """``aten::mean`` without the model: over the dims the output drops. Equal ranks (keepdim): the
    dims that are 1 in the output and not in the input. Fewer dims: input and output dims matched
    left to right, each input dim that does not match the next output dim reduced
    (``[1, 8, 14, 14] -> [1, 8]`` is the mean over dims 2 and 3)."""
    dims, out = list(x.shape), list(op.shape)
    if len(out) == len(dims):
        reduce = [i for i, (a, b) in enumerate(zip(dims, out)) if b == 1 and a != 1]
        return torch.mean(x, reduce, keepdim=True) if reduce else x
    reduce, j = [], 0
    for i, d in enumerate(dims):
        if j < len(out) and d == out[j] and len(dims) - i > len(out) - j - 1:
            j += 1
        else:
            reduce.append(i)
    if j != len(out):
        raise _error(op, "cannot tell which dims of %s give %s; pass float_ops" % (dims, out))
    return torch.mean(x, reduce)


_BUILT_IN_CUSTOM = {
    "aten::silu": lambda op, xs: F.silu(xs[0]),
    "aten::silu_": lambda op, xs: F.silu(xs[0]),  # nn.SiLU(inplace=True)
    "aten::mean": lambda op, xs: _mean(op, xs[0]),
}  # type: Dict[str, Callable[[XOp, List[torch.Tensor]], torch.Tensor]]


def _custom(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    xs = [x for arg in sorted(ins) for x in ins[arg]]
    if op.name in run.float_ops:
        y = run.float_ops[op.name](xs)
    elif op.type in _BUILT_IN_CUSTOM:
        y = _BUILT_IN_CUSTOM[op.type](op, xs)
    else:
        raise _error(op, "a custom op type: the file carries only its output shape and data type, not what it "
                         "computes; pass float_ops={%r: callable(list of input tensors) -> tensor}" % op.name)
    if not isinstance(y, torch.Tensor):
        raise _error(op, "float_ops gave %s, not a tensor" % type(y).__name__)
    return _checked(op, y.float())


def _const(run: "_Run", op: XOp, ins: Inputs) -> torch.Tensor:
    return torch.from_numpy(op.data())


_OPS = {
    "const": _const,
    "fix": _fix,
    "conv2d": _conv, "depthwise-conv2d": _conv,
    "transposed-conv2d": _conv_transpose, "transposed-depthwise-conv2d": _conv_transpose,
    "maxpool2d": _pool, "avgpool2d": _pool,
    "add": _binary, "sub": _binary, "mul": _binary, "div": _binary, "min": _binary, "max": _binary,
    "relu": _unary(torch.relu), "relu6": _unary(F.relu6), "leaky-relu": _unary(F.leaky_relu, "alpha"),
    "prelu": _prelu, "elu": _unary(F.elu, "alpha"), "celu": _unary(F.celu, "alpha"), "selu": _unary(F.selu),
    "sigmoid": _unary(torch.sigmoid), "swish": _unary(F.silu), "mish": _unary(F.mish), "tanh": _unary(torch.tanh),
    "exp": _unary(torch.exp), "neg": _unary(torch.neg), "gelu": _gelu,
    "hard-sigmoid": _unary(_hard_sigmoid), "hard-swish": _unary(lambda x: torch.mul(x, _hard_sigmoid(x))),
    "hard-tanh": _unary(lambda x: torch.clamp(x, -1.0, 1.0)),
    "softmax": _softmax, "scale": _scale, "matmul": _matmul,
    "reduction_mean": _reduction, "reduction_sum": _reduction, "reduction_max": _reduction,
    "reduction_product": _reduction,
    "concat": _concat, "strided_slice": _strided_slice, "resize": _resize, "pad": _pad,
    "reshape": lambda run, op, ins: _one(ins).reshape(op.shape),
    "squeeze": lambda run, op, ins: _one(ins).reshape(op.shape),
    "flatten": lambda run, op, ins: _one(ins).reshape(op.shape),
    "transpose": lambda run, op, ins: _one(ins).permute(list(op.attr("order"))),
    "stack": lambda run, op, ins: torch.stack(ins["input"], op.attr("axis")),
    "shape": lambda run, op, ins: torch.tensor(list(_one(ins).shape), dtype=torch.float32),
}  # type: Dict[str, Callable[[_Run, XOp, Inputs], torch.Tensor]]


def is_custom(op_type: str) -> bool:
    """True for an op type XIR does not define (its definition is made on the fly)."""
    return opdefs.get(op_type) == opdefs.custom_def(op_type)


# --------------------------------------------------------------------------------------- running
class _Run:
    def __init__(self, float_ops: Mapping[str, FloatOp]) -> None:
        self.float_ops = float_ops
        self.values = {}  # type: Dict[str, torch.Tensor]


def data_ops(graph: XGraph) -> List[XOp]:
    """The data ops in model argument order: by the ``input_<k>`` suffix nndct names them with
    (``<Class>__input_0``, ...) when every data op has a distinct one, else in creation order."""
    ops = [op for op in graph.ops if op.type == "data"]
    keys = [_INPUT_NAME.search(op.name) for op in ops]
    if all(keys) and len({int(k.group(1)) for k in keys}) == len(ops):
        return [op for _, op in sorted(zip([int(k.group(1)) for k in keys], ops), key=lambda p: p[0])]
    return ops


def _laid_out(op: XOp, x: torch.Tensor) -> torch.Tensor:
    """The caller's input as the data op's dims say: a 4-D NCHW tensor seen as NHWC (a view of its
    contiguous memory), else as given."""
    x = x.detach()
    x = x if x.dtype == torch.float32 else x.float()
    dims = list(op.shape)
    if x.dim() == 4 and list(x.permute(TO_NHWC).shape) == dims:
        return x.contiguous().permute(TO_NHWC)
    if list(x.shape) == dims:
        return x
    raise _error(op, "input of dims %s does not fit the data op's %s (NHWC for a 4-D NCHW input; batch %d)"
                 % (list(x.shape), dims, dims[0] if dims else 0))


def run(graph: XGraph, inputs: Union[Sequence[torch.Tensor], Mapping[str, torch.Tensor]],
        float_ops: Optional[Mapping[str, FloatOp]] = None) -> Dict[str, torch.Tensor]:
    """Run every op of ``graph`` in creation order (a topological order).

    Args:
        graph: an XGraph (``writer.build_xgraph``, or ``reader.check`` of a file).
        inputs: one tensor per data op, in model argument order (see :func:`data_ops`), as the model
            takes them: NCHW for a 4-D input whose data op is NHWC; or a mapping data op name ->
            tensor. Batch and sizes must be the data ops' (batch 1 as the quantizer writes them);
            converted to float32 if needed; never modified.
        float_ops: custom op name -> callable taking the op's input tensors (a list, in the file's
            layout: for the custom ops nndct wraps in transposes, the model's layout) and returning
            its output in the file's layout (see :func:`float_ops_from_sim`).

    Returns:
        op name -> float32 output of the file's dims and layout (a 4-D NHWC output may be a view of
        NCHW memory; call ``.contiguous()`` for NHWC memory), for every op.

    Raises:
        InterpreterError: inputs that do not fit the data ops, an op type or case not covered, a
            custom op without ``float_ops`` entry or built-in, or an op that fails (named).

    Bit-exactness: every op is the simulation's torch call on the simulation's memory layout, so the
    results equal the simulation's wherever the file's op is the model's op. Where the file's form
    differs (a pad folded into a conv, a Linear whose weights nndct reordered for an NHWC flatten,
    an adaptive pool written as a plain one), the sums of fix-point values are still exact in
    float32 whatever the summation order while each output sums fewer than
    ``2**24 / 2**14 = 1024`` products of 8-bit codes in the worst case (typical values allow far
    more); beyond that, the CPU kernel's summation order could change a last bit.
    """
    state = _Run(dict(float_ops or {}))
    datas = data_ops(graph)
    if isinstance(inputs, Mapping):
        missing = [op.name for op in datas if op.name not in inputs]
        if missing or len(inputs) != len(datas):
            raise InterpreterError("xmodel interpreter: inputs for %s given, the data ops are %s"
                                   % (sorted(inputs), [op.name for op in datas]))
        given = {op.name: inputs[op.name] for op in datas}
    else:
        if len(inputs) != len(datas):
            raise InterpreterError("xmodel interpreter: %d inputs given, the graph has %d data ops (%s)"
                                   % (len(inputs), len(datas), ", ".join(op.name for op in datas)))
        given = {op.name: x for op, x in zip(datas, inputs)}
    with torch.no_grad():
        for op in graph.ops:
            if op.type == "data":
                state.values[op.name] = _laid_out(op, given[op.name])
                continue
            fn = _custom if is_custom(op.type) else _OPS.get(op.type)
            if fn is None:
                raise _error(op, "op type not covered by the interpreter")
            ins = {arg: [state.values[i.name] for i in ops] for arg, ops in op.inputs.items()}
            try:
                value = fn(state, op, ins)
            except InterpreterError:
                raise
            except (RuntimeError, ValueError, TypeError, IndexError) as e:
                raise _error(op, "failed: %s" % e) from e
            state.values[op.name] = _checked(op, value)
    return state.values


def outputs(graph: XGraph) -> List[str]:
    """The names of the ops no op takes as input (the graph's outputs), in creation order (for a
    graph from ``reader.check``, the file's order)."""
    return [op.name for op in graph.ops if not graph.fanout(op)]


def to_model_layout(x: torch.Tensor) -> torch.Tensor:
    """A value in the model's layout: a 4-D NHWC value as NCHW (a view), anything else as is. (The
    file does not say which axis order a 4-D output had in the model; nndct writes 4-D feature maps
    NHWC.)"""
    return x.permute(TO_NCHW) if x.dim() == 4 else x


def fit_layout(x: torch.Tensor, shape: Sequence[int]) -> Optional[torch.Tensor]:
    """``x`` read in the layout that gives the model's ``shape``: a 4-D value as NCHW from NHWC
    (:func:`to_model_layout`, nndct's usual end) or as it is (a file that ends in a transpose back
    to NCHW, or in an op that keeps torch's layout); None when neither reading fits."""
    for value in (to_model_layout(x), x):
        if list(value.shape) == list(shape):
            return value
    return None


def _by_shape(graph: XGraph, results: Mapping[str, torch.Tensor],
              shapes: Sequence[Sequence[int]]) -> List[Tuple[str, torch.Tensor]]:
    """(op name, value as it is in the file) of the output fitting each shape (:func:`fit_layout`)."""
    names = outputs(graph)
    free = list(range(len(names)))
    ordered = []  # type: List[Tuple[str, torch.Tensor]]
    for shape in shapes:
        match = next((i for i in free if fit_layout(results[names[i]], shape) is not None), None)
        if match is None:
            raise InterpreterError("xmodel interpreter: no output of dims %s among %s"
                                   % (list(shape), [list(results[names[i]].shape) for i in free]))
        free.remove(match)
        ordered.append((names[match], results[names[match]]))
    return ordered


def model_outputs(graph: XGraph, results: Mapping[str, torch.Tensor],
                  shapes: Optional[Sequence[Sequence[int]]] = None) -> List[torch.Tensor]:
    """The graph's outputs (:func:`outputs`) in the model's layout.

    Args:
        graph, results: the graph and what :func:`run` returned for it.
        shapes: the model's output shapes, in the model's order. Given, each is matched to the first
            not yet matched output that fits it (:func:`fit_layout`; the file lists outputs in its own
            order: Detect's second head comes first), and the outputs come back in the model's order.
            Not given, every 4-D output is taken as NHWC (:func:`to_model_layout`).

    Raises:
        InterpreterError: ``shapes`` has a shape no remaining output fits.
    """
    if shapes is None:
        return [to_model_layout(results[name]) for name in outputs(graph)]
    return [fit_layout(value, shape) for (_, value), shape in zip(_by_shape(graph, results, shapes), shapes)]


# --------------------------------------------------------------------------------------- the simulation
