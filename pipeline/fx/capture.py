"""The one graph capture: torch.fx trace, nndct-style rewrites and nndct node names.

The simulation, its test-mode model and the ONNX exporter key on this capture and on the op
table (``pipeline/ops/``). The real quantizer parses the model with ``torch.jit.trace``
into an nndct graph, rewrites it (``nndct_shared/optimization/optimizer.py``: fold Conv+BN, drop
dropout, CLE, LeakyReLU slope) and names every node ``<type>_<index>`` in topological order
(``assign_node_topological_name`` in ``nndct_shared/nndct_graph/base_graph.py``), e.g.
``nndct_conv2d_1``. ``quant_info.json`` keys are these names with a ``<ModelClass>::`` prefix.

Here the model is traced with ``torch.fx`` (torch 1.13 and 2.x) on a working copy whose weights
share storage with the caller's and are never written in place (``work_copy``: the caller's
model is never touched), and the fx graph is rewritten the same way (steps 1-3: ``rewrites.py``):

1. Module swaps before tracing (``pytorch_nndct/qproc/utils.py`` ``parse_module``): every
   ``nn.ReLU6`` becomes ``nn.ReLU`` when CLE is on (option ``relu6_replace='relu'``) or when
   ``convert_relu6_to_relu`` is set; ``nn.SiLU`` becomes ``nn.Hardswish`` with
   ``convert_silu_to_hswish``; an ``nn.LayerNorm`` without affine parameters becomes one with
   weight 1 and bias 0 (always).
2. Dropout and Identity nodes are removed (nndct removes dropout; jit traces never see Identity).
3. A BatchNorm2d whose input is a Conv2d/ConvTranspose2d is folded into it (``fuse_conv_bn.py``),
   in float32 as nndct's numpy code does it: ``s = gamma / sqrt(var + eps)``, ``W' = W * s``
   per output channel, ``b' = b * s + (beta - mean * s)``. Any other BatchNorm (BatchNorm1d
   after a Linear, ...) stays a ``nndct_batch_norm`` node whose parameters nndct converts to
   ``weight = s``, ``bias = beta - mean * s`` with mean 0, var 1, eps 0 (golden_wide README).
4. Nodes and names as nndct makes them (golden_wide README, "nndct node names"): a Python
   number operand of ``+ - * / //`` is an ``nndct_const`` node, numbered before every other
   node; ``x.size(i)`` is an ``nndct_shape`` node, and so is each size read from ``x.shape`` /
   ``x.size()`` (made where the torch.Size is read, in dimension order, unread ones dropped:
   ``shape_tuples.py``);
   each piece of ``chunk``/``split`` is an ``nndct_strided_slice`` (the last preceded by an
   ``nndct_shape`` for its end index); any operator without an nndct type is a float operator
   of type ``aten::<name>``, named ``aten_<name>_<index>``.
5. What torch.jit records and fx does not, or the other way round (rewrite or not):
   ``torch._assert`` and unused sizes are dropped (``rewrites.remove_shape_checks``), and so is every
   value no output depends on, with what is computed only for it (``dead_values.remove_dead_values``:
   the dead code pass nndct runs on its trace);
   ``x[:, i]`` is a strided slice then a select, ``x[:, None]`` a strided slice then an unsqueeze
   (``jit_index.split_select_index``); ``c / x`` is ``x.reciprocal() * c`` (``rewrites.reciprocal_divisions``);
   a call returning several tensors is one node with several outputs, indexing it no node (``SimNode.outputs``);
   ``nn.MultiheadAttention`` self-attention is inlined as the operations of its traced forward
   (``attention.inline_attention``; its packed projection an ``nndct_dense`` named
   ``in_proj_weight`` / ``in_proj_bias``).

A ``forward`` argument the example does not give takes its default, as in the real quantizer's
``torch.jit.trace(model, input_args)``, which calls ``forward`` with the example alone: the default
is traced as a constant (a float operand becomes an ``nndct_const``; a bool or None picks the path
and leaves no node), through fx's ``concrete_args`` (``_given_defaults``). A missing argument
without a default, or with a tensor default, is refused.

A function registered with ``torch.fx.wrap`` (torchvision's ``shifted_window_attention``, ...) is
traced through on the example, as torch.jit does (``concrete_trace.py``): its ops become nodes,
branches on sizes follow the example, ``x[idx] = v`` is an ``nndct_strided_slice`` and an
``aten::fill_``; ``F.linear`` on an ``nn.Linear``'s own parameters is that module's dense node.

A forward that branches in Python on a traced value (``if x.dim() == 4:``, ``assert x.shape[1] == 3``,
``nn.Softmax2d``), which plain fx refuses (``float_trace.fails_on_control_flow``), is traced again on the
example with the same tracer (``_branch_trace``): the branch takes the example's path, as in torch.jit's
trace; only then, so a model fx traces keeps its plain graph. A branch on the input's data is refused
(``concrete_trace.DataDependentBranch``: jit would specialise on the example, and the quantized model
would be wrong for inputs that take the other path). A ``view`` that keeps its input's shape on the
example is removed, as nndct's parser removes it (``redundant_view.py``).

Known differences from nndct's jit-based parser: other uses of Python numbers (e.g. inside
``torch.tensor``) may add nodes in nndct that shift later numbers; a conv module called twice is
refused.

The switches of step 1 come as plain flags (``rewrites.Rewrites``; the quantizer's config makes
them). This module is the driver; the steps live in ``rewrites.py`` and ``attention.py`` (1-3, 5),
``classify.py`` (each fx node's op type), ``builder.py`` (the nndct nodes), ``naming.py`` (nndct's
order and names, 4), ``example_run.py`` (the graph's GraphModule and shapes on the example) and
``graph.py`` (``SimNode``, ``SimGraph``, the result).
"""
import inspect
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.utils._pytree
from torch import nn

