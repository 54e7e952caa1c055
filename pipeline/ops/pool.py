"""Max, average and adaptive average pooling (``nndct_maxpool``, ``nndct_avgpool``,
``nndct_adaptive_avg_pool2d``). The DPU divides an average by a multiply and a shift; the quantizer
reproduces the factor (``pytorch_nndct/nn/modules/avgpool.py``, ``adaptive_avgpool.py``;
docs/arithmetic.md#average-pool-correction)."""
import math

import numpy as np
import torch.nn.functional as F
from torch import nn

from .record import OpRecord, OpSpec
from .xir_support import (IN, TO_NHWC, OpDef, XirOp, attr, fail, one, op_input, opt, padded, req, vec, window,
                          window_dims)
from .xmodel_support import PAD_MODES, XmodelForm, custom, no_attrs, pair

MAX_POOL = "nndct_maxpool"
AVG_POOL = "nndct_avgpool"
ADAPTIVEAVGPOOL2D = "nndct_adaptive_avg_pool2d"


def avgpool_dpu_scale(kernel_h: int, kernel_w: int) -> float:
    """The factor nndct multiplies an average pool's output by (option ``avg_pool_approximate``).

    The DPU divides by ``k = kh*kw`` as a multiply by ``m / 2**s``; the quantizer reproduces that
    as ``avg * k * m / 2**s``. Table sizes (docs/arithmetic.md#average-pool-correction;
    ``nn/modules/avgpool.py``): 3x3 -> 63/64, 5x5 -> 250/256, 6x6 (also 3x6, 6x3) -> 252/256, 7x7 ->
    1029/1024, 14x14 -> 4116/4096. Other sizes: the ``m, s`` with ``s < ceil(log2(128 k))`` minimizing
    ``|m/2**s - 1/k|`` where ``m = round(2**s / k)`` (Python banker's ``round``, first minimum wins); e.g.
    8x8 -> 1.0, 10x10 -> 1.0009765625.

    Returns:
        The factor as a Python float (exact in float32 for every table entry).
    """
    k = [kernel_h, kernel_w]
    if k == [3, 3]:
        return 9.0 * 7.0 / 64.0
    if k == [5, 5]:
        return 25.0 * 10.0 / 256.0
    if k in ([6, 6], [3, 6], [6, 3]):
        return 36.0 * 7.0 / 256.0
    if k == [7, 7]:
        return 49.0 * 21.0 / 1024.0
    if k == [14, 14]:
        return 196.0 * 21.0 / 4096.0
    rec = kernel_h * kernel_w
    max_shift = int(math.ceil(math.log(rec * 128, 2)))
    best_diff = 1.0
    mult, shift = 0.0, 0
    for s in range(max_shift):
        m = round((2 ** s) / rec)
        diff = abs(m / (2 ** s) - 1.0 / rec)
        if diff < best_diff:
            mult, best_diff, shift = m, diff, s
    return rec * mult / (2 ** shift)

_DPU_Q = OpSpec("dpu", True, False, False)


def _lower_pool(lo, node) -> dict:
    """A max or average pool's deploy attributes: kernel, stride ``[w, h]`` (stride None: the kernel),
    pad ``[left, right, top, bottom]``, pad_mode (1 with ceil_mode), global False; an average pool's
    count_include_pad.

    Raises:
        XmodelUnsupported: divisor_override, a dilation other than 1."""
    m = lo.module(node)
    if m is not None:
        a = {k: getattr(m, k, None) for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode",
                                              "count_include_pad", "divisor_override")}
    else:
        a = lo.call_args(node)
    if a.get("divisor_override") is not None:
        raise lo.unsupported(node, "divisor_override is not carried by the xmodel")
    if any(d != 1 for d in pair(a.get("dilation") or 1)):
        raise lo.unsupported(node, "dilation=%s: the xmodel's pool has no dilation (nndct writes the pool without "
                                   "it); use dilation 1" % (tuple(pair(a["dilation"])),))
    (kh, kw) = pair(a["kernel_size"])
    (sh, sw) = pair(a["stride"]) if a["stride"] not in (None, []) else (kh, kw)
    (ph, pw) = pair(a["padding"])
    attrs = {"kernel": [kw, kh], "stride": [sw, sh], "pad": [pw, pw, ph, ph], "pad_mode": int(bool(a["ceil_mode"])),
             "global": False}
    if node.op == AVG_POOL:
        attrs["count_include_pad"] = bool(a["count_include_pad"])
    return attrs


def _create_maxpool(w, node) -> None:
    """XIR ``maxpool2d`` (``xop_creator.py`` ``maxpool``)."""
    a = node.attrs
    w.fixed_op(node.name, "maxpool2d", {"kernel": a["kernel"], "stride": a["stride"], "pad": a["pad"],
                                        "pad_mode": PAD_MODES[a["pad_mode"]], "global": a["global"]},
               {"input": w.data_inputs(node)})


