"""The conv family in the xmodel: nndct's deploy attributes, the weights in its layout, the XIR ops
``xop_creator.py`` makes, their op definitions, shape inference and interpreter kernels."""

import numpy as np
import torch.nn.functional as F
from torch import nn

from ..record import pair
from ..xir_support import (ArgDef, IN, OPTIONAL, REQUIRED, TO_NCHW, TO_NHWC, attr, fail, nhwc_dims, one, op_input, opt,
                           optional, padded, req, unsupported, vec, window, window_dims)
from ..xmodel_support import PAD_MODES
from .names import CONVTRANSPOSE2D


def lower_conv(lo, node) -> dict:
    """The deploy attributes of a conv (``parser.py``): kernel, stride, dilation ``[w, h]``, pad
    ``[left, right, top, bottom]``, pad_mode 0, group, bias_term, in_dim, out_dim.

    Raises:
        XmodelUnsupported: padding given as a string, a grouped transposed conv, output_padding."""
    m = lo.module(node)
    if isinstance(m.padding, str):
        raise lo.unsupported(node, "padding=%r (give the padding as numbers)" % m.padding)
    if node.op == CONVTRANSPOSE2D and m.groups != 1:
        raise lo.unsupported(node, "groups=%d: a grouped transposed conv is not written yet (depthwise, groups = "
                                   "in_channels = out_channels, is)" % m.groups)
    if any(pair(getattr(m, "output_padding", 0))):
        # nndct writes transposed-conv2d without it: the op's output would lack the last row/column
        raise lo.unsupported(node, "output_padding=%s: the xmodel's transposed conv has no output padding (the "
                                   "real quantizer drops it and the compiled output is one row/column short); "
                                   "use kernel_size = 2 * stride with padding = stride // 2 (e.g. 4, 2, 1) for "
                                   "an exact doubling" % (tuple(pair(m.output_padding)),))
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = (pair(m.kernel_size), pair(m.stride), pair(m.dilation),
                                              pair(m.padding))
    return {"kernel": [kw, kh], "stride": [sw, sh], "dilation": [dw, dh], "pad_mode": 0,
            "pad": [pw, pw, ph, ph], "group": m.groups, "bias_term": m.bias is not None,
            "in_dim": m.in_channels, "out_dim": m.out_channels}


def ohwi(m, weight):
    """A conv's ``(out, in/g, kh, kw)`` as nndct's OHWI."""
    return weight.transpose(0, 2, 3, 1)


def transposed_ohwi(m, weight):
    """A transposed conv's ``(in, out/g, kh, kw)`` as nndct's ``(out/g, kh, kw, in)``."""
    return weight.swapaxes(0, 1).transpose(0, 2, 3, 1)


