"""Up- and down-sampling (``nndct_resize``): ``nn.Upsample`` and ``F.interpolate``."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec

RESIZE = "nndct_resize"

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
)
