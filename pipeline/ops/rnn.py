"""Recurrent layers (``nn.LSTM``, ``nn.GRU``): float operators nndct has no type for (``aten::lstm`` of three
outputs, output and states h and c; ``aten::gru`` of two), which the simulation runs in float; the xmodel writer
and the ONNX exporter refuse them (the real quantizer quantizes them in its RNN mode only, and without it fails
copying ``aten::lstm`` into its deploy graph: ``tests/data/refused_real/lstm``). Called without initial states,
the module's forward makes them, and torch.jit traces that: the batch size read (``nndct_shape``) and one zero
tensor per state (``nndct_zeros``), inputs of the layer's node after its input."""
from typing import Callable, Tuple

from torch import nn

from .io import ZEROS
from .record import Absent, OpRecord, OpSpec
from .refusal import Known, NOT_YET, ONNX, XMODEL
from .shape import SHAPE
from .sim_support import TORCH

LSTM = "aten::lstm"
GRU = "aten::gru"

RNN = Known(
    what="LSTM / GRU", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=False,
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


_REFUSED = Absent("refused: the real quantizer takes recurrent layers in its RNN mode only (refusals)")

RECORD = OpRecord(
    family="rnn",
    specs={LSTM: OpSpec("float", False, False, False), GRU: OpSpec("float", False, False, False)},
    several={LSTM: (LSTM, 3), GRU: (GRU, 2)},  # output, h (and c) of torch.jit's one node
    preludes={nn.LSTM: zero_states, nn.GRU: zero_states},
    approximation=Absent("float operators on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py (LSTM, GRU), pytorch_nndct/apis (lstm=True), torch/nn/modules/rnn.py",
    onnx={LSTM: _REFUSED, GRU: _REFUSED},
    dpu_rule={LSTM: Absent("a float operator of the quantizer"), GRU: Absent("a float operator of the quantizer")},
    xmodel={LSTM: _REFUSED, GRU: _REFUSED},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={},  # each type traced under its own name
    refusals={nn.LSTM: RNN, nn.GRU: RNN},
    sim={LSTM: TORCH, GRU: TORCH},
)
