"""The maximum over a dim with its indices (``x.max(dim)``, ``torch.max(x, dim)``): the simulation runs it in
float; the xmodel writer and the ONNX exporter refuse the form with two outputs (the real quantizer writes
XIR reduction_max). ``x.max()`` and ``torch.max(a, b)`` give one tensor: the stages take or refuse them
for their own reasons."""
import torch

from .record import refusals_only
from .refusal import Known, NOT_YET, ONNX, REAL_QUANTIZER, XMODEL

MAX_DIM = Known(
    what="max over a dim (values and indices)", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=True,
    real="the real quantizer writes it as XIR reduction_max",
    instead=REAL_QUANTIZER + "; calibration and test here are not affected")

RECORD = refusals_only(
    "reduce_max", "nndct_shared/base/key_names.py (MAX)",
    {torch.max: MAX_DIM, "max": MAX_DIM})
