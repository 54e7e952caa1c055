"""The one graph capture: torch.fx trace, nndct-style rewrites and nndct node names.

The simulation, its test-mode model and the ONNX exporter key on this capture and on the op
table (``pipeline/fx/optable.py``). The real quantizer parses the model with ``torch.jit.trace``
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
   ``torch._assert`` and unused sizes are dropped (``rewrites.remove_shape_checks``);
   ``x[:, i]`` is a strided slice then a select (``rewrites.split_select_index``);
   ``nn.MultiheadAttention`` self-attention is inlined as the operations of its traced forward
   (``attention.inline_attention``; its packed projection an ``nndct_dense`` named
   ``in_proj_weight`` / ``in_proj_bias``).

A function registered with ``torch.fx.wrap`` (torchvision's ``shifted_window_attention``, ...) is
traced through on the example, as torch.jit does (``concrete_trace.py``): its ops become nodes,
branches on sizes follow the example, ``x[idx] = v`` is an ``nndct_strided_slice`` and an
``aten::fill_``; ``F.linear`` on an ``nn.Linear``'s own parameters is that module's dense node.

Known differences from nndct's jit-based parser: other uses of Python numbers (e.g. inside
``torch.tensor``) may add nodes in nndct that shift later numbers; a conv module called twice is
refused.
"""
import hashlib
import inspect
import json
import operator
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
from torch import nn

from ..errors import QuantizationError
from ..quantizers.quant_config import QuantConfig
from . import optable as t
from .optable import (ARITHMETIC_TYPES, CONST, CONV2D, CONVTRANSPOSE2D,
                      DEPTHWISE_CONV2D, DEPTHWISE_CONVTRANSPOSE2D, FUNCTION_OPS, INPUT, METHOD_OPS,
                      MODULE_OPS, PARAM_TYPES, RELU6, RETURN, SHAPE, SPLIT_FUNCTIONS, SPLIT_METHODS,
                      STRIDED_SLICE)
from .concrete_trace import concrete_trace, has_wrapped_calls
from .float_trace import fx_trace
from .work_copy import work_copy
from .shape_tuples import ShapeTuples, is_access
from .attention import inline_attention
from .rewrites import (REMOVED_FUNCTIONS, REMOVED_MODULES, fold_bn, functional_linear_to_module, remove_passthrough,
                       remove_shape_checks, remove_traced_passthrough, split_select_index, swap_modules,
                       swaps_keep_graph)

class SimNode:
    """One nndct node of the captured graph.

    Attributes:
        name: nndct node name without the class prefix, e.g. ``"nndct_conv2d_1"``.
        op: nndct op type, e.g. ``"nndct_conv2d"`` (a row of ``optable``; ``aten::<name>`` for a
            float operator nndct has no type for).
        fx_node: the node of ``SimGraph.gm`` that computes it; None for an ``nndct_const`` and
            for the ``nndct_shape`` nndct adds before the last piece of a chunk/split.
        inputs: producer SimNodes in argument order (nndct ``in_nodes``).
        users: consumer SimNodes in graph order (nndct ``out_nodes``; the return is not a SimNode).
        module_path: submodule path in ``SimGraph.gm`` for module calls, else None.
        param_names: the parameters nndct quantizes in the node's forward: for conv/dense/
            batch_norm ``{"weights": "<Class>::<path>.weight", "bias": ...}`` (bias only when the
            module has one); for a layer norm its weight and bias (gamma, beta; those it has), the
            module's or the state-dict tensors ``F.layer_norm`` is given.
        free_params: the state-dict tensors (parameters, buffers) a quantizable node of another
            kind takes directly as an operand, e.g. ConvNeXt's ``layer_scale * x``: full names in
            argument order. nndct binds them to the node and registers them in quant_info.json
            with no fix position (``[[8, null]]``): no module of that kind quantizes them, and the
            operator uses them in float (``TorchNndctQstrategy.create_quant_config``, the parser's
            ``_bind_free_params``; its export warns "Parameter tensor is not quantized").
        is_output: True when the node feeds the graph's return.
        value: for ``nndct_const``: the Python number (an int one counts as shape arithmetic
            only when every user is).
        const_args: positional argument index -> the ``nndct_const`` node standing for that
            Python number (arithmetic nodes).
        shape_value: True when the node computes a Python int (shape arithmetic): never quantized.
    """

    def __init__(self, name: str, op: str, fx_node: Optional[torch.fx.Node]) -> None:
        self.name = name
        self.op = op
        self.fx_node = fx_node
        self.inputs = []  # type: List[SimNode]
        self.users = []  # type: List[SimNode]
        self.module_path = fx_node.target if fx_node is not None and fx_node.op == "call_module" else None
        self.param_names = {}  # type: Dict[str, str]
        self.free_params = []  # type: List[str]
        self.is_output = False
        self.value = None  # type: Any
        self.const_args = {}  # type: Dict[int, SimNode]
        self.shape_value = False

    @property
    def float_operator(self) -> bool:
        """True when the node runs in float on the CPU: a float operator of the op table, or
        element-wise arithmetic with a constant operand (no DPU engine takes a constant)."""
        if self.shape_value or self.fx_node is None:
            return False
        return t.is_float_operator(self.op) or (self.op in (t.ADD, t.MULTIPLY) and any(
            i.op == CONST for i in self.inputs))

    def __repr__(self) -> str:
        return "SimNode(%s)" % self.name


