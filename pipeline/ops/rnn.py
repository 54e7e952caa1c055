"""Recurrent layers (``nn.LSTM``, ``nn.GRU``): the simulation runs them in float; the xmodel writer and the
ONNX exporter refuse them (the real quantizer quantizes them in its RNN mode only)."""
from torch import nn

from .record import refusals_only
from .refusal import Known, NOT_YET, ONNX, XMODEL

RNN = Known(
    what="LSTM / GRU", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=True,
    real="the real quantizer quantizes recurrent layers in its RNN mode, torch_quantizer(..., lstm=True), which "
         "this project does not simulate (the layer runs in float here)",
    instead="quantize it with pytorch_nndct's torch_quantizer(..., lstm=True) in the Vitis AI image")

RECORD = refusals_only(
    "rnn", "nndct_shared/base/key_names.py (LSTM, GRU), pytorch_nndct/apis (lstm=True)",
    {nn.LSTM: RNN, nn.GRU: RNN})
