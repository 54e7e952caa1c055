"""Up- and down-sampling (``nndct_resize``): ``nn.Upsample`` and ``F.interpolate``."""
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .dpu_checks import check_transposed_kernel
from .dpu_support import DPU, Fix, Verdict, cpu_verdict, dpu_unless, unknown
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec, pair
from .reshape import pack
from .sim_support import TORCH
from .xir_support import (ArgDef, IN, OPTIONAL, OpDef, SHAPE_INFO, TO_NHWC, XirOp, attr, const_ints, fail, one,
                          op_input, opt, req, shape_info, unsupported)
from .xmodel_support import XmodelForm

RESIZE = "nndct_resize"


def _resize(b: Any, node: Any, mode: str, call: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Nearest resize as Gather(rows) then Gather(cols), with the source indices torch computes;
    bilinear where it is exact (the builder's ``bilinear``)."""
    if mode == "bilinear":
        return b.bilinear(node, call)
    if mode not in ("nearest", "nearest-exact"):
        raise Unsupported("mode %r (only 'nearest', 'nearest-exact' and 'bilinear' resize exactly)" % mode)
    shape = b.shape(node.args[0])
    if len(shape) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape))
    h, w = shape[2:]
    rows = torch.arange(h, dtype=torch.float32).view(h, 1).expand(h, w)
    cols = torch.arange(w, dtype=torch.float32).view(1, w).expand(h, w)
    with torch.no_grad():
        probe = call(torch.stack([rows, cols]).unsqueeze(0).contiguous())
    r, c = probe[0, 0, :, 0], probe[0, 1, 0, :]
    if (tuple(probe.shape[2:]) != tuple(b.shape(node)[2:]) or not bool((probe[0, 0] == r[:, None]).all())
            or not bool((probe[0, 1] == c[None, :]).all())):
        raise Unsupported("the resize is not a separable row/column selection")
    y = b.op("Gather", [b.tensor(node.args[0]), b.ints(node.name + "/rows", r.long().tolist())],
             node.name + "/rows_gathered", axis=2)
    return b.op("Gather", [y, b.ints(node.name + "/cols", c.long().tolist())], node.name, axis=3)


def _onnx_resize(b: Any, node: Any, mod: Optional[nn.Upsample]) -> str:
    """``nn.Upsample`` or ``F.interpolate``: nearest as two Gathers, bilinear where exact in float32."""
    if mod is not None:
        return _resize(b, node, mod.mode, mod)
    args = b.static(tuple(node.args[1:]))
    kwargs = {k: b.static(v) for k, v in node.kwargs.items()}
    mode = arg(node, 3, "mode", "nearest")
    return _resize(b, node, mode, lambda t: F.interpolate(t, *args, **kwargs))


def dpu_resize(node: Any, ctx: Any) -> Verdict:
    """Upsample / interpolate: nearest resizing is a DPU op of the quantizer (``nndct_resize``); a
    bilinear one runs as a transposed depthwise conv (:func:`bilinear_resize`); other modes are
    not modelled here."""
    mode = node.attrs.get("mode")
    if mode == "bilinear":
        return dpu_bilinear_resize(node, ctx)
    if mode != "nearest":
        verdict = unknown(node, ctx, "a {} resize".format(mode))
        verdict.fixes.insert(0, Fix("use mode='nearest' (or 'bilinear' by 2 or 4).", "F.interpolate(..., mode={!r}) "
                                    "-> F.interpolate(..., mode='nearest')".format(mode), exact=False))
        return verdict
    return Verdict(DPU)


# bilinear upsampling scales the DPU runs as a transposed depthwise conv (kernel 2s, stride s):
# half-pixel centres (torch's align_corners=False) 2 and 4 (vai_q_pytorch
# ``pytorch_nndct/hardware/dpu_op_filter.py``, ``check_bilinear_upsample_scale``)
BILINEAR_DPU_SCALES = (2, 4)


def dpu_bilinear_resize(node: Any, ctx: Any) -> Verdict:
    """A bilinear upsampling by the same integer scale s (2 or 4) in height and width, without
    align_corners: the quantizer's Inspector turns it into a transposed depthwise conv of kernel
    2s and stride s (its weights are the interpolation factors, at most 1, within the 8-bit range
    at the fix position it gives them) and checks that conv on the depthwise engine; anything else
    stays on the CPU (``dpu_op_filter.py``, ``filter_upsample``)."""
    prefix = "Try to convert BlinearUpsamle2d to transpose depthwise conv2d failed: "
    src = ctx.producer(node)
    if node.attrs.get("align_corners"):
        return cpu_verdict(prefix + "DPU does not support align_corners = True", fixes=[Fix(
            "use align_corners=False (half-pixel centres).", "F.interpolate(..., align_corners=True) -> "
            "F.interpolate(..., align_corners=False)", exact=False)])
    if src is None or src.shape is None or node.shape is None or len(node.shape) != 4:
        return unknown(node, ctx, "a bilinear resize of an unknown shape")
    scales = [node.shape[d] / src.shape[d] for d in (3, 2)]
    if any(s not in BILINEAR_DPU_SCALES for s in scales) or scales[0] != scales[1]:
        return cpu_verdict(prefix + "resize output / input scale is {} (the DPU takes {} in both directions)".format(
            scales, " or ".join(str(s) for s in BILINEAR_DPU_SCALES)), fixes=[Fix(
                "upsample by 2 or 4 in both directions (several steps for a larger power of two), or use "
                "mode='nearest'.", "F.interpolate(x, scale_factor=s, mode='bilinear') -> F.interpolate(x, "
                "scale_factor=2, mode='bilinear')  # repeated", exact=False)])
    limits = ctx.target.engines.depthwise_limits()
    if limits is None:
        return cpu_verdict(prefix + "{} has no depthwise-conv engine.".format(ctx.target.name))
    s = int(scales[0])
    return dpu_unless([check_transposed_kernel([2 * s, 2 * s], [s, s], limits.kernel_size)],
                       notes=["runs on the {} as a transposed depthwise conv (kernel {}, stride {}).".format(
                           limits.engine, 2 * s, s)])


