"""Group normalization (``nn.GroupNorm``, ``F.group_norm``): a call this project refuses (the real quantizer
quantizes it as its own op ``nndct_group_norm``)."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord
from .refusal import ALL_STAGES, Known, NOT_YET, REAL_QUANTIZER

GROUP_NORM = Known(
    what="GroupNorm", kind=NOT_YET, stops=ALL_STAGES, several=False,
    real="the real quantizer quantizes it as its own op, with input, weight, bias and output on fix-point grids",
    instead=REAL_QUANTIZER)

RECORD = OpRecord(
    family="group_norm",
    specs={},  # no op type of the capture's: the calls below are refused or run as generic float operators
    approximation=Absent("no op type: the calls are refused (refusals)"),
    source="nndct_shared/base/key_names.py (GROUP_NORM)",
    onnx={},
    dpu_rule={},
    xmodel={},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={},
    refusals={nn.GroupNorm: GROUP_NORM, F.group_norm: GROUP_NORM},
    sim={},
)