class SimGraph:
    """The captured, rewritten float graph plus its nndct view.

    Attributes:
        class_name: the model's class name (``quant_info.json`` prefix).
        root: the module whose submodule and attribute paths the graph's nodes name: capture's
            working copy of the caller's model (``pipeline.fx.work_copy``), rewritten (BN folded,
            ReLU6 swapped when CLE is on); calibration looks modules up here.
        fx_graph: the rewritten ``torch.fx.Graph`` (dropout removed, BN folded).
        gm: ``torch.fx.GraphModule(root, fx_graph)`` computing the rewritten float model, built on
            first use (its code generation costs as much as a calibration batch of a small model,
            and calibration never runs it); its graph is ``fx_graph``, its modules ``root``'s.
        nodes: SimNodes in nndct's order (constants, then inputs, then the rest, topologically).
        inputs: the ``nndct_input`` nodes in argument order.
        steps: ``(fx_node, SimNode or None)`` for every fx node but the output, in execution
            order; None marks a helper step that is no nndct node (``x.shape`` and the sizes read
            from it, a chunk's tuple, a ``get_attr``): it is run as the fx node says.
        outputs: the SimNodes whose values the model returns, in return order.
        example_shapes: fx node -> output shape (tuple) seen on the example inputs, propagated on
            first use (test mode needs them; calibration does not; the capture does when a
            torch.Size is sliced or used whole).
    """

    def __init__(self, class_name: str, run: "_ExampleRun", nodes: List[SimNode],
                 steps: List[Tuple[torch.fx.Node, Optional[SimNode]]], outputs: List[SimNode]) -> None:
        self.class_name = class_name
        self.root = run.root
        self.fx_graph = run.fx_graph
        self._run = run
        self.nodes = nodes
        self.inputs = [n for n in nodes if n.op == INPUT]
        self.steps = steps
        self.outputs = outputs
        self.by_name = {n.name: n for n in nodes}
        self.output_node = [n for n in self.fx_graph.nodes if n.op == "output"][0]
        self._modules = {}  # type: Dict[str, nn.Module]

    @property
    def gm(self) -> torch.fx.GraphModule:
        return self._run.gm

    @property
    def example_shapes(self) -> Dict[torch.fx.Node, Any]:
        return self._run.shapes

    def full_name(self, node: SimNode) -> str:
        """``"<Class>::<node name>"``, the key used in quant_info.json and bias_corr.pth."""
        return "%s::%s" % (self.class_name, node.name)

    def module(self, node: SimNode) -> nn.Module:
        """The submodule a call_module node runs (looked up once per node; the rewrites that
        replace submodules all run in ``capture``, before this is first called)."""
        m = self._modules.get(node.module_path)
        if m is None:
            m = self._modules[node.module_path] = self.root.get_submodule(node.module_path)
        return m

    def parameter(self, name: str) -> torch.Tensor:
        """The tensor of a full parameter name (``"<Class>::<path>"``, a ``param_names`` or
        ``free_params`` entry) in ``root``: the working copy's own tensor (read it, never write it)."""
        value = self.root
        for part in name[len(self.class_name) + 2:].split("."):
            value = getattr(value, part)
        return value

    def float_operators(self) -> List[SimNode]:
        """The nodes that run in float on the CPU, in order (``SimNode.float_operator``)."""
        return [n for n in self.nodes if n.float_operator]

    def graph_md5(self) -> str:
        """md5 of the graph description nndct checks in test mode (``Graph.get_md5``).

        The description lists, per node in topological order (the return node last), its op type
        and the op types of its input and output nodes, dumped with ``json.dumps(indent=2)``.
        """
        entries = []
        for n in self.nodes:
            outs = [u.op for u in n.users] + ([RETURN] if n.is_output else [])
            entries.append({"op": n.op, "input_ops": [i.op for i in n.inputs], "output_ops": outs})
        entries.append({"op": RETURN, "input_ops": [n.op for n in self.outputs], "output_ops": []})
        text = json.dumps({"nodes": entries}, indent=2, separators=(",", ": "))
        return hashlib.md5(text.encode("utf-8")).hexdigest()


