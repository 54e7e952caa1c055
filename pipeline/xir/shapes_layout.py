"""Shape inference of XIR's layout ops no op unit writes: flatten and squeeze (the XIR format's own;
the layout ops the units write, concat, reshape, transpose, pad, resize, strided-slice, pixel-shuffle,
are in their units under ``pipeline/ops/``).

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
