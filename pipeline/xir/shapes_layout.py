"""Shape inference of XIR's layout ops no op unit writes: flatten, squeeze and pixel-shuffle (the
XIR format's own; the layout ops the units write, concat, reshape, transpose, pad, resize,
strided-slice, are in their units under ``pipeline/ops/``).

One function per op kind, as in ``shapes.py`` (whose module docstring says what each returns and
raises, and where libxir's code is); ``opdefs`` calls them.
"""
import math
from typing import Any

from .shapes import Result, attr, fail, op_input, unsupported


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