from .. import support
from ..errors import QuantizationError
from .attention import inline_attention
from .concrete_trace import DataDependentBranch, concrete_trace, has_wrapped_calls
from .dead_values import remove_dead_values
from .example_run import ExampleRun
from .float_trace import fails_on_control_flow, fx_trace
from .graph import SimGraph
from .in_place import augmented_writes, follow_in_place, refuse_lost_writes
from .naming import build_nodes
from .rewrites import (Rewrites, fold_bn, functional_linear_to_module, reciprocal_divisions, remove_passthrough,
                       remove_shape_checks, remove_traced_passthrough, swap_modules, swaps_keep_graph)
from .jit_index import refuse_wrong_slices, split_select_index
from .redundant_view import remove_redundant_views
from .shape_tuples import ShapeTuples
from .traced_views import unfold_buffer_views
from .work_copy import work_copy


def _given_defaults(model: nn.Module, n_examples: int) -> Dict[str, Any]:
    """forward()'s parameters after the first ``n_examples``, name -> default, when every one of
    them has a default that holds no tensor (what ``torch.jit.trace`` bakes in: the real quantizer
    traces ``model(*input_args)``); else ``{}`` (none missing, or the input count check refuses)."""
    try:
        params = list(inspect.signature(type(model).forward).parameters.values())[1:]  # after self
    except (TypeError, ValueError):  # no Python signature: fx traces it as it can
        return {}
    rest = params[n_examples:]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if not rest or any(p.kind not in kinds or p.default is inspect.Parameter.empty for p in rest):
        return {}
    holds_tensor = []  # type: List[bool]
    torch.utils._pytree.tree_map(lambda v: holds_tensor.append(isinstance(v, torch.Tensor)), [p.default for p in rest])
    return {} if any(holds_tensor) else {p.name: p.default for p in rest}


def _drop_baked(fx_graph: torch.fx.Graph, n_examples: int) -> None:
    """Remove what fx's ``concrete_args`` leaves of the baked arguments: the placeholders after the
    first ``n_examples`` (one per baked value, ``<name>_<i>``: the value itself is traced in) and
    the checks on them (``==`` and ``torch._assert``, ``_assert_is_none``); torch.jit records none."""
    doomed = []  # type: List[torch.fx.Node]
    stack = [n for n in fx_graph.nodes if n.op == "placeholder"][n_examples:]
    while stack:  # the placeholders and everything computed from them
        node = stack.pop()
        if node not in doomed:
            doomed.append(node)
            stack.extend(node.users)
    for node in reversed([n for n in fx_graph.nodes if n in doomed]):
        fx_graph.erase_node(node)


