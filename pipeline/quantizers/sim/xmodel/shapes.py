"""Shape inference of XIR ops, restated from libxir for the xmodel writer (``opdefs`` is its caller).

Every function takes an op (``xgraph.XOp``) whose attributes are already typed and defaulted and whose
inputs carry their output dims and tensor attributes, and returns ``(dims, tensor_attrs)``: the op's
output dims and the tensor attributes (``{"shape_info": ("int32_vec", [...])}`` or ``{}``) that libxir's
shape inference leaves on the output tensor. Where libxir would abort (a failed ``UNI_LOG_CHECK``, a
thrown ``at()``), the function raises ``xgraph.XGraphError`` naming the op; where libxir's result rests on
undefined behaviour or on a logged-and-ignored error, it raises ``XGraphError`` saying the case is not
supported by this writer.

Restated (facts only: names, formulas, checks) from Vitis-AI 3.5, ``src/vai_runtime/xir``:
``src/xir/op/shape_inference.cpp`` (the ``shape_infer_*`` and ``forward_*`` functions),
``src/xir/util/tool_function.cpp`` (``validate_strided_slice``, ``get_float_vec_from_any``) and the
constraints of ``src/xir/op/built_in_ops.cpp`` that run right after shape inference.

What libxir does that matters here:

- a new output tensor starts with no attributes; only ``shape_info`` is ever set on it;
- "all inputs" means every input op, argument by argument in argument-name order (``std::map``), as
  ``XOp.input_list()`` lists them; an op's input count is that list's length (the vertex's in-degree);
- a const's ``data`` is read as its output tensor's data type (float32 here) and each value is
  converted to int32 by truncation toward zero (``read_data_in_attr<int32_t>``).
"""
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

SHAPE_INFO = "shape_info"
Result = Tuple[List[int], Dict[str, Tuple[str, Any]]]
_PLANAR_MODES = ("NEAREST", "BILINEAR")  # resize modes of 4-d feature maps; TRILINEAR is 5-d


def error(message: str) -> Exception:
    """An ``xgraph.XGraphError`` (imported here: xgraph imports opdefs, which imports this module)."""
    from .xgraph import XGraphError
    return XGraphError(message)


def fail(op: Any, text: str) -> Exception:
    """The error libxir's failed check on ``op`` stands for."""
    return error("op %r (%s): %s" % (op.name, op.type, text))


def unsupported(op: Any, text: str) -> Exception:
    """The error for a case whose libxir result this writer does not reproduce."""
    return fail(op, text + ": not supported by this writer")


def _input(op: Any, arg: str = "input", index: int = 0) -> Any:
    ops = op.inputs.get(arg, [])
    if index >= len(ops):
        raise fail(op, "has no input %s[%d]" % (arg, index))
    return ops[index]


def _attr(op: Any, name: str, kind: str) -> Any:
    """Attribute ``name``, which libxir reads as ``kind`` (a missing one or one of another kind aborts)."""
    if op.attrs.get(name, (None,))[0] != kind:
        raise fail(op, "needs attribute %r of kind %s" % (name, kind))
    return op.attrs[name][1]


def _vec(op: Any, name: str, size: int) -> List[int]:
    value = _attr(op, name, "int32_vec")
    if len(value) != size:
        raise fail(op, "attribute %r must have %d values, got %s" % (name, size, value))
    return list(value)


def _shape_info(source: Any) -> Optional[List[int]]:
    entry = source.tensor_attrs.get(SHAPE_INFO)
    return None if entry is None else list(entry[1])


def _last_shape_info(op: Any) -> Optional[List[int]]:
    """The ``shape_info`` of the last input (over all arguments) that has one."""
    infos = [_shape_info(s) for s in op.input_list() if SHAPE_INFO in s.tensor_attrs]
    return infos[-1] if infos else None


def _with_info(dims: Sequence[int], info: Optional[Sequence[int]]) -> Result:
    return list(dims), ({} if info is None else {SHAPE_INFO: ("int32_vec", [int(v) for v in info])})