def depthwise_ohwi(m, weight):
    """A depthwise conv's ``(C * multiplier, 1, kh, kw)`` as nndct's ``(multiplier, kh, kw, C)``."""
    c = m.in_channels
    return weight.reshape((m.out_channels // c, c) + tuple(weight.shape[2:])).transpose(0, 2, 3, 1)


def depthwise_transposed_ohwi(m, weight):
    """A transposed depthwise conv's ``(C, multiplier, kh, kw)`` as nndct's ``(multiplier, kh, kw, C)``."""
    c = m.in_channels
    weight = weight.reshape((c, m.out_channels // c) + tuple(weight.shape[2:])).swapaxes(0, 1)
    return weight.transpose(0, 2, 3, 1)


def flip_hw(weight):
    """A transposed conv's weights flipped in H and W, as ``xop_creator.py`` writes them."""
    return np.ascontiguousarray(np.flip(weight, (1, 2)))


def create_conv(type_: str):
    """The creator of XIR ``type_`` (``xop_creator.py`` ``conv2d`` and friends): input, weights, bias."""
    def create(w, node) -> None:
        a = node.attrs
        w.with_params(node, type_, {"kernel": a["kernel"], "stride": a["stride"], "dilation": a["dilation"],
                                    "pad_mode": PAD_MODES[a["pad_mode"]], "pad": a["pad"], "group": a["group"],
                                    "bias_term": a["bias_term"], "in_dim": a["in_dim"], "out_dim": a["out_dim"]})
    return create


def _conv_dims(op):
    """(input dims, weight dims OHWI, [oh, ow]) of a 2-d convolution."""
    dims, weights = nhwc_dims(op), list(op_input(op, "weights").shape)
    if len(weights) != 4:
        raise fail(op, "weights must be 4-d, got %s" % weights)
    return dims, weights, window_dims(op, dims, vec(op, "kernel", 2), vec(op, "stride", 2), vec(op, "dilation", 2))


def shape_conv2d(op):
    """conv2d: [n, oh, ow, weights[0]], with the group checks on channels (``shape_infer_conv2d``)."""
    dims, weights, hw = _conv_dims(op)
    group = attr(op, "group", "int32")
    if group <= 0:
        raise unsupported(op, "group %d" % group)
    if weights[-1] != dims[-1] // group or dims[-1] % group or weights[0] % group:
        raise fail(op, "weights %s do not fit input %s with group %d" % (weights, dims, group))
    return [dims[0]] + hw + [weights[0]], {}


def shape_depthwise_conv2d(op):
    """depthwise-conv2d: [n, oh, ow, weights[0] * weights[3]]; weights[3] must equal the input channels."""
    dims, weights, hw = _conv_dims(op)
    if weights[3] != dims[3]:
        raise fail(op, "weights %s: channel must equal the input's %d" % (weights, dims[3]))
    return [dims[0]] + hw + [weights[0] * weights[3]], {}


def _transposed_window(op, dims):
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


def shape_transposed_conv2d(op):
    """transposed-conv2d: [n, oh, ow, weights[0]]."""
    dims, weights = nhwc_dims(op), list(op_input(op, "weights").shape)
    if not weights:
        raise unsupported(op, "0-d weights")
    return [dims[0]] + _transposed_window(op, dims) + [weights[0]], {}


def shape_transposed_depthwise_conv2d(op):
    """transposed-depthwise-conv2d: [n, oh, ow, input channels] (weights unchecked)."""
    dims = nhwc_dims(op)
    return [dims[0]] + _transposed_window(op, dims) + [dims[3]], {}


def run_conv(run, op, ins):
    """conv2d/depthwise-conv2d: ``F.conv2d`` on NCHW, weights OHWI -> OIHW (depthwise: the file's
    ``(multiplier, kh, kw, C)`` is torch's ``(C * multiplier, 1, kh, kw)``, nndct's reshape); an
    asymmetric pad padded explicitly first."""
    x, w = run.nchw(op, one(ins)), one(ins, "weights")
    kernel, stride, dilation, pad = window(op)
    if op.type == "conv2d":
        weight, groups = w.permute(TO_NCHW).contiguous(), op.attr("group", 1)
    else:  # depthwise: (multiplier, kh, kw, C) -> (multiplier, C, kh, kw) -> (multiplier * C, 1, kh, kw)
        mult, kh, kw, channels = w.shape
        weight, groups = w.permute(TO_NCHW).reshape(mult * channels, 1, kh, kw), channels
    x, padding = padded(x, pad)
    return run.checked(op, F.conv2d(x, weight, optional(ins, "bias"), stride, padding, dilation, groups)
                       .permute(TO_NHWC))


def run_conv_transpose(run, op, ins):
    """transposed-conv2d/transposed-depthwise-conv2d: the H/W flip undone, ``(out/groups, kh, kw, in)`` ->
    torch's ``(in, out/groups, kh, kw)``, ``F.conv_transpose2d`` with ``output_padding = pad_top -
    pad_bottom, pad_left - pad_right``."""
    x, w = run.nchw(op, one(ins)), one(ins, "weights")
    kernel, stride, dilation, (left, right, top, bottom) = window(op)
    # the file's (out/groups, kh, kw, in), flipped in H and W, is torch's (in, out/groups, kh, kw);
    # a transposed depthwise conv's (multiplier, kh, kw, C) is torch's (C, multiplier, kh, kw)
    weight = w.flip((1, 2)).permute(3, 0, 1, 2).contiguous()
    groups = op.attr("group", 1) if op.type == "transposed-conv2d" else int(w.shape[3])
    out_pad = (top - bottom, left - right)
    if min(out_pad) < 0:
        raise run.error(op, "pad %s: a bottom/right pad larger than the top/left one is not run"
                            % ([left, right, top, bottom],))
    y = F.conv_transpose2d(x, weight, optional(ins, "bias"), stride, (top, left), out_pad, groups, dilation)
    return run.checked(op, y.permute(TO_NHWC))


CONV_ARGS = IN + (ArgDef("weights", REQUIRED), ArgDef("bias", OPTIONAL))
# kernel, stride, dilation: [w, h]; pad: [left, right, top, bottom]
CONV_ATTRS = (req("kernel", "int32_vec"), req("stride", "int32_vec"), opt("dilation", "int32_vec", [1, 1]),
         req("pad_mode", "string"), opt("pad", "int32_vec", [0, 0, 0, 0]))