def _lower_resize(lo, node) -> dict:
    """mode (``NEAREST``/``BILINEAR``), align_corners, half_pixel_centers, size ``[h, w]`` (``[0, 0]``
    when a scale is given) and scale ``[w, h]``: the real quantizer's xmodel writes nearest without
    half-pixel centers, bilinear with them unless align_corners (torch's half-pixel source index).

    Raises:
        XmodelUnsupported: a mode other than nearest and bilinear."""
    m = lo.module(node)
    a = {"size": m.size, "scale_factor": m.scale_factor, "mode": m.mode, "align_corners": m.align_corners} \
        if m is not None else lo.call_args(node)
    if a["mode"] not in ("nearest", "bilinear"):
        raise lo.unsupported(node, "resize mode %r (the xmodel writer writes nearest and bilinear)" % a["mode"])
    scale = a["scale_factor"]
    if a["size"] is not None:
        size = list(pair(a["size"]))
        scale_wh = [1.0, 1.0]
    else:
        size = [0, 0]
        scale_wh = [float(scale)] * 2 if not isinstance(scale, (list, tuple)) else [float(s) for s in scale[::-1]]
    corners = bool(a["align_corners"] or False)
    bilinear = a["mode"] == "bilinear"
    return {"mode": "BILINEAR" if bilinear else "NEAREST", "align_corners": corners,
            "half_pixel_centers": bilinear and not corners, "size": size, "scale": scale_wh}


def _create_resize(w, node) -> None:
    """XIR ``resize`` with its ``scale`` attribute, or with a ``size`` input (consts stacked) when a size
    is given (``xop_creator.py`` ``resize``)."""
    a = node.attrs
    attrs = {"align_corners": a["align_corners"], "half_pixel_centers": a["half_pixel_centers"], "mode": a["mode"]}
    if all(s == 0 for s in a["size"]):
        attrs["scale"] = a["scale"]
        w.fixed_op(node.name, "resize", attrs, {"input": w.data_inputs(node)})
    else:
        size_op = pack(w, node, "size", a["size"])
        w.fixed_op(node.name, "resize", attrs, {"size": [size_op], "input": w.data_inputs(node)})


_PLANAR_MODES = ("NEAREST", "BILINEAR")  # resize modes of 4-d feature maps; TRILINEAR is 5-d


def _shape_resize(op):
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


def _resize_to_inputs(op, dims, mode):
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


def _run_resize(run, op, ins):
    """``F.interpolate`` on NCHW; NEAREST (``nearest-exact`` with ``half_pixel_centers``) or BILINEAR
    (``align_corners``), with ``scale_factor = (scale[1], scale[0])`` from the ``scale`` attribute
    ``[w, h]``, or the output size when the op has a ``size`` input."""
    x, mode = run.nchw(op, one(ins)), op.attr("mode")
    if mode == "NEAREST":
        kwargs = {"mode": "nearest-exact" if op.attr("half_pixel_centers") else "nearest"}
    elif mode == "BILINEAR":
        kwargs = {"mode": "bilinear", "align_corners": bool(op.attr("align_corners"))}
    else:
        raise run.error(op, "mode %r is not run (NEAREST, BILINEAR)" % mode)
    scale = op.attr("scale") or []
    if not op.inputs.get("size") and len(scale) == 2:
        y = F.interpolate(x, scale_factor=(float(scale[1]), float(scale[0])), **kwargs)
    else:
        y = F.interpolate(x, size=(op.shape[1], op.shape[2]), **kwargs)
    return run.checked(op, y.permute(TO_NHWC))


RECORD = OpRecord(
    family="resize",
    specs={RESIZE: OpSpec("dpu", True, False, False)},
    modules={nn.Upsample: RESIZE},
    functions={F.interpolate: RESIZE},
    signatures={RESIZE: (("input", "size", "scale_factor", "mode", "align_corners"),
                         {"size": None, "scale_factor": None, "mode": "nearest", "align_corners": None})},
    approximation=Absent("nearest copies codes; bilinear's weights are the quantizer's own fixed point "
                         "(docs/arithmetic.md)"),
    source="nndct_shared/base/key_names.py",
    onnx={RESIZE: _onnx_resize},
    dpu_rule={RESIZE: DpuRule(("resize",), dpu_resize)},
    xmodel={RESIZE: XmodelForm(_lower_resize, _create_resize, nhwc=True)},
    xir_ops={"resize": XirOp(OpDef("resize", IN + (ArgDef("size", OPTIONAL),),
                                   (req("mode", "string"), opt("align_corners", "bool", False),
                                    opt("half_pixel_centers", "bool", False), opt("scale", "float_vec", [])),
                                   _shape_resize), _run_resize, "resize")},
    traced={RESIZE: ("upsample_nearest2d", "upsample_bilinear2d")},
    refusals={},
    sim={RESIZE: TORCH},
)
