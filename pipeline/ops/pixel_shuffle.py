"""Pixel shuffles (``nn.PixelShuffle``, ``nn.PixelUnshuffle`` and their functions): the simulation runs them
in float (they move data only); the xmodel writer and the ONNX exporter refuse them (the real quantizer
writes XIR pixel-shuffle)."""
import torch.nn.functional as F
from torch import nn

from .record import refusals_only
from .refusal import Known, NOT_YET, ONNX, REAL_QUANTIZER, XMODEL

PIXEL_SHUFFLE = Known(
    what="PixelShuffle / pixel_shuffle", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=False,
    real="the real quantizer writes it as XIR pixel-shuffle",
    instead=REAL_QUANTIZER + "; calibration and test here are not affected")

RECORD = refusals_only(
    "pixel_shuffle", "nndct_shared/base/key_names.py (PIXEL_SHUFFLE, PIXEL_UNSHUFFLE)",
    {nn.PixelShuffle: PIXEL_SHUFFLE, nn.PixelUnshuffle: PIXEL_SHUFFLE, F.pixel_shuffle: PIXEL_SHUFFLE,
     F.pixel_unshuffle: PIXEL_SHUFFLE})
