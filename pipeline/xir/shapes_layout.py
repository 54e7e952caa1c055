"""Shape inference of XIR's layout ops: concat, reshape, flatten, squeeze, transpose, pad,
pixel-shuffle, resize and strided-slice.

One function per op kind, as in ``shapes.py`` (whose module docstring says what each returns and
raises, and where libxir's code is); ``opdefs`` calls them, and the interpreter reads a
strided-slice's dense form from :func:`strided_dense`.
"""
import math
from typing import Any, List, Tuple

import numpy as np

from .shapes import SHAPE_INFO, Result, attr, const_ints, fail, last_shape_info, op_input, shape_info, unsupported, with_info

_PLANAR_MODES = ("NEAREST", "BILINEAR")  # resize modes of 4-d feature maps; TRILINEAR is 5-d


def concat(op: Any) -> Result:
    """The inputs joined along ``axis``; every other dim must match ``input[0]``'s."""
    ins = op.input_list()
    first = list(ins[0].shape)
    axis = attr(op, "axis", "int32")
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
    dims = list(op_input(op).shape)
    if op.inputs.get("shape"):
        src = op.inputs["shape"][0]
        if "data" in src.attrs:
            target = const_ints(op, src)
        elif SHAPE_INFO in src.tensor_attrs:
            target = shape_info(src)
        else:
            raise unsupported(op, "shape input %r has neither data nor shape_info" % src.name)
    else:
        target = list(attr(op, "shape", "int32_vec"))
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
    dims = list(op_input(op).shape)
    start, end = attr(op, "start_axis", "int32"), attr(op, "end_axis", "int32")
    start, end = start + len(dims) if start < 0 else start, end + len(dims) if end < 0 else end
    if not 0 <= start <= end < len(dims):
        raise fail(op, "axes %d..%d do not fit input %s" % (start, end, dims))
    return dims[:start] + [math.prod(dims[start:end + 1])] + dims[end + 1:], {}


def squeeze(op: Any) -> Result:
    """The listed dims removed (every dim of size 1 when ``axis`` is empty)."""
    dims = list(op_input(op).shape)
    axes = list(attr(op, "axis", "int32_vec")) or [i for i, d in enumerate(dims) if d == 1]
    for a in sorted(axes, reverse=True):
        if not 0 <= a < len(dims):
            raise unsupported(op, "axis %s of input %s" % (axes, list(op_input(op).shape)))
        del dims[a]
    return dims, {}


def transpose(op: Any) -> Result:
    """The input's dims in ``order``."""
    dims, order = list(op_input(op).shape), attr(op, "order", "int32_vec")
    if any(not 0 <= o < len(dims) for o in order):
        raise unsupported(op, "order %s of input %s" % (order, dims))
    return [dims[o] for o in order], {}


def pad(op: Any) -> Result:
    """Each dim grown by its two ``paddings``."""
    dims, paddings = list(op_input(op).shape), attr(op, "paddings", "int32_vec")
    if len(paddings) != 2 * len(dims):
        raise fail(op, "paddings %s need 2 values per dim of input %s" % (paddings, dims))
    return [d + paddings[2 * i] + paddings[2 * i + 1] for i, d in enumerate(dims)], {}


def pixel_shuffle(op: Any) -> Result:
    """[n, h*s, w*s, c/s²] when ``upscale``, else [n, h/s, w/s, c*s²]."""
    dims, s = list(op_input(op).shape), attr(op, "scale", "int32")
    if len(dims) < 4 or s <= 0:
        raise unsupported(op, "input %s with scale %d" % (dims, s))
    n, h, w, c = dims[:4]
    if attr(op, "upscale", "bool"):
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
    dims, mode = list(op_input(op).shape), attr(op, "mode", "string")
    if mode not in _PLANAR_MODES + ("TRILINEAR",):
        raise unsupported(op, "mode %r" % mode)
    if len(dims) != (4 if mode in _PLANAR_MODES else 5):
        raise fail(op, "mode %s does not fit input %s" % (mode, dims))
    if len(op.input_list()) > 1:
        return _resize_to_inputs(op, dims, mode), {}
    scale = attr(op, "scale", "float_vec")
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
            size = const_ints(op, src)
            if len(size) in (2, 4) and mode not in _PLANAR_MODES or len(size) in (3, 5) and mode != "TRILINEAR":
                raise fail(op, "size %s does not fit mode %s" % (size, mode))
            if len(size) in (2, 3):
                out[1:1 + len(size)] = size
            elif len(size) == len(out):
                if out[0] != size[0] or out[-1] != size[-1]:
                    raise fail(op, "size %s changes batch or channels of %s" % (size, out))
                out = list(size)
        elif SHAPE_INFO in src.tensor_attrs:
            size = shape_info(src)
            if len(size) not in (2, 3):
                raise fail(op, "shape_info %s of input %r is not [h, w(, d)]" % (size, src.name))
            out[1:1 + len(size)] = size
    return out


def strided_dense(op: Any, dims: List[int]) -> Tuple[List[int], List[int], List[int], List[int]]:
    """``validate_strided_slice``: TensorFlow's sparse slice spec (begin, end, strides and the five
    masks) made dense over the input's dims, with begin and end clamped into them. Returns the dense
    begin, end, strides and the output dims."""
    n = len(dims)
    begin, end, strides = (list(attr(op, key, "int32_vec")) for key in ("begin", "end", "strides"))
    if not len(begin) == len(end) == len(strides) == n:
        raise unsupported(op, "begin, end and strides need one value per input dim")
    masks = {key: attr(op, key, "int32") if key in op.attrs else 0
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
    dims = list(op_input(op).shape)
    begin, end, strides, out = strided_dense(op, dims)
    info = last_shape_info(op)
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
    return with_info(out or [1], kept)
