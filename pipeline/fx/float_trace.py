"""One ``torch.fx`` trace of the float model, shared by everything a step does with it.

The calibration fingerprint (``quantizers.fingerprint.graph_hash``), the simulation's capture
(``fx.capture.capture``) and the per-layer sensitivity (``quantizers.sim.sensitivity``) each used
to trace the float model themselves; a step now traces it once (``FloatTrace.of``) and hands the
trace to each of them. Each consumer that rewrites the graph works on its own copy
(``copy.deepcopy`` of a ``torch.fx.Graph`` copies its nodes, names included; it does not trace).
"""
import copy
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.fx
from torch import nn

from .proxy_args import recording_proxy_arguments
from .tracer import CaptureTracer
from .work_copy import work_copy


class FloatTrace:
    """``tracer.CaptureTracer().trace`` of an eval-mode CPU copy of a float model (``pipeline.fx.work_copy``).

    Attributes:
        module: the copy (eval mode, parameters without grad, their storage shared with the float
            model's); the graph's call targets name its submodules. Read it; copy it
            (``work_copy``) before changing it, and never write its tensors in place.
        graph: the traced ``torch.fx.Graph``; deep-copy it before changing it.
        error: the exception fx raised when the model cannot be traced (``graph`` is None then); a
            Python branch on a traced value (``fails_on_control_flow``) is such a case: the capture
            then traces the model on its example instead (``fx.capture``), which this trace has not.
        model_class: the float model's class name.
    """

    def __init__(self, module: nn.Module, graph: Optional[torch.fx.Graph], error: Optional[Exception],
                 model_class: str) -> None:
        self.module = module
        self.graph = graph
        self.error = error
        self.model_class = model_class

    @classmethod
    def of(cls, model: nn.Module) -> "FloatTrace":
        """Trace a copy of ``model`` (never modified) once; a model fx cannot trace gives a
        FloatTrace whose ``error`` says why (the consumers raise or fall back as they did)."""
        error = None  # type: Optional[Exception]
        try:
            work, graph = fx_trace(lambda: work_copy(model))  # type: nn.Module, Optional[torch.fx.Graph]
        except Exception as e:  # fx raises many types (TraceError, TypeError, ...)
            work, graph, error = work_copy(model), None, e
        return cls(work, graph, error, type(model).__name__)

    def graph_copy(self) -> torch.fx.Graph:
        """A copy of the graph to rewrite (same node names); raises the trace's error when there is none."""
        if self.graph is None:
            raise self.error  # type: ignore
        return copy.deepcopy(self.graph)


def fails_on_control_flow(error: Exception) -> bool:
    """True when ``error`` is torch.fx's refusal of a Python branch, loop or size on a traced value:
    ``bool()`` of a Proxy (``TraceError``: "symbolically traced variables cannot be used as inputs to
    control flow", from ``if x.dim() == 4:`` or ``assert x.shape[1] == 3``), iterating one
    (``TraceError``: "Proxy object cannot be iterated") or ``len()`` of one (``RuntimeError``: "'len'
    is not supported in symbolic tracing"), in torch 1.13 and 2.x (``torch/fx/proxy.py``). The real
    quantizer's ``torch.jit.trace`` runs such code on the example; the capture follows it there
    (``concrete_trace``)."""
    if isinstance(error, torch.fx.proxy.TraceError):
        return True
    return isinstance(error, RuntimeError) and "'len' is not supported in symbolic tracing" in str(error)


def fx_trace(make_root: Callable[[], nn.Module],
             concrete_args: Optional[Dict[str, Any]] = None) -> Tuple[nn.Module, torch.fx.Graph]:
    """``tracer.CaptureTracer().trace`` (torch.fx with the capture's leaves) of the module ``make_root()`` returns; ``(module, graph)``.
    ``concrete_args``: forward() arguments traced as these values (fx's own ``concrete_args``).

    torch.fx's tracer patches every function of the ``math`` module for each trace, so that
    ``math.sqrt`` of a traced value is recorded as a call: a fifth of the trace of a small model.
    Most models never pass a traced value to ``math``, and for them the trace without those
    patches is the same graph (a math function of plain numbers runs as it is in both). One that
    does makes the unpatched trace raise (a traced value is no number: TypeError); it is then
    traced again as torch.fx does, on a new ``make_root()`` (the failed trace may have added
    attributes to the first). A torch function given a traced size (``torch.arange(x.shape[2])``)
    is recorded in every torch (``proxy_args.recording_proxy_arguments``).

    Raises:
        whatever the trace raises for the model (an untraceable model).
    """
    root = make_root()
    with recording_proxy_arguments():  # torch.arange(x.shape[2]) recorded in torch 1.13 as in torch 2
        try:
            return root, CaptureTracer(autowrap_modules=()).trace(root, concrete_args)
        except Exception:  # fx raises many types (TraceError, TypeError, ...): trace it as torch.fx does
            pass
        root = make_root()
        return root, CaptureTracer().trace(root, concrete_args)