def _trace(make_root: Callable[[], nn.Module], model: nn.Module) -> Tuple[nn.Module, torch.fx.Graph]:
    # torch.fx.symbolic_trace without its GraphModule (built on first use, after the rewrites)
    try:
        return fx_trace(make_root)
    except QuantizationError:
        raise
    except Exception as e:  # fx raises many types (TraceError, TypeError, ...)
        raise QuantizationError(
            "the sim quantizer captures the model with torch.fx.symbolic_trace, which failed for "
            "%s: %s. Make forward() free of data-dependent Python control flow (the real "
            "quantizer's torch.jit.trace has the same requirement)." % (type(model).__name__, e))


def _concrete(work: nn.Module, examples: Tuple[torch.Tensor, ...], model: nn.Module) -> torch.fx.Graph:
    try:
        return concrete_trace(work, tuple(e.detach().cpu() for e in examples))
    except QuantizationError:
        raise
    except Exception as e:  # the model's own error on the example, or fx's
        raise QuantizationError("the sim quantizer traces through the torch.fx-wrapped functions of %s on the "
                                "example input (as torch.jit does), which failed: %s: %s"
                                % (type(model).__name__, type(e).__name__, e))


def _conv_op(m: nn.Module, strict: bool = True) -> str:
    if strict and m.padding_mode != "zeros":
        raise QuantizationError("conv with padding_mode=%r: the real quantizer's conv module pads with zeros "
                                "(it calls F.conv2d with the padding); use padding_mode='zeros' or an "
                                "explicit pad" % m.padding_mode)
    if isinstance(m, nn.Conv2d):
        cin = m.in_channels
        depthwise = m.groups != 1 and m.groups == cin and m.out_channels % cin == 0
        return DEPTHWISE_CONV2D if depthwise else CONV2D
    # nndct op_dispatcher: transposed conv is depthwise when weight (in, out/g) has out/g == 1
    # and groups == in_channels
    depthwise = m.weight.shape[1] == 1 and m.groups == m.weight.shape[0] and m.groups != 1
    return DEPTHWISE_CONVTRANSPOSE2D if depthwise else CONVTRANSPOSE2D


def _classify(root: nn.Module, node: torch.fx.Node, strict: bool = True) -> str:
    """The op type of one fx node (its call targets named in ``root``): a row of the op table, or ``aten::<name>`` (float operator).
    A float operator called in place (``nn.SiLU(inplace=True)``, ``F.silu(x, inplace=True)``) is
    ``aten::<name>_``: torch.jit traces ``aten::silu_`` and nndct keeps the kind, underscore and all,
    in the node's name (``aten_silu__2``) and the xmodel op's type.
    ``strict``: refuse what the simulation cannot run (a conv padding other than zeros)."""
    op = _classify_kind(root, node, strict)
    if op.startswith("aten::") and _in_place(root, node):
        op += "_"
    return op


