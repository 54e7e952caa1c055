"""The known refusals: calls this project refuses somewhere, each with its true reason; the rows are the op
records' (``pipeline.ops.REFUSALS``, ``OpRecord.refusals``: each in the unit of the family it belongs to, or
in a small unit of its own for calls no family has, Conv1d, GroupNorm, ...); this module asks them.

Where an op stops matters less than why, and the why is one of three (``pipeline/ops/refusal.py``):

- ``NOT_YET``: the real quantizer handles it and this project has no form for it yet (no
  simulation of its arithmetic, no XIR form, no ONNX lowering); meanwhile the real quantizer in the
  Vitis AI image does it (the runner's ``quantizer.backend: nndct``; a script imports
  ``pytorch_nndct.apis`` instead of ``pipeline.apis``);
- ``TRACED_OTHERWISE``: torch.jit traces the call as other ops, and the xmodel takes its op names
  from that trace, as the real quantizer does (docs/xmodel.md#names); it is also the xmodel writer's
  reason for a node with no row whose op it finds no traced op for (:func:`traced_otherwise`: ``F.normalize``,
  which torch.jit records as its norm, clamp, expand and div; ViT's class-token expand, a reflection pad, a
  number divided by a tensor and a ``padding='same'`` conv are no longer ones: the capture takes them as torch.jit traces them, as the real quantizer does: ``nndct_pad_nd``,
  ``x.reciprocal() * c`` (``rewrites.reciprocal_divisions``) and ``aten::_convolution_mode``
  (``pipeline/ops/conv``));
- ``NOT_IN_REAL``: the real quantizer does not take it either.

Each ``Known`` row names the stages of this project that refuse the call (``SIMULATION``: the
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
from typing import Optional

import torch
import torch.fx
from torch import nn

from .. import ops
from ..errors import QuantizationError
from ..ops.refusal import NOT_IN_REAL, NOT_YET, ONNX, SIMULATION, TRACED_OTHERWISE, XMODEL, Known

__all__ = ["NOT_IN_REAL", "NOT_YET", "ONNX", "SIMULATION", "TRACED_OTHERWISE", "XMODEL", "Known", "MODULES",
           "FUNCTIONS", "METHODS", "lookup", "reason", "traced_otherwise", "NotSimulated", "refuse_in_simulation",
           "explain"]

# the records' rows by the kind of call: a module class, a method name, a function
MODULES = {call: known for call, known in ops.REFUSALS.items() if isinstance(call, type)}
METHODS = {call: known for call, known in ops.REFUSALS.items() if isinstance(call, str)}
FUNCTIONS = {call: known for call, known in ops.REFUSALS.items() if not isinstance(call, (type, str))}


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
