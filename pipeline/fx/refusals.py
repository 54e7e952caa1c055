"""The known refusals: calls this project refuses somewhere, each with its true reason, in one literal table.

Where an op stops matters less than why, and the why is one of three:

- ``NOT_YET``: the real quantizer handles it and this project has no form for it yet (no
  simulation of its arithmetic, no XIR form, no ONNX lowering); meanwhile the real quantizer in the
  Vitis AI image does it (the runner's ``quantizer.backend: nndct``; a script imports
  ``pytorch_nndct.apis`` instead of ``pipeline.apis``);
- ``TRACED_OTHERWISE``: torch.jit traces the call as other ops, and the xmodel takes its op names
  from that trace, as the real quantizer does (docs/xmodel.md#names); it is also the xmodel writer's
  reason for a node with no row whose op it finds no traced op for (:func:`traced_otherwise`: a
  reflection pad, a number divided by a tensor; a ``padding='same'`` conv is no longer one: the capture
  takes it as torch.jit's ``aten::_convolution_mode``, as the real quantizer does, ``pipeline/ops/conv.py``);
- ``NOT_IN_REAL``: the real quantizer does not take it either.

Each :class:`Known` row names the stages of this project that refuse the call (``SIMULATION``: the
capture refuses it before calibration, because running it in float would not give the real
quantizer's numbers; ``XMODEL``: the xmodel writer; ``ONNX``: the ONNX exporter) and what the real
quantizer does with it, from its source (docs/xmodel.md#known-refusals). A stage that refuses a call
asks :func:`lookup` at the point where it gives up and words the error with :func:`reason`; the
simulation asks before anything runs (:func:`refuse_in_simulation`). A call with no row gets the
stage's own generic reason.

The rows are keyed by what the model calls: an ``nn.Module`` class, a function, a method name. A row
keyed by a call that also has forms every stage takes (``x.max()`` without a dim, a matmul the xmodel
writer turns into a dense) is only consulted where the stage gave up on it, so it never refuses them.
"""
import operator
from collections import namedtuple
from typing import Optional

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from ..errors import QuantizationError

NOT_YET = "not in this project yet"
TRACED_OTHERWISE = "traced differently"
NOT_IN_REAL = "not supported by the real quantizer either"

SIMULATION, XMODEL, ONNX = "simulation", "xmodel", "onnx"

# what: the call as the user writes it; kind: NOT_YET, TRACED_OTHERWISE or NOT_IN_REAL; real: what the
# real quantizer does with it; stops: the stages of this project that refuse it; instead: what to do;
# several: the row is about the call's form with several outputs (x.max(dim) gives values and indices;
# x.max() and torch.max(a, b) give one tensor, which the stages take or refuse for their own reasons)
Known = namedtuple("Known", "what kind real stops instead several")

_REAL_QUANTIZER = ("quantize and export it with the real quantizer in the Vitis AI image (the runner: "
                   "quantizer.backend: nndct; a script: pytorch_nndct.apis in place of pipeline.apis)")

CONV1D = Known(
    what="Conv1d", kind=NOT_YET, stops=frozenset((SIMULATION, XMODEL, ONNX)), several=False,
    real="the real quantizer quantizes it as a conv, its own op nndct_conv1d with weights, bias and output on "
         "fix-point grids, and writes XIR conv1d",
    instead=_REAL_QUANTIZER + ", or write it as nn.Conv2d with kernel (1, k) on x.unsqueeze(2), which this "
            "project simulates and exports")
CONV_TRANSPOSE1D = Known(
    what="ConvTranspose1d", kind=NOT_IN_REAL, stops=frozenset((SIMULATION, XMODEL, ONNX)), several=False,
    real="the real quantizer's parser raises 'ConvTranpose1D is unsupported'",
    instead="write it as nn.ConvTranspose2d with kernel (1, k) and stride (1, s) on x.unsqueeze(2)")
INSTANCE_NORM = Known(
    what="InstanceNorm", kind=NOT_YET, stops=frozenset((SIMULATION, XMODEL, ONNX)), several=False,
    real="the real quantizer quantizes it as its own op, with input, weight, bias and output on fix-point grids",
    instead=_REAL_QUANTIZER)
GROUP_NORM = Known(
    what="GroupNorm", kind=NOT_YET, stops=frozenset((SIMULATION, XMODEL, ONNX)), several=False,
    real="the real quantizer quantizes it as its own op, with input, weight, bias and output on fix-point grids",
    instead=_REAL_QUANTIZER)
PIXEL_SHUFFLE = Known(
    what="PixelShuffle / pixel_shuffle", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=False,
    real="the real quantizer writes it as XIR pixel-shuffle",
    instead=_REAL_QUANTIZER + "; calibration and test here are not affected")
MATMUL = Known(
    what="matmul of two tensors", kind=NOT_YET, stops=frozenset((XMODEL,)), several=False,
    real="the real quantizer writes it as XIR matmul",
    instead=_REAL_QUANTIZER + "; the ONNX exports carry it")