def _in_place(root: nn.Module, node: torch.fx.Node) -> bool:
    """True when the call runs in place: a module with ``inplace=True`` or a function called with
    ``inplace=True`` (by keyword or by position)."""
    if node.op == "call_module":
        return getattr(root.get_submodule(node.target), "inplace", False) is True
    if node.op != "call_function":
        return False
    if "inplace" in node.kwargs:
        return node.kwargs["inplace"] is True
    try:
        params = list(inspect.signature(node.target).parameters)
    except (TypeError, ValueError):
        return False
    i = params.index("inplace") if "inplace" in params else len(node.args)
    return len(node.args) > i and node.args[i] is True


def _classify_kind(root: nn.Module, node: torch.fx.Node, strict: bool = True) -> str:
    if node.op == "call_module":
        m = root.get_submodule(node.target)
        if type(m) in (nn.Conv2d, nn.ConvTranspose2d):
            return _conv_op(m, strict)
        if type(m) is nn.Hardtanh and m.min_val == 0.0 and m.max_val == 6.0:
            return RELU6
        if type(m) in MODULE_OPS:
            return MODULE_OPS[type(m)]
        if isinstance(m, REMOVED_MODULES):
            return t.IDENTITY
        return "aten::%s" % type(m).__name__.lower()
    if node.op == "call_function":
        if node.target in FUNCTION_OPS:
            return FUNCTION_OPS[node.target]
        if node.target in REMOVED_FUNCTIONS:
            return t.IDENTITY
        return "aten::%s" % getattr(node.target, "__name__", "op").strip("_")
    if node.target in METHOD_OPS:  # call_method
        return METHOD_OPS[node.target]
    return "aten::%s" % str(node.target).strip("_")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _float_operand(fx_node: Optional[torch.fx.Node]) -> bool:
    """True when a Python float operand makes arithmetic on sizes a float (``(C // h) ** -0.5``):
    torch traces a float tensor there, which nndct quantizes like any other."""
    return fx_node is not None and any(isinstance(a, float) for a in fx_node.args)


def _getitem_kind(idx: Any) -> str:
    """``x[idx]`` as torch.jit traces it: an int selects (aten::select), a tensor gathers
    (aten::index), anything else slices (one nndct_strided_slice)."""
    if isinstance(idx, int):
        return t.SELECT
    if isinstance(idx, torch.fx.Node) or (isinstance(idx, tuple) and any(isinstance(i, torch.fx.Node) for i in idx)):
        return t.INDEX
    return STRIDED_SLICE


def _split_pieces(node: torch.fx.Node) -> Optional[int]:
    """Number of pieces of a chunk/split node (a split by size without the traced shape: as many
    as the pieces taken), or None when the node is no chunk/split."""
    if not ((node.op == "call_function" and node.target in SPLIT_FUNCTIONS)
            or (node.op == "call_method" and node.target in SPLIT_METHODS)):
        return None
    second = node.args[1] if len(node.args) > 1 else node.kwargs.get(
        "chunks", node.kwargs.get("split_size_or_sections", node.kwargs.get("split_size")))
    if isinstance(second, (list, tuple)):
        return len(second)
    if (node.target == "chunk" or node.target is torch.chunk) and isinstance(second, int):
        return second
    taken = [u.args[1] for u in node.users if u.op == "call_function" and u.target is operator.getitem
             and isinstance(u.args[1], int)]
    return 1 + max(taken) if taken else 1