def _const_ints(op: Any, source: Any) -> List[int]:
    """``source``'s ``data`` attribute as libxir reads it into int32 values (see the module docstring)."""
    if source.attrs.get("data", (None,))[0] != "bytes":
        raise fail(op, "input %r has no data to read" % source.name)
    count = math.prod(source.shape)
    raw = source.attrs["data"][1]
    if len(raw) < 4 * count:
        raise unsupported(op, "input %r holds %d bytes for %d float32 values" % (source.name, len(raw), count))
    values = np.frombuffer(raw, dtype="<f4", count=count).astype(np.float64)
    if not np.all(np.abs(values) < 2.0 ** 31):
        raise unsupported(op, "input %r has values outside int32" % source.name)
    return [int(v) for v in values]


def _cdiv(a: int, b: int) -> int:
    """C++ integer division (truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _broadcast(a: Sequence[int], b: Sequence[int]) -> Optional[List[int]]:
    """``size_broadcast``: numpy-style broadcast of two shapes, None when they do not match."""
    long_, short = (list(a), list(b)) if len(a) > len(b) else (list(b), list(a))
    if long_ == short or not short:
        return long_
    out = list(long_)
    for k in range(1, len(short) + 1):
        x, y = long_[-k], short[-k]
        if x == 1:
            out[-k] = y
        elif y != 1 and x != y:
            return None
    return out


# --- sources and element-wise ops ------------------------------------------------------------------

def source(op: Any) -> Result:
    """``data``, ``const`` and custom op types: the ``shape`` attribute, non-empty and positive."""
    dims = _attr(op, "shape", "int32_vec")
    if not dims or any(d <= 0 for d in dims):
        raise fail(op, "attribute shape %s must be non-empty and positive" % (dims,))
    return list(dims), {}


def like_input(op: Any) -> Result:
    """``shape_infer_remain``: the dims of ``input[0]``; ``shape_info`` of the last input that has one."""
    return _with_info(_input(op).shape, _last_shape_info(op))


def broadcast(op: Any) -> Result:
    """add, sub, min, max (and the first step of mul, div): the inputs' shapes broadcast together."""
    ins = op.input_list()
    if len(ins) < 2:
        raise fail(op, "needs at least 2 inputs, got %d" % len(ins))
    dims = list(ins[0].shape)
    for other in ins[1:]:
        merged = _broadcast(dims, other.shape)
        if merged is None:
            raise fail(op, "input shapes %s and %s do not broadcast" % (dims, list(other.shape)))
        dims = merged
    return dims, {}


def mul(op: Any) -> Result:
    """Broadcast; when ``input[0]`` has ``shape_info``, the element-wise product of it and the data of
    the last const input (an empty ``shape_info`` when their lengths differ)."""
    dims, _ = broadcast(op)
    info = _shape_info(_input(op))
    if info is None:
        return dims, {}
    factors = []  # type: List[int]
    for src in op.input_list():
        if "data" in src.attrs:
            factors = _const_ints(op, src)
    return _with_info(dims, [a * b for a, b in zip(info, factors)] if len(info) == len(factors) else [])


def div(op: Any) -> Result:
    """Broadcast; when ``input[0]`` has ``shape_info``, it divided (C++ integer division) by the data of
    ``input[1]``, one value for all or one per entry."""
    dims, _ = broadcast(op)
    info = _shape_info(_input(op))
    if info is None:
        return dims, {}
    base = _const_ints(op, _input(op, "input", 1))
    if len(base) == 1:
        base = base * len(info)
    elif len(base) != len(info):
        raise fail(op, "shape_info %s and divisor %s differ in length" % (info, base))
    if 0 in base:
        raise unsupported(op, "shape_info divided by zero")
    return _with_info(dims, [_cdiv(a, b) for a, b in zip(info, base)])


# --- convolution and pooling -----------------------------------------------------------------------

