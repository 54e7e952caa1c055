"""Up- and down-sampling (``nndct_resize``): ``nn.Upsample`` and ``F.interpolate``."""
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .onnx_form import Unsupported, arg

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
)
