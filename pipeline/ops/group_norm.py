"""Group normalization (``nn.GroupNorm``, ``F.group_norm``): a call this project refuses (the real quantizer
quantizes it as its own op ``nndct_group_norm``)."""
import torch.nn.functional as F
from torch import nn

from .record import refusals_only
from .refusal import ALL_STAGES, Known, NOT_YET, REAL_QUANTIZER

GROUP_NORM = Known(
    what="GroupNorm", kind=NOT_YET, stops=ALL_STAGES, several=False,
    real="the real quantizer quantizes it as its own op, with input, weight, bias and output on fix-point grids",
    instead=REAL_QUANTIZER)

RECORD = refusals_only(
    "group_norm", "nndct_shared/base/key_names.py (GROUP_NORM)",
    {nn.GroupNorm: GROUP_NORM, F.group_norm: GROUP_NORM})
