"""Instance normalization (``nn.InstanceNorm1d/2d/3d``, ``F.instance_norm``): a call this project refuses (the
real quantizer quantizes it as its own op ``nndct_instance_norm``)."""
import torch.nn.functional as F
from torch import nn

from .record import refusals_only
from .refusal import ALL_STAGES, Known, NOT_YET, REAL_QUANTIZER

INSTANCE_NORM = Known(
    what="InstanceNorm", kind=NOT_YET, stops=ALL_STAGES, several=False,
    real="the real quantizer quantizes it as its own op, with input, weight, bias and output on fix-point grids",
    instead=REAL_QUANTIZER)

RECORD = refusals_only(
    "instance_norm", "nndct_shared/base/key_names.py (INSTANCE_NORM)",
    {nn.InstanceNorm1d: INSTANCE_NORM, nn.InstanceNorm2d: INSTANCE_NORM, nn.InstanceNorm3d: INSTANCE_NORM,
     F.instance_norm: INSTANCE_NORM})
