"""Pixel shuffles (``nn.PixelShuffle``, ``nn.PixelUnshuffle`` and their functions): the simulation runs them
in float (they move data only); the xmodel writer and the ONNX exporter refuse them (the real quantizer
writes XIR pixel-shuffle)."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord
from .refusal import Known, NOT_YET, ONNX, REAL_QUANTIZER, XMODEL

PIXEL_SHUFFLE = Known(
    what="PixelShuffle / pixel_shuffle", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=False,
    real="the real quantizer writes it as XIR pixel-shuffle",
    instead=REAL_QUANTIZER + "; calibration and test here are not affected")

RECORD = OpRecord(
    family="pixel_shuffle",
    specs={},  # no op type of the capture's: the calls below are refused or run as generic float operators
    approximation=Absent("no op type: the calls are refused (refusals)"),
    source="nndct_shared/base/key_names.py (PIXEL_SHUFFLE, PIXEL_UNSHUFFLE)",
    onnx={},
    dpu_rule={},
    xmodel={},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={},
    refusals={nn.PixelShuffle: PIXEL_SHUFFLE, nn.PixelUnshuffle: PIXEL_SHUFFLE, F.pixel_shuffle: PIXEL_SHUFFLE,
              F.pixel_unshuffle: PIXEL_SHUFFLE},
    sim={},
)