def _create_avgpool(w, node) -> None:
    """XIR ``avgpool2d`` named ``<node>_i0``, times a const ``<node>_i1`` holding
    :func:`avgpool_dpu_scale` (``xop_creator.py`` ``avgpool``: the DPU's factor written as a mul)."""
    a = node.attrs
    kernel_w, kernel_h = a["kernel"]
    scale = avgpool_dpu_scale(kernel_h, kernel_w)
    w.fixed_op(node.name + "_i0", "avgpool2d",
               {"kernel": a["kernel"], "stride": a["stride"], "pad": a["pad"], "pad_mode": PAD_MODES[a["pad_mode"]],
                "global": a["global"], "count_include_pad": a["count_include_pad"]},
               {"input": w.data_inputs(node)})
    w.fixed_const(node.name + "_i1", np.array([scale], dtype=np.float32))
    w.fixed_op(node.name, "mul", None, {"input": [w.op_of(node.name + "_i0"), w.op_of(node.name + "_i1")]})


def _shape_pool2d(op):
    """maxpool2d, avgpool2d: [n, oh, ow, c]; [n, 1, 1, c] when ``global`` (``shape_infer_pool2d``)."""
    dims = list(op_input(op).shape)
    if len(dims) != 4:
        raise fail(op, "input %s is not 4-d (NHWC)" % dims)
    vec(op, "pad", 4)
    hw = [1, 1] if attr(op, "global", "bool") else window_dims(op, dims, vec(op, "kernel", 2),
                                                               vec(op, "stride", 2), [1, 1])
    return [dims[0]] + hw + [dims[3]], {}


def _run_pool(run, op, ins):
    """maxpool2d/avgpool2d: ``F.max_pool2d``/``F.avg_pool2d`` (``ceil_mode`` from pad_mode CEIL,
    ``count_include_pad``); ``global``: ``F.adaptive_avg_pool2d(x, 1)`` (the simulation's
    AdaptiveAvgPool2d) / ``F.adaptive_max_pool2d(x, 1)``."""
    x, is_max = run.nchw(op, one(ins)), op.type == "maxpool2d"
    if op.attr("global", False):
        y = F.adaptive_max_pool2d(x, 1) if is_max else F.adaptive_avg_pool2d(x, 1)
        return run.checked(op, y.permute(TO_NHWC))
    kernel, stride, _, pad = window(op)
    ceil = op.attr("pad_mode") == "CEIL"
    if is_max:
        x, padding = padded(x, pad, float("-inf"))
        y = F.max_pool2d(x, kernel, stride, padding, 1, ceil)
    else:
        include = bool(op.attr("count_include_pad", True))
        if not include and (pad[0] != pad[1] or pad[2] != pad[3]):
            raise run.error(op, "an asymmetric pad %s without count_include_pad is not run" % (pad,))
        x, padding = padded(x, pad)
        y = F.avg_pool2d(x, kernel, stride, padding, ceil, include)
    return run.checked(op, y.permute(TO_NHWC))


_POOL = (req("kernel", "int32_vec"), req("stride", "int32_vec"), req("pad_mode", "string"),
         opt("pad", "int32_vec", [0, 0, 0, 0]), opt("global", "bool", False))


RECORD = OpRecord(
    family="pool",
    specs={MAX_POOL: _DPU_Q, AVG_POOL: _DPU_Q, ADAPTIVEAVGPOOL2D: _DPU_Q},
    modules={nn.MaxPool2d: MAX_POOL, nn.AvgPool2d: AVG_POOL, nn.AdaptiveAvgPool2d: ADAPTIVEAVGPOOL2D},
    functions={F.max_pool2d: MAX_POOL, F.avg_pool2d: AVG_POOL, F.adaptive_avg_pool2d: ADAPTIVEAVGPOOL2D},
    signatures={
        MAX_POOL: (("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                   {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False}),
        AVG_POOL: (("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                    "divisor_override"),
                   {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                    "divisor_override": None}),
        ADAPTIVEAVGPOOL2D: (("input", "output_size"), {}),
    },
    approximation="an average multiplied by avgpool_dpu_scale(kh, kw): the DPU's 1/k as m / 2**s",
    source="pytorch_nndct/nn/modules/avgpool.py, adaptive_avgpool.py",
    # an adaptive pool: deploy.optimize makes it an average pool where the sizes divide; any other is a
    # custom op
    xmodel={MAX_POOL: XmodelForm(_lower_pool, _create_maxpool, nhwc=True),
            AVG_POOL: XmodelForm(_lower_pool, _create_avgpool, nhwc=True),
            ADAPTIVEAVGPOOL2D: XmodelForm(no_attrs, custom, nhwc=True)},
    xir_ops={"maxpool2d": XirOp(OpDef("maxpool2d", IN, _POOL, _shape_pool2d), _run_pool, "max_pool2d"),
             "avgpool2d": XirOp(OpDef("avgpool2d", IN, _POOL + (opt("count_include_pad", "bool", True),
                                                                opt("count_include_invalid", "bool", True)),
                                      _shape_pool2d), _run_pool, "avg_pool2d")},
    traced={MAX_POOL: ("max_pool2d",), AVG_POOL: ("avg_pool2d",), ADAPTIVEAVGPOOL2D: ("adaptive_avg_pool2d",)},
)