_WINDOW = {  # output size from n = in + pad_lo + pad_hi, span = (kernel - 1) * dilation + 1, stride s
    "FLOOR": lambda n, span, s: (n - span + s) // s,
    "CEIL": lambda n, span, s: -((span - n - s) // s),
    "SAME": lambda n, span, s: -(-n // s),
    "VALID": lambda n, span, s: -((span - 1 - n) // s),
}


def _nhwc(op: Any) -> List[int]:
    dims = list(_input(op).shape)
    if len(dims) != 4:
        raise unsupported(op, "input %s is not 4-d (NHWC)" % dims)
    return dims


def _window(op: Any, dims: List[int], kernel: List[int], stride: List[int], dilation: List[int]) -> List[int]:
    """``cal_out``: [oh, ow]; ``pad`` is [left, right, top, bottom], kernel/stride/dilation are [w, h]."""
    mode = _attr(op, "pad_mode", "string")
    if mode not in _WINDOW:
        raise fail(op, "pad_mode %r is none of FLOOR, CEIL, SAME, VALID" % mode)
    if 0 in stride:
        raise unsupported(op, "stride 0")
    pad = _vec(op, "pad", 4)
    h = _WINDOW[mode](dims[1] + pad[2] + pad[3], (kernel[1] - 1) * dilation[1] + 1, stride[1])
    w = _WINDOW[mode](dims[2] + pad[0] + pad[1], (kernel[0] - 1) * dilation[0] + 1, stride[0])
    return [h, w]


def _conv(op: Any) -> Tuple[List[int], List[int], List[int]]:
    """(input dims, weight dims OHWI, [oh, ow]) of a 2-d convolution."""
    dims, weights = _nhwc(op), list(_input(op, "weights").shape)
    if len(weights) != 4:
        raise fail(op, "weights must be 4-d, got %s" % weights)
    return dims, weights, _window(op, dims, _vec(op, "kernel", 2), _vec(op, "stride", 2), _vec(op, "dilation", 2))


def conv2d(op: Any) -> Result:
    """[n, oh, ow, weights[0]], with the group checks on channels."""
    dims, weights, hw = _conv(op)
    group = _attr(op, "group", "int32")
    if group <= 0:
        raise unsupported(op, "group %d" % group)
    if weights[-1] != dims[-1] // group or dims[-1] % group or weights[0] % group:
        raise fail(op, "weights %s do not fit input %s with group %d" % (weights, dims, group))
    return [dims[0]] + hw + [weights[0]], {}


def depthwise_conv2d(op: Any) -> Result:
    """[n, oh, ow, weights[0] * weights[3]]; weights[3] must equal the input channels."""
    dims, weights, hw = _conv(op)
    if weights[3] != dims[3]:
        raise fail(op, "weights %s: channel must equal the input's %d" % (weights, dims[3]))
    return [dims[0]] + hw + [weights[0] * weights[3]], {}


def _transposed_window(op: Any, dims: List[int]) -> List[int]:
    kernel, stride, dilation = _vec(op, "kernel", 2), _vec(op, "stride", 2), _vec(op, "dilation", 2)
    pad, mode = _vec(op, "pad", 4), _attr(op, "pad_mode", "string")
    out = []
    for size, k, s, d, lo, hi in ((dims[1], kernel[1], stride[1], dilation[1], pad[2], pad[3]),
                                  (dims[2], kernel[0], stride[0], dilation[0], pad[0], pad[1])):
        if mode in ("FLOOR", "CEIL"):
            out.append((size - 1) * s + d * (k - 1) + 1 - lo - hi)
        elif mode == "SAME":
            out.append(size * s)
        elif mode == "VALID":
            out.append((size - 1) * s + k)
        else:
            raise fail(op, "pad_mode %r is none of FLOOR, CEIL, SAME, VALID" % mode)
    return out


def transposed_conv2d(op: Any) -> Result:
    """[n, oh, ow, weights[0]] of a transposed convolution."""
    dims, weights = _nhwc(op), list(_input(op, "weights").shape)
    if not weights:
        raise unsupported(op, "0-d weights")
    return [dims[0]] + _transposed_window(op, dims) + [weights[0]], {}


def transposed_depthwise_conv2d(op: Any) -> Result:
    """[n, oh, ow, input channels] of a transposed depth-wise convolution (weights unchecked)."""
    dims = _nhwc(op)
    return [dims[0]] + _transposed_window(op, dims) + [dims[3]], {}


def pool2d(op: Any) -> Result:
    """maxpool2d, avgpool2d: [n, oh, ow, c]; [n, 1, 1, c] when ``global``."""
    dims = list(_input(op).shape)
    if len(dims) != 4:
        raise fail(op, "input %s is not 4-d (NHWC)" % dims)
    _vec(op, "pad", 4)
    hw = [1, 1] if _attr(op, "global", "bool") else _window(op, dims, _vec(op, "kernel", 2),
                                                             _vec(op, "stride", 2), [1, 1])
    return [dims[0]] + hw + [dims[3]], {}


# --- layout ops ------------------------------------------------------------------------------------

def concat(op: Any) -> Result:
    """The inputs joined along ``axis``; every other dim must match ``input[0]``'s."""
    ins = op.input_list()
    first = list(ins[0].shape)
    axis = _attr(op, "axis", "int32")
    axis = axis + len(first) if axis < 0 else axis
    for other in ins:
        if len(other.shape) < len(first) or not 0 <= axis < len(other.shape):
            raise fail(op, "input shape %s does not fit axis %d" % (list(other.shape), axis))
        if any(other.shape[d] != first[d] for d in range(len(first)) if d != axis):
            raise fail(op, "input shapes %s and %s differ off axis %d" % (first, list(other.shape), axis))
    return [sum(o.shape[axis] for o in ins) if d == axis else n for d, n in enumerate(first)], {}


def reshape(op: Any) -> Result:
    """The target from the ``shape`` input (its const data, else its ``shape_info``) or the ``shape``
    attribute; -1 takes the remaining element count, 0 keeps the input's dim."""
    dims = list(_input(op).shape)
    if op.inputs.get("shape"):
        src = op.inputs["shape"][0]
        if "data" in src.attrs:
            target = _const_ints(op, src)
        elif SHAPE_INFO in src.tensor_attrs:
            target = _shape_info(src)
        else:
            raise unsupported(op, "shape input %r has neither data nor shape_info" % src.name)
    else:
        target = list(_attr(op, "shape", "int32_vec"))
    if any(t == 0 and i >= len(dims) for i, t in enumerate(target)):
        raise unsupported(op, "target %s keeps a dim input %s lacks" % (target, dims))
    count = math.prod(dims)
    rest = count // math.prod(t for t in target if t > 0)
    out = [rest if t < 0 else dims[i] if t == 0 else t for i, t in enumerate(target)]
    if math.prod(out) != count:
        raise fail(op, "input %s (%d elements) cannot take shape %s" % (dims, count, target))
    return out, {}


def flatten(op: Any) -> Result:
    """Dims ``start_axis`` to ``end_axis`` (negative: from the end) merged into one."""
    dims = list(_input(op).shape)
    start, end = _attr(op, "start_axis", "int32"), _attr(op, "end_axis", "int32")
    start, end = start + len(dims) if start < 0 else start, end + len(dims) if end < 0 else end
    if not 0 <= start <= end < len(dims):
        raise fail(op, "axes %d..%d do not fit input %s" % (start, end, dims))
    return dims[:start] + [math.prod(dims[start:end + 1])] + dims[end + 1:], {}


def squeeze(op: Any) -> Result:
    """The listed dims removed (every dim of size 1 when ``axis`` is empty)."""
    dims = list(_input(op).shape)
    axes = list(_attr(op, "axis", "int32_vec")) or [i for i, d in enumerate(dims) if d == 1]
    for a in sorted(axes, reverse=True):
        if not 0 <= a < len(dims):
            raise unsupported(op, "axis %s of input %s" % (axes, list(_input(op).shape)))
        del dims[a]
    return dims, {}


def transpose(op: Any) -> Result:
    """The input's dims in ``order``."""
    dims, order = list(_input(op).shape), _attr(op, "order", "int32_vec")
    if any(not 0 <= o < len(dims) for o in order):
        raise unsupported(op, "order %s of input %s" % (order, dims))
    return [dims[o] for o in order], {}


def pad(op: Any) -> Result:
    """Each dim grown by its two ``paddings``."""
    dims, paddings = list(_input(op).shape), _attr(op, "paddings", "int32_vec")
    if len(paddings) != 2 * len(dims):
        raise fail(op, "paddings %s need 2 values per dim of input %s" % (paddings, dims))
    return [d + paddings[2 * i] + paddings[2 * i + 1] for i, d in enumerate(dims)], {}


def pixel_shuffle(op: Any) -> Result:
    """[n, h*s, w*s, c/s²] when ``upscale``, else [n, h/s, w/s, c*s²]."""
    dims, s = list(_input(op).shape), _attr(op, "scale", "int32")
    if len(dims) < 4 or s <= 0:
        raise unsupported(op, "input %s with scale %d" % (dims, s))
    n, h, w, c = dims[:4]
    if _attr(op, "upscale", "bool"):
        if c % (s * s):
            raise fail(op, "input channels %d are not a multiple of scale² %d" % (c, s * s))
        return [n, h * s, w * s, c // (s * s)], {}
    if w % s or h % s:
        raise fail(op, "input height and width %d, %d are not multiples of scale %d" % (h, w, s))
    return [n, h // s, w // s, c * s * s], {}


def resize(op: Any) -> Result:
    """New height and width (and depth) from const or ``shape_info`` inputs, when the op has more
    than one input, else from the ``scale`` attribute ([w, h(, d)], each dim * scale in float32,
    truncated)."""
    dims, mode = list(_input(op).shape), _attr(op, "mode", "string")
    if mode not in _PLANAR_MODES + ("TRILINEAR",):
        raise unsupported(op, "mode %r" % mode)
    if len(dims) != (4 if mode in _PLANAR_MODES else 5):
        raise fail(op, "mode %s does not fit input %s" % (mode, dims))
    if len(op.input_list()) > 1:
        return _resize_to_inputs(op, dims, mode), {}
    scale = _attr(op, "scale", "float_vec")
    if len(scale) != (2 if mode in _PLANAR_MODES else 3) or min(scale) <= 0:
        raise fail(op, "scale %s does not fit mode %s" % (scale, mode))
    out = list(dims)
    for axis, s in zip((2, 1, 3), scale):
        out[axis] = int(np.float32(dims[axis]) * np.float32(s))
    return out, {}


def _resize_to_inputs(op: Any, dims: List[int], mode: str) -> List[int]:
    out = list(dims)
    for src in op.input_list():
        if "data" in src.attrs:
            size = _const_ints(op, src)
            if len(size) in (2, 4) and mode not in _PLANAR_MODES or len(size) in (3, 5) and mode != "TRILINEAR":
                raise fail(op, "size %s does not fit mode %s" % (size, mode))
            if len(size) in (2, 3):
                out[1:1 + len(size)] = size
            elif len(size) == len(out):
                if out[0] != size[0] or out[-1] != size[-1]:
                    raise fail(op, "size %s changes batch or channels of %s" % (size, out))
                out = list(size)
        elif SHAPE_INFO in src.tensor_attrs:
            size = _shape_info(src)
            if len(size) not in (2, 3):
                raise fail(op, "shape_info %s of input %r is not [h, w(, d)]" % (size, src.name))
            out[1:1 + len(size)] = size
    return out


def _strided_dense(op: Any, dims: List[int]) -> Tuple[List[int], List[int], List[int], List[int]]:
    """``validate_strided_slice``: TensorFlow's sparse slice spec (begin, end, strides and the five
    masks) made dense over the input's dims, with begin and end clamped into them. Returns the dense
    begin, end, strides and the output dims."""
    n = len(dims)
    begin, end, strides = (list(_attr(op, key, "int32_vec")) for key in ("begin", "end", "strides"))
    if not len(begin) == len(end) == len(strides) == n:
        raise unsupported(op, "begin, end and strides need one value per input dim")
    masks = {key: _attr(op, key, "int32") if key in op.attrs else 0
             for key in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
    ellipsis, new_axis = masks["ellipsis_mask"], masks["new_axis_mask"]
    if ellipsis & (ellipsis - 1):
        raise unsupported(op, "more than one ellipsis")
    seen, extra = False, 0
    for i in range(n):
        extra += seen and bool(new_axis >> i & 1)
        seen = seen or bool(ellipsis >> i & 1)
    sparse = n if seen else n + 1
    ellipsis = ellipsis if seen else ellipsis | 1 << n
    d_begin, d_end, d_strides = [0] * n, [0] * n, [0] * n
    begin_mask = end_mask = shrink_mask = 0
    gather = []  # type: List[int]  # dense index, -1 for a shrunk dim, -2 for a new axis
    full = 0
    for i in range(sparse):
        if ellipsis >> i & 1:
            while full < min(n - (sparse - i) + 1 + extra, n):
                d_strides[full] = 1
                begin_mask, end_mask = begin_mask | 1 << full, end_mask | 1 << full
                gather.append(full)
                full += 1
        elif new_axis >> i & 1:
            gather.append(-2)
        else:
            if full == n:
                raise unsupported(op, "the slice spec indexes more dims than input %s has" % dims)
            d_begin[full], d_end[full], d_strides[full] = begin[i], end[i], strides[i]
            begin_mask |= (masks["begin_mask"] >> i & 1) << full
            end_mask |= (masks["end_mask"] >> i & 1) << full
            shrink_mask |= (masks["shrink_axis_mask"] >> i & 1) << full
            gather.append(-1 if masks["shrink_axis_mask"] >> i & 1 else full)
            full += 1
    sizes = [_slice_size(op, i, dims[i], d_begin, d_end, d_strides[i], begin_mask, end_mask, shrink_mask)
             for i in range(n)]
    return d_begin, d_end, d_strides, [sizes[g] if g >= 0 else 1 for g in gather if g != -1]


def _slice_size(op: Any, i: int, dim: int, begin: List[int], end: List[int], stride: int,
                begin_mask: int, end_mask: int, shrink_mask: int) -> int:
    """Dim ``i`` of a strided slice; canonicalizes ``begin[i]`` and ``end[i]`` in place."""
    if stride == 0:
        raise fail(op, "strides[%d] is zero" % i)
    if shrink_mask >> i & 1:
        b = begin[i] + dim if begin[i] < 0 else begin[i]
        if stride < 0 or not 0 <= b < dim:
            raise unsupported(op, "shrunk dim %d at %d of %d, stride %d" % (i, begin[i], dim, stride))
        begin[i], end[i] = b, b + 1
    else:
        low, high = (0, dim) if stride > 0 else (-1, dim - 1)
        for values, masked, which in ((begin, begin_mask >> i & 1, 0), (end, end_mask >> i & 1, 1)):
            x = values[i] + dim if values[i] < 0 else values[i]
            values[i] = ((low, high)[which if stride > 0 else 1 - which] if masked
                         else min(max(x, low), high))
    length = end[i] - begin[i]
    return 0 if length == 0 or (length < 0) != (stride < 0) else -(-abs(length) // abs(stride))


def strided_slice(op: Any) -> Result:
    """The slice's dims ([1] when every dim is shrunk); an input ``shape_info`` is sliced along
    (``forward_strided_slice``, reproduced with its flat-index arithmetic)."""
    dims = list(_input(op).shape)
    begin, end, strides, out = _strided_dense(op, dims)
    info = _last_shape_info(op)
    if not info:
        return out or [1], {}
    count = math.prod(dims)
    if len(info) < count:
        raise unsupported(op, "shape_info %s shorter than input %s" % (info, dims))
    steps = [1]  # libxir's flat-index divisors: [prod(dims), prod(dims[1:]), ..., dims[-1], 1]
    if len(dims) > 1:
        for d in reversed(dims):
            steps.insert(0, steps[0] * d)
    kept = []
    for i in range(count):
        x, keep = i, True
        for j in range(len(dims)):
            q = x // steps[j]
            if q < begin[j] or q >= end[j] or abs(x - begin[j]) % strides[j]:
                keep = False
                break
            x %= steps[j]
        if keep:
            kept.append(info[i])
    return _with_info(out or [1], kept)


# --- shape-carrying ops ----------------------------------------------------------------------------

def shape(op: Any) -> Result:
    """[rank of the input], with the input's dims as ``shape_info``."""
    dims = list(_input(op).shape)
    return _with_info([len(dims)], dims)


def stack(op: Any) -> Result:
    """``input[0]``'s dims with the input count inserted at ``axis``; ``shape_info``: the inputs'
    ``shape_info`` or const data, concatenated in input order."""
    dims, axis = list(_input(op).shape), _attr(op, "axis", "int32")
    if not 0 <= axis <= len(dims):
        raise unsupported(op, "axis %d for input %s" % (axis, dims))
    info = []  # type: List[int]
    for src in op.input_list():
        own = _shape_info(src)
        info += own if own is not None else _const_ints(op, src)
    return _with_info(dims[:axis] + [len(op.input_list())] + dims[axis:], info)


def matmul(op: Any) -> Result:
    """Batched matmul of exactly two inputs ([..., a, b] x [..., b, c] -> [..., a, c], batch dims
    broadcast, each input's last two dims swapped when transposed); a bias must be [c]."""
    ins = op.inputs.get("input", [])
    if len(ins) != 2:
        raise fail(op, "needs exactly 2 inputs, got %d" % len(ins))
    a, b = list(ins[0].shape), list(ins[1].shape)
    if len(a) < 2 or len(b) < 2:
        raise fail(op, "inputs %s and %s must be at least 2-d" % (a, b))
    if _attr(op, "transpose_a", "bool"):
        a[-2], a[-1] = a[-1], a[-2]
    if _attr(op, "transpose_b", "bool"):
        b[-2], b[-1] = b[-1], b[-2]
    for bias in op.inputs.get("bias", []):
        if list(bias.shape) != [b[-1]]:
            raise fail(op, "bias shape %s does not match [%d]" % (list(bias.shape), b[-1]))
    batch = _broadcast(a[:-2], b[:-2])
    if batch is None or a[-1] != b[-2]:
        raise fail(op, "input shapes %s and %s do not multiply" % (a, b))
    return batch + [a[-2], b[-1]], {}


def argmax(op: Any) -> Result:
    """The input's dims with ``axis`` set to 1."""
    dims, axis = list(_input(op).shape), _attr(op, "axis", "int32")
    axis = axis + len(dims) if axis < 0 else axis
    if not 0 <= axis < len(dims):
        raise unsupported(op, "axis %d of input %s" % (axis, dims))
    dims[axis] = 1
    return dims, {}


def _reduced(op: Any) -> List[int]:
    dims, axes = list(_input(op).shape), _attr(op, "axis", "int32_vec")
    if any(not -len(dims) <= a < len(dims) for a in axes):
        raise fail(op, "axis %s out of range for input %s" % (axes, dims))
    marked = {a % len(dims) for a in axes}
    keep = _attr(op, "keep_dims", "bool")
    return [1 if i in marked else d for i, d in enumerate(dims) if keep or i not in marked]


def reduction(fold: Optional[Callable[[List[int]], int]] = None) -> Callable[[Any], Result]:
    """Shape inference of a reduction: the ``axis`` dims removed (kept as 1 with ``keep_dims``); with
    ``fold``, an input ``shape_info`` becomes ``[fold(shape_info)]`` (axis must be one dim or start at 0)."""
    def infer(op: Any) -> Result:
        dims, info = _reduced(op), _shape_info(_input(op))
        if fold is None or info is None:
            return dims, {}
        axes = _attr(op, "axis", "int32_vec")
        if not axes or len(axes) != 1 and axes[0] != 0:
            raise fail(op, "axis %s cannot fold shape_info %s" % (axes, info))
        return _with_info(dims, [fold(info)])
    return infer