class _ControlFlow(Exception):
    """The plain fx trace refused a Python branch on a traced value (``float_trace.fails_on_control_flow``)."""


def _trace(make_root: Callable[[], nn.Module], model: nn.Module, n_examples: int,
           baked: Dict[str, Any]) -> Tuple[nn.Module, torch.fx.Graph]:
    # torch.fx.symbolic_trace without its GraphModule (built on first use, after the rewrites);
    # ``baked``: forward()'s defaults the example does not give (_given_defaults), traced in.
    # Raises _ControlFlow where the example is needed (a Python branch on a traced value).
    try:
        if not baked:
            return fx_trace(make_root)
        with warnings.catch_warnings():  # fx: "Was not able to add assertion" for a str default
            warnings.simplefilter("ignore")
            work, fx_graph = fx_trace(make_root, baked)
        _drop_baked(fx_graph, n_examples)
        return work, fx_graph
    except QuantizationError:
        raise
    except Exception as e:  # fx raises many types (TraceError, TypeError, ...)
        verdict = support.current()
        if verdict.kind == "refused":  # e.g. torch 1.x on Python 3.11: its tracer cannot unpack tuples
            raise QuantizationError("the sim quantizer could not trace %s (%s: %s), and this environment is not "
                                    "supported: %s" % (type(model).__name__, type(e).__name__, e, verdict.text))
        if fails_on_control_flow(e):
            raise _ControlFlow(e)
        raise QuantizationError(
            "the sim quantizer captures the model with torch.fx.symbolic_trace, which failed for "
            "%s: %s. %s" % (type(model).__name__, e, _advice(e)))


def _advice(error: Exception) -> str:
    """What to change in the model for fx's ``error``: a module built inside forward() (``nn.ReLU()(y)``) is
    not one of the model's submodules, which fx's ``Tracer.path_of_module`` requires of every module it
    calls; an assignment into part of a tensor (``y[:, 0:2] = v``, ``y[:, 0:2] += 1``: fx's Proxy has no
    ``__setitem__``), which the real quantizer's file loses too (docs/xmodel.md#known-refusals); any other
    failure, the data-dependent control flow neither fx nor torch.jit.trace follows."""
    if "is not installed as a submodule" in str(error):
        return ("A module created inside forward() cannot be traced: create it in __init__ (as an attribute, "
                "e.g. self.act = nn.ReLU()) or call its functional form (e.g. F.relu(y)).")
    if isinstance(error, TypeError) and "does not support item assignment" in str(error):
        return ("An assignment into part of a tensor (y[idx] = v, y[idx] += v) cannot be traced, and the real "
                "quantizer's xmodel computes without it: build the tensor from its pieces instead (torch.cat of "
                "the slices, or torch.where with a mask).")
    return ("Make forward() free of data-dependent Python control flow (the real quantizer's torch.jit.trace "
            "has the same requirement).")


def trace_with_defaults(model: nn.Module, examples: Tuple[torch.Tensor, ...]) -> Tuple[nn.Module, torch.fx.Graph]:
    """``(module, graph)``: the fx trace of a working copy of ``model`` (``work_copy``) called with
    ``examples``, its other ``forward`` arguments' defaults traced in as ``capture`` does (a bool
    default that picks the path, which plain ``torch.fx.symbolic_trace`` cannot follow), and a
    Python branch on a traced value followed on ``examples`` as ``capture`` follows it (the same
    graph and node names as the capture's trace before its rewrites).

    Raises:
        QuantizationError: the model cannot be traced (named, with fx's reason)."""
    baked = _given_defaults(model, len(examples))
    try:
        return _trace(lambda: work_copy(model), model, len(examples), baked)
    except _ControlFlow as e:
        work = work_copy(model)
        return work, _branch_trace(work, examples, model, baked, e.args[0])


