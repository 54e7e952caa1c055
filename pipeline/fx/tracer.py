"""The torch.fx tracer of the capture: which calls stay one node, as the real quantizer's trace sees them.

The real quantizer parses the model with ``torch.jit.trace`` (``pytorch_nndct/parse/trace_helper.py``),
which records the aten ops a forward runs: a torch.nn module is not a node of its own, its forward's
ops are. Plain ``torch.fx`` keeps every ``torch.nn`` module as one leaf call, which the simulation
would then name after the module class (``aten_logsigmoid_2``) where nndct names the op the forward
runs (``aten_log_sigmoid_2``), or keep as one float operator where nndct has several nodes
(``nn.Softsign``: abs, add, div).

:class:`CaptureTracer` keeps a ``torch.nn`` module as one node when an op record claims it
(``pipeline.ops``: its ``modules``, ``module_rules`` or ``refusals``), the capture removes it
(Dropout, Identity) or inlines it itself (``nn.MultiheadAttention``, ``fx/attention.py``), or it holds
parameters or buffers (a layer no record has, ``nn.Conv3d``: one node named after its module, which
the refusals and reports name); any other ``torch.nn`` module, a stateless one, is traced through, to the
functional call(s) its forward makes. A functional
that torch.jit records as several aten ops (:data:`COMPOSITE_FUNCTIONS`) is traced through to them.
"""
import operator
import types
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from pipeline.ops import MODULE_OPS, MODULE_RULES, REFUSALS

from .rewrites import REMOVED_MODULES

# Module classes the capture keeps as one node (exact types; REMOVED_MODULES by isinstance).
KEPT_MODULES = frozenset(MODULE_OPS) | frozenset(MODULE_RULES) | frozenset(
    c for c in REFUSALS if isinstance(c, type)) | {nn.MultiheadAttention}

# torch.nn.functional calls written in Python over other torch calls, which torch.jit records as
# those calls (torch.jit.trace of each, torch 1.13 and 2.x): softsign is abs, add, div; softmin is
# neg, softmax; tanhshrink is tanh, sub; local_response_norm is mul, view, pad, avg_pool3d, squeeze, view,
# mul, add, pow, div (for a 4-D input: its body branches on the input's rank, which a plain fx trace
# refuses; the capture then traces it on the example, ``concrete_trace``, and jit's path is taken).
COMPOSITE_FUNCTIONS = (F.softsign, F.softmin, F.tanhshrink, F.local_response_norm)


def keeps_module(m: nn.Module) -> bool:
    """True when the capture keeps ``m`` (a ``torch.nn`` module) as one node (module docstring)."""
    return type(m) in KEPT_MODULES or isinstance(m, REMOVED_MODULES) or any(True for _ in m.parameters()) \
        or any(True for _ in m.buffers())


def _body(fn: Any) -> Any:
    """``fn`` (a torch.nn.functional Python function) without its ``__torch_function__`` hand-off:
    the same code, its ``has_torch_function*`` checks answering False, so that tracing it records
    the torch calls of its body instead of one call of ``fn``."""
    no = lambda *args: False  # noqa: E731
    scope = dict(fn.__globals__, has_torch_function=no, has_torch_function_unary=no,
                 has_torch_function_variadic=no)
    body = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    body.__kwdefaults__ = fn.__kwdefaults__
    return body


# the node meta key of a value an augmented assignment made (``y += z``; :class:`AugmentedAssignments`)
AUGMENTED = "augmented_assignment"


class AugmentedAssignments:
    """A torch.fx Proxy's ``y += z``, ``y -= z``, ``y *= z`` and ``y /= z``. torch.fx's own Proxy has no
    ``__iadd__``, so Python falls back to ``y = y + z`` and a name that held ``y`` before (``identity = y``) keeps
    the value before the write, where eager torch, and torch.jit's trace the real quantizer parses, write ``y``
    in place (``aten::add_``) and every name reads the result. The call is recorded as the plain operator (the
    graph as before) marked ``node.meta[AUGMENTED]``; ``fx.in_place.augmented_writes`` decides, knowing whether
    ``y`` is a tensor, what it becomes."""

    def __iadd__(self, other: Any) -> Any:
        return self._augmented(operator.add, other)

    def __isub__(self, other: Any) -> Any:
        return self._augmented(operator.sub, other)

    def __imul__(self, other: Any) -> Any:
        return self._augmented(operator.mul, other)

    def __itruediv__(self, other: Any) -> Any:
        return self._augmented(operator.truediv, other)

    def _augmented(self, op: Any, other: Any) -> Any:
        proxy = self.tracer.create_proxy("call_function", op, (self, other), {})  # type: ignore[attr-defined]
        proxy.node.meta[AUGMENTED] = True
        return proxy


class _Proxy(AugmentedAssignments, torch.fx.Proxy):
    """torch.fx's Proxy with :class:`AugmentedAssignments`."""


class CaptureTracer(torch.fx.Tracer):
    """``torch.fx.Tracer`` whose leaves are the modules the op records claim (module docstring); a class an op
    record names that is no torch.nn class (``MODULE_OPS``: the drop-in's ``QuantStub``/``DeQuantStub``,
    ``pipeline.nn``) is a leaf too, as nndct's parser keeps ``QuantStubF`` as one node."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return type(m) in MODULE_OPS or (super().is_leaf_module(m, module_qualified_name) and keeps_module(m))

    def proxy(self, node: torch.fx.Node) -> torch.fx.Proxy:
        return _Proxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        if kind == "call_function" and target in COMPOSITE_FUNCTIONS:
            return _body(target)(*args, **kwargs)  # records the body's calls
        return super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
