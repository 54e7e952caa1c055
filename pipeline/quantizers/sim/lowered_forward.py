"""The lowered test-mode model's per-forward decisions (``lowered.build_lowered``): an adaptive average pool.

nndct decides an adaptive average pool on every forward (``deephi_AdaptiveAvgPool2d.forward``,
``pytorch_nndct/nn/modules/adaptive_avg_pool.py``; docs/arithmetic.md#adaptive-average-pool-that-does-not-divide):
the DPU factor of ``input // output`` and whether the output size divides the input's come from the tensor
that forward sees. The lowered graph is one fixed graph, written for the example's shapes (what the exporters
walk, unchanged). :class:`LoweredModule` runs it as is for inputs of the example's sizes, and for inputs of
other sizes a graph lowered for the sizes its adaptive pools see then: each new input size (the batch
dimension aside) costs one float forward of its first sample, to learn those sizes (:func:`shapes_on`, which
the drop-in's warning about an uneven pool asks too), and at most one lowering.
"""
import copy
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.fx

from ...errors import QuantizationError
from ... import ops as g
from ...fx.example_run import _ShapeRecorder


def float_shapes(graph: Any, args: Any) -> Dict[Any, Any]:
    """fx node -> output shape (a tuple; None for what is no tensor) of ``graph``'s float model (its
    ``SimGraph.gm``) on a copy of the first sample of each of ``args`` (tensors with a batch dimension).

    Raises:
        QuantizationError: the float model fails there (the node named).
    """
    recorder = _ShapeRecorder(graph.gm)
    with torch.no_grad():
        recorder.run(*[a[:1].detach().clone() for a in args])  # a copy: a model may write its input
    return recorder.shapes


def input_key(shapes: Any) -> Tuple[Any, ...]:
    """The sizes of the model inputs of ``shapes`` (one shape per input, None for no tensor), batch left out."""
    return tuple(None if s is None else tuple(int(d) for d in s[1:]) for s in shapes)


# SimGraph -> {input key: fx node -> shape}: the float model's shapes on inputs of other sizes than the example's
_SHAPES = weakref.WeakKeyDictionary()  # type: weakref.WeakKeyDictionary


def shapes_on(graph: Any, args: Any) -> Dict[Any, Any]:
    """fx node -> output shape of ``graph``'s float model on inputs of the sizes of ``args`` (tensors with a
    batch dimension): ``graph.example_shapes`` for the example's sizes, else :func:`float_shapes` of ``args``,
    made once per input sizes (the batch dimension aside) for the graph's life.

    Raises:
        QuantizationError: the float model fails on the first sample of ``args`` (the node named).
    """
    key = input_key([a.shape for a in args])
    if key == input_key([graph.example_shapes[n.fx_node] for n in graph.inputs]):
        return graph.example_shapes
    known = _SHAPES.setdefault(graph, {})
    if key not in known:
        known[key] = float_shapes(graph, args)
    return known[key]


class PoolVariants:
    """The adaptive pools of one lowered model and the graphs lowered for other pool input sizes.

    Args:
        graph: the SimGraph; ``build``: ``build(pool_shapes) -> GraphModule``, the lowering with the adaptive
            pools' input shapes (fx node -> NCHW shape) replacing the example's.

    A graph lowered for other sizes calls the model's own modules (its quantized parameters as they are then:
    ``load_ft_param`` replaces them in place). A copy of the model (``copy.deepcopy``) gets its own, empty
    cache of graphs; the model is not pickled (:meth:`LoweredModule.__reduce__`).
    """

    def __init__(self, graph: Any, build: Callable[[Dict[Any, Any]], torch.fx.GraphModule]) -> None:
        self.graph, self.build = graph, build
        self.pools = [n.fx_node.all_input_nodes[0] for n in graph.nodes
                      if n.op == g.ADAPTIVEAVGPOOL2D and not graph.runs_float(n)]
        # the example's shapes cost a float forward: read only for a model with such a pool
        self.example_sizes = self._sizes(graph.example_shapes) if self.pools else ()
        self._models = {}  # type: Dict[Tuple[Any, ...], torch.fx.GraphModule]

    def __deepcopy__(self, memo: Dict[int, Any]) -> "PoolVariants":
        return PoolVariants(self.graph, self.build)

    def _sizes(self, shapes: Dict[Any, Any]) -> Tuple[Any, ...]:
        return tuple(tuple(int(d) for d in shapes[p][2:]) if shapes.get(p) is not None else None
                     for p in self.pools)

    def model_for(self, owner: torch.fx.GraphModule, args: Tuple[Any, ...]) -> Optional[torch.fx.GraphModule]:
        """The model to run on ``args`` (the model inputs) instead of ``owner`` (the lowered model holding this
        object): a GraphModule calling ``owner``'s modules; or None: ``owner``'s graph is the one (the same pool
        input sizes as the example's, or an input that is no tensor with a batch dimension).

        Raises:
            QuantizationError: the float model fails on the first sample of ``args`` (the node named).
        """
        if not self.pools or not all(isinstance(a, torch.Tensor) and a.dim() > 0 and a.shape[0] > 0 for a in args):
            return None
        sizes = self._sizes(shapes_on(self.graph, args))  # the sizes each pool sees on these input sizes
        if sizes == self.example_sizes:
            return None
        if sizes not in self._models:
            lowered = self.build({p: (1, 1) + s for p, s in zip(self.pools, sizes) if s is not None})
            self._models[sizes] = torch.fx.GraphModule(owner, lowered.graph, class_name=type(owner).__name__)
        return self._models[sizes]