def _on_example(trace: Callable[[], torch.fx.Graph], model: nn.Module, failed: str) -> torch.fx.Graph:
    """``trace()`` (a ``concrete_trace`` on the example), its failures as QuantizationError: a Python branch on
    the input's data with its reason, anything else (the model's own error on the example, or fx's) after
    ``failed`` (what was traced, ending in "failed")."""
    try:
        return trace()
    except QuantizationError:
        raise
    except DataDependentBranch as e:
        raise QuantizationError(
            "forward() of %s branches in Python on the input's data: %s. The real quantizer's torch.jit.trace "
            "would specialise on the example input (only a TracerWarning says so): the quantized model would "
            "compute the example's path for every input, and be wrong for inputs that take the other one. "
            "Branch on sizes only, or compute both paths with tensor ops (torch.where)." % (type(model).__name__, e))
    except Exception as e:
        raise QuantizationError("%s: %s: %s" % (failed, type(e).__name__, e))


def _concrete(work: nn.Module, examples: Tuple[torch.Tensor, ...], model: nn.Module) -> torch.fx.Graph:
    return _on_example(lambda: concrete_trace(work, tuple(e.detach().cpu() for e in examples)), model,
                       "the sim quantizer traces through the torch.fx-wrapped functions of %s on the example input "
                       "(as torch.jit does), which failed" % type(model).__name__)


def _branch_trace(work: nn.Module, examples: Tuple[torch.Tensor, ...], model: nn.Module, baked: Dict[str, Any],
                  fx_error: Exception) -> torch.fx.Graph:
    """The trace of ``work`` on the examples (``concrete_trace``) for a model whose plain trace failed on a
    Python branch (``fx_error``): the branch takes the example's path, as in torch.jit's trace."""
    def trace() -> torch.fx.Graph:
        with warnings.catch_warnings():  # fx: "Was not able to add assertion" for a str default
            warnings.simplefilter("ignore")
            return concrete_trace(work, tuple(e.detach().cpu() for e in examples), baked or None)
    fx_graph = _on_example(trace, model, "the sim quantizer captures %s on the example input (as torch.jit does) "
                           "because its forward() branches in Python on a traced value (torch.fx: %s), and that "
                           "trace failed" % (type(model).__name__, fx_error))
    if baked:
        _drop_baked(fx_graph, len(examples))
    return fx_graph


def _probe(work: nn.Module, fx_graph: torch.fx.Graph,
           examples: Tuple[torch.Tensor, ...]) -> Callable[[], Tuple[ExampleRun, Dict[torch.fx.Node, torch.fx.Node]]]:
    """``probe()``: an ExampleRun of a copy of the graph as it is now and the map of its nodes to the copy's,
    made on the first call (an index with an Ellipsis, or slices in a row, asks; most models never do)."""
    run = []  # type: List[Tuple[ExampleRun, Dict[torch.fx.Node, torch.fx.Node]]]

    def probe() -> Tuple[ExampleRun, Dict[torch.fx.Node, torch.fx.Node]]:
        if not run:
            copy, env = torch.fx.Graph(), {}  # type: torch.fx.Graph, Dict[torch.fx.Node, torch.fx.Node]
            copy.output(copy.graph_copy(fx_graph, env))
            run.append((ExampleRun(work, copy, tuple(e.detach().cpu().clone() for e in examples)), env))
        return run[0]
    return probe


def _ranks(work: nn.Module, fx_graph: torch.fx.Graph, examples: Tuple[torch.Tensor, ...]) -> Callable[[torch.fx.Node], int]:
    """``rank(node)``: the rank of an fx node's tensor on the example (:func:`_probe`)."""
    probe = _probe(work, fx_graph, examples)

    def rank(node: torch.fx.Node) -> int:
        run, env = probe()
        return run.rank(env[node])
    return rank


def _shapes(work: nn.Module, fx_graph: torch.fx.Graph, examples: Tuple[torch.Tensor, ...]) -> Callable[[torch.fx.Node], Any]:
    """``shape(node)``: the shape of an fx node's value on the example, None where it is not a tensor
    (:func:`_probe`)."""
    probe = _probe(work, fx_graph, examples)

    def shape(node: torch.fx.Node) -> Any:
        run, env = probe()
        return run.shapes[env[node]]
    return shape