MAX_DIM = Known(
    what="max over a dim (values and indices)", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=True,
    real="the real quantizer writes it as XIR reduction_max",
    instead=_REAL_QUANTIZER + "; calibration and test here are not affected")
RNN = Known(
    what="LSTM / GRU", kind=NOT_YET, stops=frozenset((XMODEL, ONNX)), several=True,
    real="the real quantizer quantizes recurrent layers in its RNN mode, torch_quantizer(..., lstm=True), which "
         "this project does not simulate (the layer runs in float here)",
    instead="quantize it with pytorch_nndct's torch_quantizer(..., lstm=True) in the Vitis AI image")

MODULES = {
    nn.Conv1d: CONV1D,
    nn.ConvTranspose1d: CONV_TRANSPOSE1D,
    nn.InstanceNorm1d: INSTANCE_NORM,
    nn.InstanceNorm2d: INSTANCE_NORM,
    nn.InstanceNorm3d: INSTANCE_NORM,
    nn.GroupNorm: GROUP_NORM,
    nn.PixelShuffle: PIXEL_SHUFFLE,
    nn.PixelUnshuffle: PIXEL_SHUFFLE,
    nn.LSTM: RNN,
    nn.GRU: RNN,
}
FUNCTIONS = {
    F.conv1d: CONV1D,
    F.conv_transpose1d: CONV_TRANSPOSE1D,
    F.instance_norm: INSTANCE_NORM,
    F.group_norm: GROUP_NORM,
    F.pixel_shuffle: PIXEL_SHUFFLE,
    F.pixel_unshuffle: PIXEL_SHUFFLE,
    torch.matmul: MATMUL,
    operator.matmul: MATMUL,
    torch.max: MAX_DIM,
}
METHODS = {
    "matmul": MATMUL,
    "max": MAX_DIM,
}


def lookup(fx_node: torch.fx.Node, root: Optional[nn.Module] = None) -> Optional[Known]:
    """The row of what ``fx_node`` calls (``root``: the module its ``call_module`` targets name), or None."""
    if fx_node.op == "call_module":
        if root is None:
            return None
        try:
            return MODULES.get(type(root.get_submodule(str(fx_node.target))))
        except AttributeError:
            return None
    if fx_node.op == "call_function":
        try:
            return FUNCTIONS.get(fx_node.target)
        except TypeError:  # an unhashable target
            return None
    if fx_node.op == "call_method":
        return METHODS.get(str(fx_node.target))
    return None


def reason(known: Known, stage: str) -> str:
    """Why ``stage`` refuses the call of ``known``, and what to do: one sentence for an error message."""
    if known.kind == NOT_IN_REAL:
        return "%s is %s: %s; %s" % (known.what, NOT_IN_REAL, known.real, known.instead)
    if known.kind == TRACED_OTHERWISE:
        return traced_otherwise(known.what, known.real, known.instead)
    form = {SIMULATION: "the simulation has no form for %s yet, and running it in float would not give the real "
                        "quantizer's numbers" % known.what,
            XMODEL: "the xmodel writer has no XIR form for %s yet" % known.what,
            ONNX: "the ONNX exporter has no lowering for %s yet" % known.what}[stage]
    return "%s: %s; meanwhile %s" % (form, known.real, known.instead)


def traced_otherwise(what: str, traced: str, instead: str) -> str:
    """The reason of a call torch.jit traces as other ops than the simulation's node (``TRACED_OTHERWISE``):
    the xmodel's op names come from that trace (docs/xmodel.md#names)."""
    return ("torch.jit traces %s as other ops (%s), and the xmodel takes its op names from that trace, as the real "
            "quantizer does; %s" % (what, traced, instead))


class NotSimulated(QuantizationError):
    """The simulation has no form for a call of the model (a row of this table): raised by the capture
    before any work. Whoever only analyses a calibration the real quantizer made (the nndct backend's
    per-layer sensitivity) leaves that analysis out on it."""


def refuse_in_simulation(root: nn.Module, fx_node: torch.fx.Node) -> None:
    """Raise for a call the simulation refuses (a row whose ``stops`` holds ``SIMULATION``), naming the node.

    Raises:
        NotSimulated: the node, the call and :func:`reason`.
    """
    known = lookup(fx_node, root)
    if known is not None and SIMULATION in known.stops:
        raise NotSimulated("node %r (%s): %s" % (fx_node.name, known.what, reason(known, SIMULATION)))


def explain(fx_node: Optional[torch.fx.Node], root: Optional[nn.Module], stage: str, default: str,
            several: bool = False) -> str:
    """The reason ``stage`` gives for refusing ``fx_node``: its row's (:func:`reason`) when it has one that
    stops at ``stage`` (a row about a form with several outputs only where ``several``: the stage found
    the node's value not to be one tensor), else ``default``."""
    known = lookup(fx_node, root) if fx_node is not None else None
    if known is None or stage not in known.stops or (known.several and not several):
        return default
    return reason(known, stage)
