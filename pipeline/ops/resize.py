"""Up- and down-sampling (``nndct_resize``): ``nn.Upsample`` and ``F.interpolate``."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import XmodelForm, pair

RESIZE = "nndct_resize"


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
        size_op = w.pack(node, "size", a["size"])
        w.fixed_op(node.name, "resize", attrs, {"size": [size_op], "input": w.data_inputs(node)})


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
    xmodel={RESIZE: XmodelForm(_lower_resize, _create_resize)},
)