def for_inputs(model: torch.fx.GraphModule, inputs: Any) -> torch.fx.GraphModule:
    """The lowered model whose graph runs on ``inputs`` (one tensor per model input): ``model`` itself, or,
    where ``model``'s adaptive pools see other sizes on them than on the example, the graph lowered for those
    sizes on ``model``'s modules, with its ``quant_info``, ``fast_finetuned`` and ``output_fix_pos``. For
    the exporters, which walk the graph on an export input (the xmodel: the first test forward's).

    Raises:
        QuantizationError: the float model fails on ``inputs`` (the node named).
    """
    variants = model.__dict__.get("pool_variants")
    other = variants.model_for(model, tuple(inputs)) if variants is not None else None
    if other is None:
        return model
    for attr in ("quant_info", "fast_finetuned", "output_fix_pos", "sim_session"):
        if attr in model.__dict__:
            setattr(other, attr, model.__dict__[attr])
    return other


class LoweredModule(torch.fx.GraphModule):
    """A lowered test-mode model (``lowered.py``'s contract) whose ``forward`` runs, for inputs whose adaptive
    pools see other sizes than the example's, the graph lowered for those sizes (:class:`PoolVariants`, the
    attribute ``pool_variants``; None: always its own graph). Its graph, code and modules are the example's."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The module's call, its hooks first (the drop-in's input checks), its ``forward`` the graph lowered
        for the sizes the adaptive pools see on the inputs where they are not the example's. ``forward``
        itself stays the graph's code (what ``torch.fx`` traces)."""
        if self.__dict__.get("pool_variants") is None:
            return super().__call__(*args, **kwargs)
        self.__dict__["forward"] = self._pool_forward  # this call's forward (an instance attribute wins)
        try:
            return super().__call__(*args, **kwargs)
        finally:
            del self.__dict__["forward"]

    def _pool_forward(self, *args: Any, **kwargs: Any) -> Any:
        other = None if kwargs else self.__dict__["pool_variants"].model_for(self, args)
        return type(self).forward(self, *args, **kwargs) if other is None else other.forward(*args)

    def __copy__(self) -> "LoweredModule":
        """A shallow copy (``copy.copy``): the same modules, graph, hooks and attributes, deciding per forward too
        (torch's GraphModule copy would be a plain GraphModule without ``pool_variants``)."""
        return _init_lowered(LoweredModule.__new__(LoweredModule), dict(self.__dict__), self.graph,
                             type(self).__name__)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "LoweredModule":
        """A copy of its modules, graph, hooks and attributes (the drop-in's input checks with their quantizer,
        copied once through ``memo``), deciding per forward too, on its own modules. torch 1.13's GraphModule
        copy passes no ``memo`` (a hook holding the model recurses without end) and drops the hooks."""
        res = LoweredModule.__new__(LoweredModule)
        memo[id(self)] = res
        body = copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in _GRAPH_STATE}, memo)
        return _init_lowered(res, body, copy.deepcopy(self.graph, memo), type(self).__name__)

    def __reduce__(self) -> Any:
        """Refused: the graphs for other pool input sizes are lowered from the float model's capture, which a
        pickle cannot carry (torch pickles a GraphModule as its code, traced again on load, where the
        ``fake_quant`` calls fail), and a model that ran every input through the example's pools would give
        other numbers than the real quantizer's.

        Raises:
            QuantizationError: always, saying what to do instead.
        """
        raise QuantizationError(
            "the test-mode model (quant_model) of a model with an adaptive average pool cannot be pickled "
            "(torch.save(model), pickle): it decides each pool's DPU factor on every forward from the input's "
            "size, lowering the float model's capture again for new sizes, and a pickle cannot carry that capture. "
            "Copy it in the process with copy.deepcopy(quant_model); elsewhere, keep the calibration folder "
            "(quant_info.json, bias_corr.pth) and make torch_quantizer(\"test\", model, input_args, "
            "output_dir=...) again, or save quant_model.state_dict()")



# what GraphModule.__init__ makes from the graph (a copy takes it from there, not from the model's __dict__)
_GRAPH_STATE = ("_graph", "forward", "_code", "_lineno_map", "_prologue_start")
_MODULE_STATE = ("training", "_modules", "_parameters", "_buffers")


def _init_lowered(res: LoweredModule, body: Dict[str, Any], graph: torch.fx.Graph, class_name: str) -> LoweredModule:
    """``res`` (a new, uninitialized LoweredModule) made the module of ``graph`` on the modules, parameters and
    buffers of ``body`` (a model's ``__dict__``, or a copy of it), then given the rest of ``body`` as it is:
    its attributes, hooks, ``pool_variants``, training flag and every module it held."""
    root = torch.nn.Module()
    for key in ("_modules", "_parameters", "_buffers"):
        root.__dict__[key] = body[key]
    for key, value in body.items():  # a get_attr target that is a plain attribute
        if not key.startswith("_") and key not in root.__dict__:
            root.__dict__[key] = value
    torch.fx.GraphModule.__init__(res, root, graph, class_name=class_name)
    fresh = set(res.__dict__)
    for key, value in body.items():
        if key not in _GRAPH_STATE and (key not in fresh or key in _MODULE_STATE or "hooks" in key):
            res.__dict__[key] = value
    return res