class _ShapeRecorder(torch.fx.Interpreter):
    """Runs the graph once and records each node's output shape (a tuple for a tensor, None for
    anything else); failures name the node (``node_error``). A plain Interpreter, not torch's
    ``ShapeProp``: that one imports ``torch.fx.experimental.symbolic_shapes`` (sympy), about 0.4 s."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.shapes = {}  # type: Dict[torch.fx.Node, Any]

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            result = super().run_node(n)
        except Exception as e:  # any error of the model's own code, as torch 2's ShapeProp did
            raise node_error(n, e) from e
        self.shapes[n] = tuple(result.shape) if isinstance(result, torch.Tensor) else None
        return result


def node_error(fx_node: torch.fx.Node, e: Exception) -> QuantizationError:
    """A QuantizationError naming the model operation that raised ``e`` (a ``view`` of a
    non-contiguous tensor gets the fix: the float model fails there too)."""
    what = fx_node.target if isinstance(fx_node.target, str) else getattr(fx_node.target, "__name__", fx_node.target)
    msg = "node %r (%s %s) failed: %s" % (fx_node.name, fx_node.op, what, e)
    if "view size is not compatible" in str(e):
        msg += (". The float model fails here too (plain PyTorch refuses .view() on a non-contiguous "
                "tensor, e.g. after permute/transpose, and so does the real quantizer when it runs "
                "the float model): use .reshape(...) instead of .view(...) in the model's forward")
    return QuantizationError(msg)


class _ExampleRun:
    """The rewritten graph's GraphModule and its output shapes on the example, each made on
    first use: the GraphModule's code generation costs as much as a calibration batch of a small
    model, and the shapes one float forward; calibration needs neither, test mode both, and the
    capture the rank of a tensor whose torch.Size is sliced or used whole."""

    def __init__(self, root: nn.Module, fx_graph: torch.fx.Graph, example: Tuple[torch.Tensor, ...]) -> None:
        self.root = root
        self.fx_graph = fx_graph
        self._example = example
        self._gm = None  # type: Optional[torch.fx.GraphModule]
        self._shapes = None  # type: Optional[Dict[torch.fx.Node, Any]]

    @property
    def gm(self) -> torch.fx.GraphModule:
        if self._gm is None:
            # holds the modules the rewritten graph calls (not the folded BatchNorms), as symbolic_trace would
            self._gm = torch.fx.GraphModule(self.root, self.fx_graph, class_name=type(self.root).__name__)
        return self._gm

    @property
    def shapes(self) -> Dict[torch.fx.Node, Any]:
        if self._shapes is None:
            recorder = _ShapeRecorder(self.gm)
            with torch.no_grad():
                recorder.run(*self._example)
            self._shapes = {node: recorder.shapes.get(node) for node in self.fx_graph.nodes}
        return self._shapes

    def rank(self, fx_node: torch.fx.Node) -> int:
        """The rank of the tensor ``fx_node`` computes on the example.

        Raises:
            QuantizationError: ``fx_node`` computes no tensor (named)."""
        shape = self.shapes[fx_node]
        if shape is None:
            raise QuantizationError("node %r: its .shape/.size() is read, but it computes no tensor" % fx_node.name)
        return len(shape)


class _Builder:
    """Turns the rewritten fx graph into SimNodes (nndct's nodes, in nndct's order)."""

    def __init__(self, root: nn.Module, class_name: str, shapes: ShapeTuples, strict: bool = True,
                 param_names: Optional[Dict[str, Dict[str, str]]] = None) -> None:
        self.root = root
        self.param_names = param_names or {}  # module path -> nndct param names (inlined attention)
        self.strict = strict
        self.class_name = class_name
        self.shapes = shapes
        self.size_nodes = {}  # type: Dict[Tuple[torch.fx.Node, int], SimNode]
        self.by_fx = {}  # type: Dict[torch.fx.Node, SimNode]
        self.helper_src = {}  # type: Dict[torch.fx.Node, List[SimNode]]
        self.pieces = {}  # type: Dict[torch.fx.Node, int]
        self.consts = []  # type: List[SimNode]
        self.nodes = []  # type: List[SimNode]
        self.steps = []  # type: List[Tuple[torch.fx.Node, Optional[SimNode]]]
        self.called = {}  # type: Dict[str, int]
        self._state = None  # type: Optional[set]

    def resolve(self, fx_node: torch.fx.Node) -> List[SimNode]:
        if fx_node in self.by_fx:
            return [self.by_fx[fx_node]]
        return list(self.helper_src.get(fx_node, []))

    def resolve_all(self, fx_nodes) -> List[SimNode]:
        out = []  # type: List[SimNode]
        for n in fx_nodes:
            for s in self.resolve(n):
                if s not in out:
                    out.append(s)
        return out

    def helper(self, fx_node: torch.fx.Node, sources: List[SimNode]) -> None:
        self.helper_src[fx_node] = sources
        self.steps.append((fx_node, None))

    def add(self, fx_node: Optional[torch.fx.Node], op: str, inputs: List[SimNode]) -> SimNode:
        node = SimNode("", op, fx_node)
        node.inputs = inputs
        node.shape_value = op == SHAPE or (bool(inputs) and all(i.shape_value for i in inputs)
                                           and not _float_operand(fx_node)
                                           and not (fx_node is not None  # a tensor attribute (ViT's class token)
                                                    and any(a.op == "get_attr" for a in fx_node.all_input_nodes)))
        self.nodes.append(node)
        if fx_node is not None:
            self.by_fx[fx_node] = node
            self.steps.append((fx_node, node))
        return node

    def const(self, value: Any) -> SimNode:
        node = SimNode("", CONST, None)
        node.value = value
        node.shape_value = isinstance(value, int)
        self.consts.append(node)
        return node

    def visit(self, fx_node: torch.fx.Node) -> None:
        if fx_node.op == "placeholder":
            self.add(fx_node, INPUT, [])
        elif fx_node.op == "get_attr":
            self.helper(fx_node, [])
        elif fx_node in self.shapes.tuples:
            if is_access(fx_node):  # its nndct_shape nodes, made here in dimension order
                for d in self.shapes.read[fx_node]:
                    self.size_nodes[(fx_node, d)] = self.add(None, SHAPE, self.resolve(fx_node.args[0]))
            self.helper(fx_node, [self.size_nodes[e] for e in self.shapes.elements(fx_node) if e in self.size_nodes])
        elif fx_node in self.shapes.sizes:
            size = self.shapes.sizes[fx_node]
            self.helper(fx_node, [self.size_nodes[size]] if size in self.size_nodes else [])
        elif fx_node.op == "call_function" and fx_node.target is getattr:
            self.helper(fx_node, self.resolve(fx_node.args[0]))
        elif _split_pieces(fx_node) is not None:
            self.pieces[fx_node] = _split_pieces(fx_node)
            self.helper(fx_node, self.resolve(fx_node.args[0]))
        elif fx_node.op == "call_function" and fx_node.target is operator.getitem \
                and isinstance(fx_node.args[0], torch.fx.Node) and fx_node.args[0] in self.helper_src \
                and fx_node.args[0].op != "get_attr":
            self.getitem(fx_node)
        elif fx_node.op == "call_function" and fx_node.target is operator.setitem:
            # x[idx] = v: torch traces a slice of x and its in-place fill_ (copy_ for a tensor v)
            piece = self.add(None, STRIDED_SLICE, self.resolve(fx_node.args[0]))
            if _is_number(fx_node.args[2]):
                value = self.const(float(fx_node.args[2]))
                self.add(fx_node, t.FILL, [piece, value]).const_args = {2: value}
            else:
                self.add(fx_node, "aten::copy_", [piece] + self.resolve_all(fx_node.all_input_nodes[1:]))
        else:
            self.operator(fx_node)

    def getitem(self, fx_node: torch.fx.Node) -> None:
        base = fx_node.args[0]
        sources = self.helper_src[base]
        if base in self.pieces:
            inputs = list(sources)
            if fx_node.args[1] == self.pieces[base] - 1 and self.pieces[base] > 1:
                inputs.append(self.add(None, SHAPE, list(sources)))  # the end index of the last piece
            self.add(fx_node, STRIDED_SLICE, inputs)
        else:
            self.helper(fx_node, sources)

    def operator(self, fx_node: torch.fx.Node) -> None:
        op = _classify(self.root, fx_node, self.strict)
        if op == STRIDED_SLICE and isinstance(fx_node.args[0], torch.fx.Node) and fx_node.args[0] in self.by_fx \
                and self.by_fx[fx_node.args[0]].op not in t.OPS and isinstance(fx_node.args[1], int):
            op = t.TUPLE_INDEX  # an output of a float operator returning several (values, indices)
        elif op == STRIDED_SLICE and fx_node.target is operator.getitem:
            op = _getitem_kind(fx_node.args[1])
        if op in ARITHMETIC_TYPES:
            inputs, consts = [], {}  # type: List[SimNode], Dict[int, SimNode]
            for i, a in enumerate(fx_node.args):
                if _is_number(a):
                    consts[i] = self.const(a)
                    inputs.append(consts[i])
                elif isinstance(a, torch.fx.Node):
                    inputs.extend(s for s in self.resolve(a) if s not in inputs)
            kw = [v for v in fx_node.kwargs.values() if isinstance(v, torch.fx.Node)]
            inputs.extend(s for s in self.resolve_all(kw) if s not in inputs)
            if 0 in consts and op in (t.ADD, t.MULTIPLY, t.SUB) and len(inputs) == 2:
                # c + x, c * x, c - x: torch traces add(x, c), mul(x, c), rsub(x, c): the tensor first
                inputs = inputs[1:] + inputs[:1]
                op = t.RSUB if op == t.SUB else op
            node = self.add(fx_node, op, inputs)
            node.const_args = consts
        else:
            node = self.add(fx_node, op, self.resolve_all(fx_node.all_input_nodes))
        if op in t.NORM_TYPES:
            self.norm_params(fx_node, node)
        elif t.spec(op).quantizable and op not in PARAM_TYPES:
            state = self.state_names()
            node.free_params = ["%s::%s" % (self.class_name, a.target) for a in fx_node.all_input_nodes
                                if a.op == "get_attr" and a.target in state]
        if op in PARAM_TYPES:
            self.called[fx_node.target] = self.called.get(fx_node.target, 0) + 1
            if self.called[fx_node.target] > 1 and self.strict:
                raise QuantizationError("module %r is called more than once; the sim quantizer "
                                        "needs one module per conv/linear/batch-norm use" % fx_node.target)
            m = self.root.get_submodule(fx_node.target)
            names = self.param_names.get(fx_node.target, {"weights": "%s.weight" % fx_node.target,
                                                          "bias": "%s.bias" % fx_node.target})
            node.param_names["weights"] = "%s::%s" % (self.class_name, names["weights"])
            if m.bias is not None:
                node.param_names["bias"] = "%s::%s" % (self.class_name, names["bias"])



    def state_names(self) -> set:
        """The state-dict names of the working copy (parameters and persistent buffers): the tensors
        nndct's parser makes graph parameters."""
        if self._state is None:
            self._state = set(self.root.state_dict(keep_vars=True))
        return self._state

    def norm_params(self, fx_node: torch.fx.Node, node: SimNode) -> None:
        """A layer norm's weight and bias names: the module's, or the tensors ``F.layer_norm(x,
        shape, weight, bias, eps)`` is given, which must be the model's own (a get_attr)."""
        if fx_node.op == "call_module":
            m = self.root.get_submodule(fx_node.target)
            given = [(k, fx_node.target + "." + a if getattr(m, a, None) is not None else None)
                     for k, a in (("weights", "weight"), ("bias", "bias"))]
        else:
            given = []
            for k, index, a in (("weights", 2, "weight"), ("bias", 3, "bias")):
                arg = fx_node.args[index] if len(fx_node.args) > index else fx_node.kwargs.get(a)
                if arg is not None and not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
                    raise QuantizationError(
                        "node %r (layer_norm): its %s is computed in forward(); the real quantizer quantizes a "
                        "layer norm's weight and bias as parameters of the model: pass the module's own "
                        "parameter (nn.LayerNorm, or F.layer_norm(x, shape, self.weight, self.bias, eps))"
                        % (fx_node.name, a))
                given.append((k, None if arg is None else arg.target))
        for k, path in given:
            if path is not None:
                node.param_names[k] = "%s::%s" % (self.class_name, path)


