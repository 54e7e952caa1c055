"""Recurrent layers (``nn.LSTM``, ``nn.GRU``): the simulation runs them in float (``aten::lstm``, ``aten::gru``:
float operators of three and two outputs); the xmodel writer and the ONNX exporter refuse them (the real
quantizer quantizes them in its RNN mode only). Called without initial states, the module's forward makes
them, and torch.jit traces that: the batch size read (``nndct_shape``) and one zero tensor per state
(``nndct_zeros``), inputs of the layer's node after its input (``tests/data/refused_real/lstm``)."""
import dataclasses
from typing import Callable, Tuple

from torch import nn

from .io import ZEROS
from .record import refusals_only
from .refusal import Known, NOT_YET, ONNX, XMODEL
from .shape import SHAPE

RNN = Known(
    what="LSTM / GRU", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=True,
    real="the real quantizer quantizes recurrent layers in its RNN mode, torch_quantizer(..., lstm=True), which "
         "this project does not simulate (the layer runs in float here)",
    instead="quantize it with pytorch_nndct's torch_quantizer(..., lstm=True) in the Vitis AI image")


def zero_states(module: nn.Module, args: int, rank: Callable[[], int]) -> Tuple[Tuple[str, Tuple[int, ...], bool], ...]:
    """The prelude of an ``nn.LSTM``/``nn.GRU`` call (``record.Prelude``): without initial states (one
    positional argument) and on a batched input (rank 3), torch's forward reads the batch size
    (``input.size(0 if batch_first else 1)``: nndct_shape of the input) and makes each state
    ``torch.zeros(layers * directions, batch, hidden)`` of it (nndct_zeros: two for the LSTM, h and c; one
    for the GRU); the layer's node takes them after its input (``torch/nn/modules/rnn.py``, ``forward``).
    Nothing where the call gives its states or the input is unbatched (torch unsqueezes it first)."""
    if args != 1 or rank() != 3:
        return ()
    states = 2 if isinstance(module, nn.LSTM) else 1
    return ((SHAPE, (-1,), False),) + ((ZEROS, (0,), True),) * states


RECORD = dataclasses.replace(refusals_only(
    "rnn", "nndct_shared/base/key_names.py (LSTM, GRU), pytorch_nndct/apis (lstm=True), torch/nn/modules/rnn.py",
    {nn.LSTM: RNN, nn.GRU: RNN}), preludes={nn.LSTM: zero_states, nn.GRU: zero_states})
