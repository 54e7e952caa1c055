"""Shape inference of XIR's convolution and pooling ops (libxir's ``shape_infer_conv2d`` ... ``shape_infer_pool2d``).

One function per op kind, as in ``shapes.py`` (whose module docstring says what each returns and
raises, and where libxir's code is); ``opdefs`` calls them.
"""
from typing import Any, List, Tuple

from .shapes import Result, attr, fail, op_input, unsupported, vec


_WINDOW = {  # output size from n = in + pad_lo + pad_hi, span = (kernel - 1) * dilation + 1, stride s
    "FLOOR": lambda n, span, s: (n - span + s) // s,
    "CEIL": lambda n, span, s: -((span - n - s) // s),
    "SAME": lambda n, span, s: -(-n // s),
    "VALID": lambda n, span, s: -((span - 1 - n) // s),
}


def _nhwc(op: Any) -> List[int]:
    dims = list(op_input(op).shape)
    if len(dims) != 4:
        raise unsupported(op, "input %s is not 4-d (NHWC)" % dims)
    return dims


def _window(op: Any, dims: List[int], kernel: List[int], stride: List[int], dilation: List[int]) -> List[int]:
    """``cal_out``: [oh, ow]; ``pad`` is [left, right, top, bottom], kernel/stride/dilation are [w, h]."""
    mode = attr(op, "pad_mode", "string")
    if mode not in _WINDOW:
        raise fail(op, "pad_mode %r is none of FLOOR, CEIL, SAME, VALID" % mode)
    if 0 in stride:
        raise unsupported(op, "stride 0")
    pad = vec(op, "pad", 4)
    h = _WINDOW[mode](dims[1] + pad[2] + pad[3], (kernel[1] - 1) * dilation[1] + 1, stride[1])
    w = _WINDOW[mode](dims[2] + pad[0] + pad[1], (kernel[0] - 1) * dilation[0] + 1, stride[0])
    return [h, w]


def _conv(op: Any) -> Tuple[List[int], List[int], List[int]]:
    """(input dims, weight dims OHWI, [oh, ow]) of a 2-d convolution."""
    dims, weights = _nhwc(op), list(op_input(op, "weights").shape)
    if len(weights) != 4:
        raise fail(op, "weights must be 4-d, got %s" % weights)
    return dims, weights, _window(op, dims, vec(op, "kernel", 2), vec(op, "stride", 2), vec(op, "dilation", 2))


def conv2d(op: Any) -> Result:
    """[n, oh, ow, weights[0]], with the group checks on channels."""
    dims, weights, hw = _conv(op)
    group = attr(op, "group", "int32")
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
    kernel, stride, dilation = vec(op, "kernel", 2), vec(op, "stride", 2), vec(op, "dilation", 2)
    pad, mode = vec(op, "pad", 4), attr(op, "pad_mode", "string")
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
    dims, weights = _nhwc(op), list(op_input(op, "weights").shape)
    if not weights:
        raise unsupported(op, "0-d weights")
    return [dims[0]] + _transposed_window(op, dims) + [weights[0]], {}


def transposed_depthwise_conv2d(op: Any) -> Result:
    """[n, oh, ow, input channels] of a transposed depth-wise convolution (weights unchecked)."""
    dims = _nhwc(op)
    return [dims[0]] + _transposed_window(op, dims) + [dims[3]], {}


def pool2d(op: Any) -> Result:
    """maxpool2d, avgpool2d: [n, oh, ow, c]; [n, 1, 1, c] when ``global``."""
    dims = list(op_input(op).shape)
    if len(dims) != 4:
        raise fail(op, "input %s is not 4-d (NHWC)" % dims)
    vec(op, "pad", 4)
    hw = [1, 1] if attr(op, "global", "bool") else _window(op, dims, vec(op, "kernel", 2),
                                                             vec(op, "stride", 2), [1, 1])
    return [dims[0]] + hw + [dims[3]], {}