def _nndct_const_order(consts: List[SimNode], nodes: List[SimNode]) -> List[SimNode]:
    """The consts in nndct's numbering order. nndct's parser finds the arithmetic nodes with a
    depth-first walk (pre-order, from the nodes without inputs, a node's users in graph order),
    collects them per jit kind (the kinds in the order the walk first meets them), and makes the
    number operand of each (the second jit input: ``x + c``, ``c + x``, ``x - c``, ``c - x``
    = ``rsub(x, c)``, ``x * c``, ``x / c``) a const node, in that order, ahead of every node
    (Vitis-AI ``pytorch_nndct/parse/trace_helper.py`` and ``opt_pass.py``,
    ``nndct_graph/graph_searcher.py``). Other consts (``//``, the value of ``x[idx] = v``, ...)
    are constant nodes of the traced graph already, ahead of the input in program order: the walk
    starts from them (their users first), and they follow the converted ones in program order."""
    def operand(n: SimNode) -> Optional[SimNode]:
        first = 0 if 0 in n.const_args and n.op in (t.ADD, t.MULTIPLY, t.RSUB) else 1
        return n.const_args.get(first) if n.op in t.CONST_OPERAND_TYPES else None

    converted = {id(c) for c in (operand(n) for n in nodes) if c is not None}
    others = [c for c in consts if id(c) not in converted]
    users = {id(n): [] for n in others + nodes}  # type: Dict[int, List[SimNode]]
    for n in nodes:
        for i in n.inputs:
            if id(i) in users and n not in users[id(i)]:
                users[id(i)].append(n)
    groups = {}  # type: Dict[str, List[SimNode]]
    seen = set()  # type: set
    for root in others + [n for n in nodes if all(i.op == CONST for i in n.inputs)]:
        stack = [root]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.op in t.CONST_OPERAND_TYPES:  # OptPass.transform_const_scalar_to_const_tensor's kinds
                groups.setdefault(node.op, []).append(node)
            stack.extend(reversed([u for u in users[id(node)] if id(u) not in seen]))
    ordered = [operand(n) for members in groups.values() for n in members]
    ordered = [c for c in ordered if c is not None]
    return ordered + [c for c in consts if c not in ordered]


