"""The xmodel interpreter's op table: what each XIR op type computes, as torch calls on the
simulation's memory layout (``interp.run`` walks the graph and calls them).

Semantics per op type (``OPS``; XIR's definitions, restated where the simulation differs):

- ``data``: the caller's input (see ``interp.run``); ``const``: its ``data`` as float32 of its ``shape``;
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
  :func:`_mean`); any other raises ``interp_base.InterpreterError``. ``nndct_adaptive_avg_pool2d``
  (an adaptive pool whose output size does not divide its input, left unscaled) has NHWC input and
  output: ``F.adaptive_avg_pool2d`` on NCHW to the op's output size, always built in.
"""
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from .. import fixpoint
from . import opdefs, shapes_layout
from .interp_base import TO_NCHW, TO_NHWC, Inputs, Run, checked, in_model_layout, model_layout, nchw, op_error
from .xgraph import XOp

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


def _conv(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, w = nchw(op, _one(ins)), _one(ins, "weights")
    kernel, stride, dilation, pad = _window(op)
    if op.type == "conv2d":
        weight, groups = w.permute(TO_NCHW).contiguous(), op.attr("group", 1)
    else:  # depthwise: (multiplier, kh, kw, C) -> (multiplier, C, kh, kw) -> (multiplier * C, 1, kh, kw)
        mult, kh, kw, channels = w.shape
        weight, groups = w.permute(TO_NCHW).reshape(mult * channels, 1, kh, kw), channels
    x, padding = _padded(x, pad)
    return checked(op, F.conv2d(x, weight, _optional(ins, "bias"), stride, padding, dilation, groups)
                   .permute(TO_NHWC))


def _conv_transpose(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, w = nchw(op, _one(ins)), _one(ins, "weights")
    kernel, stride, dilation, (left, right, top, bottom) = _window(op)
    # the file's (out/groups, kh, kw, in), flipped in H and W, is torch's (in, out/groups, kh, kw);
    # a transposed depthwise conv's (multiplier, kh, kw, C) is torch's (C, multiplier, kh, kw)
    weight = w.flip((1, 2)).permute(3, 0, 1, 2).contiguous()
    groups = op.attr("group", 1) if op.type == "transposed-conv2d" else int(w.shape[3])
    out_pad = (top - bottom, left - right)
    if min(out_pad) < 0:
        raise op_error(op, "pad %s: a bottom/right pad larger than the top/left one is not run"
                           % ([left, right, top, bottom],))
    y = F.conv_transpose2d(x, weight, _optional(ins, "bias"), stride, (top, left), out_pad, groups, dilation)
    return checked(op, y.permute(TO_NHWC))


def _pool(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, is_max = nchw(op, _one(ins)), op.type == "maxpool2d"
    if op.attr("global", False):
        y = F.adaptive_max_pool2d(x, 1) if is_max else F.adaptive_avg_pool2d(x, 1)
        return checked(op, y.permute(TO_NHWC))
    kernel, stride, _, pad = _window(op)
    ceil = op.attr("pad_mode") == "CEIL"
    if is_max:
        x, padding = _padded(x, pad, float("-inf"))
        y = F.max_pool2d(x, kernel, stride, padding, 1, ceil)
    else:
        include = bool(op.attr("count_include_pad", True))
        if not include and (pad[0] != pad[1] or pad[2] != pad[3]):
            raise op_error(op, "an asymmetric pad %s without count_include_pad is not run" % (pad,))
        x, padding = _padded(x, pad)
        y = F.avg_pool2d(x, kernel, stride, padding, ceil, include)
    return checked(op, y.permute(TO_NHWC))


def _const_input(op: XOp) -> bool:
    """A const op, or a fix of one."""
    while op.type == "fix":
        op = op.inputs["input"][0]
    return op.type == "const"


def _hard_sigmoid_mul(run: "Run", op: XOp, ins: Inputs) -> Optional[torch.Tensor]:
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


def _binary(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    pair = _hard_sigmoid_mul(run, op, ins)
    if pair is not None:
        return pair
    xs, fn = ins["input"], _BINARY[op.type]
    out = xs[0]
    for other in xs[1:]:
        out = fn(out, other)
    return out


def _unary(fn: Callable[..., torch.Tensor], *attrs: str) -> Callable[["Run", XOp, Inputs], torch.Tensor]:
    def apply(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
        return fn(_one(ins), *[op.attr(a) for a in attrs])
    return apply


def _gelu(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    approximate = str(op.attr("approximate", "none")).strip("'\"")
    return F.gelu(_one(ins), approximate=approximate)


def _hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.div(torch.clamp(torch.add(x, 3.0), 0.0, 6.0), 6.0)


def _prelu(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, w = _one(ins), _one(ins, "weight")
    return torch.where(x >= 0, x, torch.mul(x, w))  # w: one value, or one per channel (the last axis)


def _softmax(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    return in_model_layout(_one(ins), [op.attr("axis")], lambda t, a: F.softmax(t, a[0]))


_REDUCTIONS = {"reduction_mean": torch.mean, "reduction_sum": torch.sum, "reduction_product": None,
               "reduction_max": torch.amax}


def _reduction(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, axes, keep = _one(ins), list(op.attr("axis")), bool(op.attr("keep_dims"))
    fn = _REDUCTIONS[op.type]
    if fn is None:  # product: one axis at a time
        def fn(t: torch.Tensor, dim: List[int], keepdim: bool) -> torch.Tensor:
            for d in sorted(dim, reverse=True):
                t = torch.prod(t, d, keepdim)
            return t
    t, perm = model_layout(x)
    mapped = [perm.index(a % x.dim()) for a in axes]
    y = fn(t, mapped, keepdim=True)
    if perm != tuple(range(x.dim())):
        y = y.permute([perm.index(i) for i in range(len(perm))])
    return y.reshape(op.shape) if not keep or y.dim() != x.dim() else y


def _scale(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, weight, bias = _one(ins), _one(ins, "scale"), _optional(ins, "bias")
    channels = weight.numel()

    def bn(t: torch.Tensor, axes: List[int]) -> torch.Tensor:
        moved = t.movedim(axes[0], 1) if axes[0] != 1 else t
        y = F.batch_norm(moved, torch.zeros(channels), torch.ones(channels), weight.reshape(-1),
                         None if bias is None else bias.reshape(-1), False, 0.0, 0.0)
        return y.movedim(1, axes[0]) if axes[0] != 1 else y
    return in_model_layout(x, [op.attr("axis", -1)], bn)


def _matmul(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
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


def _concat(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    xs, axis = ins["input"], op.attr("axis")
    held = [model_layout(x) for x in xs]
    if len({p for _, p in held}) == 1 and held[0][1] == TO_NCHW:  # all in NCHW memory: concatenate there
        y = torch.cat([t for t, _ in held], TO_NCHW.index(axis % 4))
        return y.permute(TO_NHWC)
    return torch.cat(xs, axis)


def _strided_slice(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x = _one(ins)
    begin, end, strides, _ = shapes_layout.strided_dense(op, list(x.shape))  # libxir's dense form
    if any(s < 0 for s in strides):
        raise op_error(op, "negative strides %s are not run" % (strides,))
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].reshape(op.shape)


def _resize(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, mode = nchw(op, _one(ins)), op.attr("mode")
    if mode == "NEAREST":
        kwargs = {"mode": "nearest-exact" if op.attr("half_pixel_centers") else "nearest"}  # type: Dict[str, Any]
    elif mode == "BILINEAR":
        kwargs = {"mode": "bilinear", "align_corners": bool(op.attr("align_corners"))}
    else:
        raise op_error(op, "mode %r is not run (NEAREST, BILINEAR)" % mode)
    scale = op.attr("scale") or []
    if not op.inputs.get("size") and len(scale) == 2:
        y = F.interpolate(x, scale_factor=(float(scale[1]), float(scale[0])), **kwargs)
    else:
        y = F.interpolate(x, size=(op.shape[1], op.shape[2]), **kwargs)
    return checked(op, y.permute(TO_NHWC))


def _pad(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, paddings = _one(ins), list(op.attr("paddings"))
    if op.attr("mode") != "CONSTANT":
        raise op_error(op, "mode %r is not run (CONSTANT)" % op.attr("mode"))
    values = op.attr("constant_values") or [0.0]
    if len(set(values)) > 1:
        raise op_error(op, "per-dim constant_values %s are not run" % (values,))
    flat = []  # type: List[int]
    for d in reversed(range(x.dim())):  # F.pad lists the last dim first
        flat += [paddings[2 * d], paddings[2 * d + 1]]
    return F.pad(x, flat, value=float(values[0]))


def _fix(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
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
        raise op_error(op, "round_mode %r is none of DPU_ROUND, STD_ROUND, PY3_ROUND" % mode)
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
        raise op_error(op, "cannot tell which dims of %s give %s; pass float_ops" % (dims, out))
    return torch.mean(x, reduce)


_BUILT_IN_CUSTOM = {
    "aten::silu": lambda op, xs: F.silu(xs[0]),
    "aten::silu_": lambda op, xs: F.silu(xs[0]),  # nn.SiLU(inplace=True)
    "aten::mean": lambda op, xs: _mean(op, xs[0]),
}  # type: Dict[str, Callable[[XOp, List[torch.Tensor]], torch.Tensor]]


# custom ops the file holds in NHWC, as the DPU op they stand for (nndct lays them out so): computed here,
# never by the caller's float_ops (the simulation's NCHW call). An adaptive average pool whose output
# size does not divide its input is written as its nndct type, unscaled (docs/arithmetic.md)
_NHWC_CUSTOM = {
    "nndct_adaptive_avg_pool2d":
        lambda op, xs: F.adaptive_avg_pool2d(nchw(op, xs[0]), [int(d) for d in op.shape[1:3]]).permute(TO_NHWC),
}  # type: Dict[str, Callable[[XOp, List[torch.Tensor]], torch.Tensor]]


def custom_op(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    """A custom op (a type XIR does not define): the caller's ``float_ops[op.name]``, else a built-in
    one (an NHWC one of ``_NHWC_CUSTOM`` always built in)."""
    xs = [x for arg in sorted(ins) for x in ins[arg]]
    if op.type in _NHWC_CUSTOM:
        y = _NHWC_CUSTOM[op.type](op, xs)
    elif op.name in run.float_ops:
        y = run.float_ops[op.name](xs)
    elif op.type in _BUILT_IN_CUSTOM:
        y = _BUILT_IN_CUSTOM[op.type](op, xs)
    else:
        raise op_error(op, "a custom op type: the file carries only its output shape and data type, not what it "
                           "computes; pass float_ops={%r: callable(list of input tensors) -> tensor}" % op.name)
    if not isinstance(y, torch.Tensor):
        raise op_error(op, "float_ops gave %s, not a tensor" % type(y).__name__)
    return checked(op, y.float())


def _const(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    return torch.from_numpy(op.data())


OPS = {
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
}  # type: Dict[str, Callable[[Run, XOp, Inputs], torch.Tensor]]


def is_custom(op_type: str) -> bool:
    """True for an op type XIR does not define (its definition is made on the fly)."""
    return opdefs.get(op_type) == opdefs.custom_def(op_type)