def capture(model: nn.Module, example: Any, rewrites: Optional[Rewrites], traced: Any = None) -> SimGraph:
    """Copy (``work_copy``), rewrite and trace ``model``; name every node as nndct does.

    Args:
        model: the float model (any device; the copy is moved to the CPU and put in eval mode).
            Never modified.
        example: the example input: a float32 tensor of any rank, or a tuple/list of them (one
            per ``forward`` argument, in order; the arguments after them take their defaults,
            traced in as the real quantizer's ``torch.jit.trace`` does); not modified.
        rewrites: the quantizer's rewrites with the module swaps ``Rewrites`` switches on (the
            quantizer's config gives them: ``QuantConfig.rewrites()``); None keeps the model as
            written (no module swaps, Dropout/Identity kept as ``identity`` nodes, BatchNorm
            unfolded): the view ``inspect`` reports on.
        traced: a ``pipeline.fx.float_trace.FloatTrace`` of ``model`` to start from instead of
            tracing it again; used when every module swap keeps the graph (a torch.nn leaf swapped
            for a leaf, as ReLU6 -> ReLU), else the swapped copy is traced as without it.

    Returns:
        SimGraph.

    Raises:
        QuantizationError: the model cannot be traced, ``example`` does not match ``forward``'s
            arguments, or a conv/linear module is called twice.
    """
    examples = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    rewrite = rewrites is not None
    baked = _given_defaults(model, len(examples))  # forward()'s defaults the example does not give
    if traced is not None and traced.graph is not None and not baked and (
            not rewrite or swaps_keep_graph(traced.module, rewrites)):
        work = work_copy(traced.module)
        if rewrite:
            swap_modules(work, rewrites)
        fx_graph = traced.graph_copy()
    else:
        def make_root() -> nn.Module:
            work = work_copy(model)
            if rewrite:
                swap_modules(work, rewrites)
            return work
        try:
            work, fx_graph = _trace(make_root, model, len(examples), baked)
        except _ControlFlow as e:  # a Python branch on a traced value: followed on the example, as jit does
            work = make_root()
            fx_graph = _branch_trace(work, examples, model, baked, e.args[0])
    placeholders = [n for n in fx_graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(examples):
        raise QuantizationError("input_args: forward() of %s takes %d inputs (%s), got %d example tensors; "
                                "pass one tensor per input, in order, as a tuple (an input left out must "
                                "have a default that holds no tensor, which is then traced in)"
                                % (type(model).__name__, len(placeholders),
                                   ", ".join(str(p.target) for p in placeholders), len(examples)))
    if has_wrapped_calls(fx_graph):  # torch.fx.wrap-ped calls: traced through, as torch.jit does
        fx_graph = _concrete(work, examples, model)
    augmented_writes(work, fx_graph, _shapes(work, fx_graph, examples), rewrite)  # y += z as torch.jit has it
    follow_in_place(work, fx_graph)  # a tensor written in place is read after the call from its result
    remove_dead_values(work, fx_graph)  # what no output depends on: torch.jit's dead code pass drops it, rewrite or not
    if rewrite:  # the simulation's capture: a write the real quantizer loses (inspect's view takes it as written)
        refuse_lost_writes(work, fx_graph)
    remove_traced_passthrough(work, fx_graph, examples)  # no jit op, no nndct node, rewrite or not
    functional_linear_to_module(work, fx_graph)
    remove_shape_checks(fx_graph)
    unfold_buffer_views(work, fx_graph, examples)  # views as torch.jit records them and nndct keeps them, rewrite or not
    remove_redundant_views(work, fx_graph, examples)  # nndct's parser drops a view that keeps the shape
    split_select_index(fx_graph, _ranks(work, fx_graph, examples))
    if rewrite:  # the simulation's capture (inspect's as-written view takes them as written)
        refuse_wrong_slices(fx_graph, _shapes(work, fx_graph, examples))  # the real quantizer computes them otherwise
    reciprocal_divisions(fx_graph)
    param_names = inline_attention(work, fx_graph)  # the ops nndct's trace records, rewrite or not
    folded = {}  # type: Dict[str, str]
    if rewrite:
        remove_passthrough(work, fx_graph)
        folded = fold_bn(work, fx_graph)
    fx_graph.lint()
    run = ExampleRun(work, fx_graph, tuple(e.detach().cpu() for e in examples))
    nodes, steps, outputs, picks, returned = build_nodes(work, type(model).__name__, fx_graph, ShapeTuples(fx_graph, run.rank),
                                               rewrite, param_names)
    graph = SimGraph(type(model).__name__, run, nodes, steps, outputs, picks)
    graph.folded_bn = folded
    graph.returned = returned
    return graph
