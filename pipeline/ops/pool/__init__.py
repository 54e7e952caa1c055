"""Max, average and adaptive average pooling (``nndct_maxpool``, ``nndct_avgpool``,
``nndct_adaptive_avg_pool2d``). The DPU divides an average by a multiply and a shift; the quantizer
reproduces the factor (``pytorch_nndct/nn/modules/avgpool.py``, ``adaptive_avgpool.py``;
docs/arithmetic.md#average-pool-correction)."""
from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
import types
from torch import nn

from ..dpu_checks import check_kernel, check_padding, check_stride, fix_kernel, fix_padding, legal_values
from ..dpu_support import Fix, Verdict, cpu_verdict, dpu_unless, unknown
from ..onnx_form import Unsupported, arg
from ..record import DpuRule, OpRecord, OpSpec, pair
from ..xir_support import (IN, TO_NCHW, TO_NHWC, CustomKernel, OpDef, XirOp, attr, fail, one, op_input, opt, padded,
                           req, vec, window, window_dims)
from ..xmodel_support import PAD_MODES, XmodelForm, custom, no_attrs
from .sim import ADAPTIVEAVGPOOL2D, AVG_POOL, MAX_POOL, SIM, avgpool_dpu_scale


def dpu_pool(node: Any, ctx: Any) -> Verdict:
    """Max and average pools (adaptive average pools and spatial means as fixed-kernel pools) on
    the ALU or the pool engine, within its kernel, stride and pad limits."""
    kind = "max" if node.op == "max_pool2d" else "avg"
    limits = ctx.target.engines.pool_limits(kind)
    if limits is None:
        return cpu_verdict("{} does not support {} (no pool engine or ALU type for it).".format(
            ctx.target.name, node.op))
    src = ctx.producer(node)
    if src is None or src.shape is None or len(src.shape) != 4:
        return unknown(node, ctx, "a {} of a tensor that is not 4-D".format(node.op))
    in_hw = list(src.shape[2:])
    if node.op in ("adaptive_avg_pool2d", "mean"):
        out_hw = list(node.shape[2:]) if len(node.shape) == 4 else [1, 1]
        if any(i % o for i, o in zip(in_hw, out_hw)):
            return cpu_verdict("adaptive average pool from {} to {}: the bins differ in size, so it is "
                        "not a fixed-kernel pool.".format(in_hw, out_hw), fixes=[Fix(
                            "give the pool an input whose size is a multiple of {} (a crop or pad before it, or "
                            "another input size), so that it is a fixed-kernel pool.".format(out_hw), exact=False)])
        kernel = [i // o for i, o in zip(in_hw, out_hw)]
        attrs = {"kernel_size": kernel, "stride": kernel, "dilation": [1, 1], "pad": [0, 0, 0, 0]}
    else:
        attrs = node.attrs
    module = "nn.MaxPool2d" if kind == "max" else "nn.AvgPool2d"
    checks = [
        (check_kernel(attrs["kernel_size"], limits.kernel_size, limits.engine),
         lambda: pool_kernel_fix(attrs, limits.kernel_size, module)),
        (check_stride(attrs["stride"], limits.stride, limits.engine, attrs["kernel_size"], in_hw),
         lambda: Fix("use a stride in {}.".format(limits.stride), exact=False)),
        (check_padding(attrs["pad"], attrs["kernel_size"], [1, 1], limits.pad), lambda: fix_padding(attrs["pad"])),
    ]
    if attrs["dilation"] != [1, 1]:
        checks.append(("DPU pools do not support dilation ({}).".format(attrs["dilation"]),
                       Fix("use dilation 1.", exact=False)))
    if kind == "avg" and limits.engine == "pool_engine" and attrs["kernel_size"][0] != attrs["kernel_size"][1]:
        checks.append(("the pool engine only averages square kernels; this one is {} x {}.".format(
            *attrs["kernel_size"]), Fix("use a square kernel.", exact=False)))
    return dpu_unless(checks)


def pool_kernel_fix(attrs, spec: str, module: str) -> Fix:
    """A pool kernel out of range: two pools whose kernels multiply to it when each factor is legal and
    the pool does not overlap (stride = kernel, no pad: a max of maxes, a mean of equal means: the same
    values), else the nearest legal kernel."""
    kernel, legal = attrs["kernel_size"], legal_values(spec)
    pairs = [next(((a, k // a) for a in reversed(legal) if k % a == 0 and k // a in legal), None) for k in kernel]
    if attrs["stride"] == kernel and not any(attrs["pad"]) and None not in pairs:
        first, second = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
        return Fix("pool in two steps, kernels {} then {} (stride = kernel): the same values as one {} pool.".format(
            first, second, tuple(kernel)), "{0}({1}) -> nn.Sequential({0}({2}), {0}({3}))".format(
                module, tuple(kernel), first, second))
    return fix_kernel(kernel, spec, module)


_DPU_Q = OpSpec("dpu", True, False, False)


def _one_input(node: Any, mod: Any) -> None:
    """A pooling module call takes its input only (functional forms carry their settings as args)."""
    if isinstance(mod, nn.Module) and (len(node.args) != 1 or node.kwargs):
        raise Unsupported("expected one input")


def _settings(b: Any, node: Any, mod: Any, op: str) -> Any:
    """The module, or for ``F.max_pool2d`` / ``F.avg_pool2d`` / ``F.adaptive_avg_pool2d`` a module-like
    namespace of the call's arguments after the input (by the record's signature, defaults filled)."""
    if mod is not None:
        return mod
    names, defaults = RECORD.signatures[op]
    params = types.SimpleNamespace(**{
        name: b.static(arg(node, i + 1, name, defaults.get(name, Unsupported)))
        for i, name in enumerate(names[1:])})
    params.return_indices = False  # the call with indices gives a tuple: refused before its form
    return params


def _pool_geometry(b: Any, node: Any, mod: Any, ceil_as_padding: bool = False) -> Dict[str, Any]:
    """kernel/stride/pads/dilations of a 2-D pool. Where ceil_mode adds a last, partial window,
    ``ceil_as_padding`` (max pool) pads the bottom/right ends by what that window lacks (ONNX's
    MaxPool never picks a padded value, as torch's never looks past the input); otherwise refused."""
    _one_input(node, mod)
    kernel = pair(mod.kernel_size)
    stride = pair(mod.stride or mod.kernel_size)  # torch: stride None (or []) means the kernel
    pad = pair(mod.padding)
    dil = pair(getattr(mod, "dilation", 1))
    shape_in, shape_out = b.shape(node.args[0]), b.shape(node)
    if len(shape_in) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape_in))
    # the input extent the output's windows span, beyond the input and its padding
    extra = [(shape_out[2 + i] - 1) * stride[i] + dil[i] * (kernel[i] - 1) + 1 - (shape_in[2 + i] + 2 * pad[i])
             for i in range(2)]
    if any(e > 0 for e in extra) and not ceil_as_padding:
        raise Unsupported("output %s has a partial last window (ceil_mode); only max pool writes it"
                          % (tuple(shape_out),))
    ends = [pad[i] + max(extra[i], 0) for i in range(2)]
    return {"kernel_shape": list(kernel), "strides": list(stride), "pads": list(pad) + ends,
            "dilations": list(dil)}


def _onnx_maxpool(b: Any, node: Any, mod: Optional[nn.MaxPool2d]) -> str:
    """MaxPool; ceil_mode's partial last window as end padding."""
    mod = _settings(b, node, mod, MAX_POOL)
    if mod.return_indices:
        raise Unsupported("return_indices=True")
    return b.op("MaxPool", [b.tensor(node.args[0])], node.name, **_pool_geometry(b, node, mod, True))


def _window_sum(b: Any, node: Any, kernel: Sequence[int], stride: Sequence[int], pads: Sequence[int]) -> str:
    """Exact per-channel window sums: a depthwise Conv with a ones kernel (no rounding on grid values)."""
    channels = b.shape(node.args[0])[1]
    ones = b.init(node.name + "/window", np.ones((channels, 1) + tuple(kernel), dtype=np.float32))
    return b.op("Conv", [b.tensor(node.args[0]), ones], node.name + "/sum", kernel_shape=list(kernel),
                strides=list(stride), pads=list(pads), group=channels)


def _onnx_avgpool(b: Any, node: Any, mod: Optional[nn.AvgPool2d]) -> str:
    """The exact window sum divided by torch's divisor (kh*kw, divisor_override, or the count of input
    pixels in each window): torch divides, a multiply by the reciprocal differs in the last bit."""
    mod = _settings(b, node, mod, AVG_POOL)
    geo = _pool_geometry(b, node, mod)
    total = b.op("Div", [_window_sum(b, node, geo["kernel_shape"], geo["strides"], geo["pads"]),
                         node.name + "/divisor"], node.name)
    kh, kw = geo["kernel_shape"]
    if mod.divisor_override:
        b.scalar(node.name + "/divisor", float(mod.divisor_override))
    elif mod.count_include_pad or not any(geo["pads"]):
        b.scalar(node.name + "/divisor", float(kh * kw))
    else:  # torch divides by the number of input pixels inside each window
        h, w = b.shape(node.args[0])[2:]
        counts = F.conv2d(torch.ones(1, 1, h, w, dtype=torch.float64),
                          torch.ones(1, 1, kh, kw, dtype=torch.float64), stride=geo["strides"],
                          padding=geo["pads"][:2])
        b.init(node.name + "/divisor", counts.float().contiguous().numpy())
    return total


def _onnx_adaptive_avgpool(b: Any, node: Any, mod: Optional[nn.AdaptiveAvgPool2d]) -> str:
    """Global: ReduceSum then one Div by h*w (torch's mean); even windows: the window sum divided by kh,
    then by kw, as torch's kernel does; uneven windows are refused."""
    mod = _settings(b, node, mod, ADAPTIVEAVGPOOL2D)
    _one_input(node, mod)
    shape = b.shape(node.args[0])
    if len(shape) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape))
    h, w = shape[2:]
    oh, ow = b.shape(node)[2:]
    if (oh, ow) == (1, 1):  # torch computes mean(): sum, then one division by h*w
        total = b.op("ReduceSum", [b.tensor(node.args[0]), b.ints(node.name + "/axes", [2, 3])],
                     node.name + "/sum", keepdims=1)
        return b.op("Div", [total, b.scalar(node.name + "/divisor", float(h * w))], node.name)
    if h % oh or w % ow:
        raise Unsupported("output %s does not divide the input %s (uneven windows)" % ((oh, ow), (h, w)))
    kh, kw = h // oh, w // ow  # torch's kernel divides by kh, then by kw
    total = _window_sum(b, node, (kh, kw), (kh, kw), (0, 0, 0, 0))
    total = b.op("Div", [total, b.scalar(node.name + "/kh", float(kh))], node.name + "/div_kh")
    return b.op("Div", [total, b.scalar(node.name + "/kw", float(kw))], node.name)


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


def _run_adaptive_nhwc(op: Any, xs: Any) -> torch.Tensor:
    """``nndct_adaptive_avg_pool2d`` (NHWC in and out): ``F.adaptive_avg_pool2d`` on NCHW to the op's output
    size."""
    x = xs[0]
    if x.dim() != 4:
        raise ValueError("expects a 4-D NHWC input, got dims %s" % list(x.shape))
    y = F.adaptive_avg_pool2d(x.permute(TO_NCHW).contiguous(), [int(d) for d in op.shape[1:3]])
    return y.permute(TO_NHWC)


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
    onnx={MAX_POOL: _onnx_maxpool, AVG_POOL: _onnx_avgpool, ADAPTIVEAVGPOOL2D: _onnx_adaptive_avgpool},
    dpu_rule={MAX_POOL: DpuRule(("max_pool2d",), dpu_pool), AVG_POOL: DpuRule(("avg_pool2d",), dpu_pool),
              ADAPTIVEAVGPOOL2D: DpuRule(("adaptive_avg_pool2d",), dpu_pool)},
    # an adaptive pool: deploy.optimize makes it an average pool where the sizes divide; any other is a
    # custom op
    xmodel={MAX_POOL: XmodelForm(_lower_pool, _create_maxpool, nhwc=True),
            AVG_POOL: XmodelForm(_lower_pool, _create_avgpool, nhwc=True),
            ADAPTIVEAVGPOOL2D: XmodelForm(no_attrs, custom, nhwc=True)},
    xir_ops={"maxpool2d": XirOp(OpDef("maxpool2d", IN, _POOL, _shape_pool2d), _run_pool, "max_pool2d"),
             "avgpool2d": XirOp(OpDef("avgpool2d", IN, _POOL + (opt("count_include_pad", "bool", True),
                                                                opt("count_include_invalid", "bool", True)),
                                      _shape_pool2d), _run_pool, "avg_pool2d")},
    # an adaptive pool whose output size does not divide its input, written as its nndct type, unscaled, in
    # NHWC as the DPU op it stands for (docs/arithmetic.md): computed from the file, never by the caller's
    # float_ops (the simulation's NCHW call)
    custom_kernels={ADAPTIVEAVGPOOL2D: CustomKernel(_run_adaptive_nhwc, True)},
    traced={MAX_POOL: ("max_pool2d",), AVG_POOL: ("avg_pool2d",), ADAPTIVEAVGPOOL2D: ("adaptive_avg_pool2d",)},
    roles={"fix_align_pool": (MAX_POOL, AVG_POOL, ADAPTIVEAVGPOOL2D),
           "cle_pool": (MAX_POOL, AVG_POOL, ADAPTIVEAVGPOOL2D),
           "fresh_output": (MAX_POOL, AVG_POOL, ADAPTIVEAVGPOOL2D), "pad_fusion": (MAX_POOL, AVG_POOL)},
    refusals={},
    sim=SIM,
)