def capture(model: nn.Module, example: Any, cfg: Optional[QuantConfig], rewrite: bool = True,
            traced: Any = None) -> SimGraph:
    """Copy (``work_copy``), rewrite and trace ``model``; name every node as nndct does.

    Args:
        model: the float model (any device; the copy is moved to the CPU and put in eval mode).
            Never modified.
        example: the example input: a float32 tensor of any rank, or a tuple/list of them (one
            per ``forward`` argument, in order); not modified.
        cfg: resolved quantization config (CLE and the convert_* switches decide module swaps);
            None with ``rewrite=False``.
        rewrite: False keeps the model as written (no module swaps, Dropout/Identity kept as
            ``identity`` nodes, BatchNorm unfolded): the view ``inspect`` reports on.
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
    if traced is not None and traced.graph is not None and (not rewrite or swaps_keep_graph(traced.module, cfg)):
        work = work_copy(traced.module)
        if rewrite:
            swap_modules(work, cfg)
        fx_graph = traced.graph_copy()
    else:
        def make_root() -> nn.Module:
            work = work_copy(model)
            if rewrite:
                swap_modules(work, cfg)
            return work
        work, fx_graph = _trace(make_root, model)
    placeholders = [n for n in fx_graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(examples):
        raise QuantizationError("input_args: forward() of %s takes %d inputs (%s), got %d example tensors; "
                                "pass one tensor per input, in order, as a tuple"
                                % (type(model).__name__, len(placeholders),
                                   ", ".join(str(p.target) for p in placeholders), len(examples)))
    if has_wrapped_calls(fx_graph):  # torch.fx.wrap-ped calls: traced through, as torch.jit does
        fx_graph = _concrete(work, examples, model)
    remove_traced_passthrough(work, fx_graph, examples)  # no jit op, no nndct node, rewrite or not
    functional_linear_to_module(work, fx_graph)
    remove_shape_checks(fx_graph)
    split_select_index(fx_graph)
    param_names = inline_attention(work, fx_graph)  # the ops nndct's trace records, rewrite or not
    if rewrite:
        remove_passthrough(work, fx_graph)
        fold_bn(work, fx_graph)
    fx_graph.lint()
    run = _ExampleRun(work, fx_graph, tuple(e.detach().cpu() for e in examples))
    builder = _Builder(work, type(model).__name__, ShapeTuples(fx_graph, run.rank), rewrite, param_names)
    outputs = []  # type: List[SimNode]
    for fx_node in fx_graph.nodes:
        if fx_node.op == "output":
            outputs = builder.resolve_all(fx_node.all_input_nodes)
        else:
            builder.visit(fx_node)
    nodes = _nndct_const_order(builder.consts, builder.nodes) + builder.nodes
    for index, node in enumerate(nodes):
        node.name = "%s_%d" % (node.op.replace("::", "_"), index)  # aten::mean -> aten_mean_22
        for i in node.inputs:
            i.users.append(node)
    for n in outputs:
        n.is_output = True
    for c in builder.consts:  # an int operand of tensor arithmetic (x + 3) is a float constant
        c.shape_value = isinstance(c.value, int) and all(u.shape_value for u in c.users)
    return SimGraph(builder.class_name, run, nodes, builder.steps, outputs)
