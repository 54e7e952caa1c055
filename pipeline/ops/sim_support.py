"""What an op's simulation piece is (``record.OpRecord.sim``): how the CPU simulation computes the op where
the real quantizer's module does not run torch's own call (a DPU approximation: LeakyReLU's slope, the hard
sigmoid's 1/6, the average pool's factor), and how the lowered test-mode model writes that out.

The rooms' machinery is handed to the piece at call time:

- ``run(s) -> (value, quantizable)`` or None: the calibration's float semantics of one node
  (``quantizers/sim/ops.py`` ``run_node``). ``s`` offers ``s.x`` (the node's first input's value),
  ``s.module`` (its module, None for a function or method call), ``s.fx_node``, and ``s.torch()``
  (torch's own call on the node's inputs, a Python-number operand replaced by its const node's value).
  ``quantizable`` is False where the real quantizer leaves the output unquantized (an adaptive pool that
  does not divide). None: torch's own call after all (``s.torch()`` as any other node).
- ``lower(lo) -> (fx value, quantizable)``: the node in the lowered test-mode model
  (``quantizers/sim/lowered.py``). ``lo`` offers ``lo.x`` (the input's value node in the new graph),
  ``lo.module``, ``lo.fx_node``, ``lo.input_shape`` (the example NCHW shape of the first input),
  ``lo.call_module(m)`` (``m`` added under the node's name, called on ``lo.x``),
  ``lo.call(fn, *args)`` (a ``call_function`` node), ``lo.copy()`` (torch's own call copied, its
  number operands the quantized consts) and ``lo.mul(value, scale)`` (a multiply, none for 1.0).
- ``train(lo) -> (fx value, quantizable)`` or None (the default: ``lower``): the node in the QAT trainable model
  (``quantizers/sim/qat/trainable.py``) where it differs from the test-mode one: the real QAT replaces some
  modules by its own (``pytorch_nndct/quantization/transforms.py``), which decide on every forward.
  ``lo.trainable`` says which rule: ``"real"`` (the real ``QatProcessor``'s modules) or ``"deploy"``
  (``exact_deploy``: the test-mode rule the deployed model follows), decided per forward too.

Both compute in float32 with the bits the real quantizer's module gives (``pytorch_nndct/nn/modules``).
"""
from collections import namedtuple
from typing import Any, Callable, List

from .record import Absent

# exact: the form computes torch's own call (written another way in the lowered model: a QuantStub as a clone,
# never its autograd function), so it applies also where a node runs in float (``SimGraph.runs_float``); a DPU
# approximation (exact False) applies only inside the quantized parts
SimForm = namedtuple("SimForm", "run lower exact train")
SimForm.__new__.__defaults__ = (False, None)

# How a type of role ``norm`` (its module quantizes its own weight and bias at its first call and computes
# with them: ``OpRecord.norm``) computes, given the simulation's graph and node at call time:
# - ``forward(graph, node, x, weight, bias) -> tensor``: the node on its (already quantized) input ``x`` with the
#   given (quantized, or float) weight and bias, None where it has none; ``graph.module(node)`` is its module;
#   a new float32 tensor, as the real quantizer's module computes it in its default mode;
# - ``module(graph, node) -> nn.Module``: the test-mode model's module for the node (its hyper-parameters; the
#   simulation sets its ``weight`` and ``bias`` to the quantized ones), whose call is ``forward``'s.
NormForm = namedtuple("NormForm", "forward module")

# How a type of role ``params`` (a layer whose weight and bias the calibration quantizes: ``OpRecord.layer``)
# computes:
# - ``forward(module, x, weight, bias) -> tensor``: the layer on its (quantized) input with the given weight and
#   bias (None where it has none), as the real quantizer's module calls torch (a new float32 tensor);
# - ``bias_dims``: the dims of the output error whose mean bias correction subtracts from the bias (nndct's
#   module's ``error.mean(dim=...)``).
LayerForm = namedtuple("LayerForm", "forward bias_dims")

# Functions a form's lowering calls (``lo.call``) that ``torch.fx`` cannot trace through (they read a size as a
# Python int): a trace of the lowered model's code (torch's load of a pickled GraphModule,
# ``quantizers/sim/lowered.py``'s ``LoweredTracer``) keeps each of them one call. Filled by :func:`opaque_call`.
OPAQUE_CALLS = []  # type: List[Callable[..., Any]]


def opaque_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: list ``fn`` (a module-level function a lowering calls) in ``OPAQUE_CALLS``; returns ``fn``."""
    OPAQUE_CALLS.append(fn)
    return fn


# the piece of an op the simulation runs as torch's own call
TORCH = Absent("torch's call is the DPU's arithmetic (the simulation runs the op's own torch call)")
