"""Instance normalization (``nn.InstanceNorm1d/2d/3d``, ``F.instance_norm``): a call this project refuses (the
real quantizer quantizes it as its own op ``nndct_instance_norm``)."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord
from .refusal import ALL_STAGES, Known, NOT_YET, REAL_QUANTIZER

INSTANCE_NORM = Known(
    what="InstanceNorm", kind=NOT_YET, stops=ALL_STAGES, several=False,
    real="the real quantizer quantizes it as its own op, with input, weight, bias and output on fix-point grids",
    instead=REAL_QUANTIZER)

RECORD = OpRecord(
    family="instance_norm",
    specs={},  # no op type of the capture's: the calls below are refused or run as generic float operators
    approximation=Absent("no op type: the calls are refused (refusals)"),
    source="nndct_shared/base/key_names.py (INSTANCE_NORM)",
    onnx={},
    dpu_rule={},
    xmodel={},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={},
    refusals={nn.InstanceNorm1d: INSTANCE_NORM, nn.InstanceNorm2d: INSTANCE_NORM, nn.InstanceNorm3d: INSTANCE_NORM,
              F.instance_norm: INSTANCE_NORM},
    sim={},
)
