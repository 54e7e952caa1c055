"""A batch norm with no conv before it (``nndct_batch_norm``): a per-channel scale and offset layer.
nndct's BatchNorm module does no bias correction."""
from torch import nn

from .record import Absent, OpRecord, OpSpec

BATCH_NORM = "nndct_batch_norm"

RECORD = OpRecord(
    family="batch_norm",
    specs={BATCH_NORM: OpSpec("dpu", True, False, False)},
    modules={nn.BatchNorm1d: BATCH_NORM, nn.BatchNorm2d: BATCH_NORM},
    roles={"params": (BATCH_NORM,)},
    approximation=Absent("folded into a scale and an offset, quantized as parameters"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/nn/modules/batchnorm.py",
)
