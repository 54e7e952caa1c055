"""The captured graph (``capture``): ``SimNode``, one nndct node, and ``SimGraph``, the rewritten
float graph with its nndct view, the nodes the simulation, its test-mode model, inspect and the
exporters key on."""
import hashlib
import json
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
from torch import nn

from .. import ops as t
from .example_run import ExampleRun
from .in_place import written_inputs
from ..ops import CONST, INPUT, RETURN


class SimNode:
    """One nndct node of the captured graph.

    Attributes:
        name: nndct node name without the class prefix, e.g. ``"nndct_conv2d_1"``.
        op: nndct op type, e.g. ``"nndct_conv2d"`` (a type of ``pipeline.ops``; ``aten::<name>`` for a
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
        size_axis: for an ``nndct_shape`` node, the dimension of its input it reads (``x.shape[0]``,
            ``x.size(-1)``, negative from the end as the call gives it; nndct's ``axis``); None where it reads
            none or all (``x.size()``, ``x.numel()``).
        in_quant_part: False for a node outside every quantized part of a model that marks them with
            QuantStub/DeQuantStub (:func:`tag_quant_part`): it is never quantized and runs in float, as
            torch computes it; True otherwise (every node of a model without stubs).
        outputs: the tensors the node returns (nndct's ``out_tensors``): more than 1 for a call returning
            several (``x.max(dim)``: values and indices; ``topk``; an LSTM's output and states). torch.jit
            traces such a call as ONE node with several outputs, and indexing its result is no op of the
            trace: a consumer reads the output it takes (``SimGraph.picks``), no node stands between them.
            The first output carries the node's fix position (``first_output``).
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
        self.size_axis = None  # type: Optional[int]
        self.in_quant_part = True
        self.outputs = 1

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


def first_output(node: SimNode, value: Any) -> Any:
    """The tensor of ``value`` that carries ``node``'s fix position: the first of a node with several
    outputs (the values of ``x.max(dim)``; the indices are int64, which nndct registers and never
    quantizes), else ``value`` itself."""
    return value[0] if node.outputs > 1 and isinstance(value, tuple) else value


def with_first_output(node: SimNode, value: Any, first: Any) -> Any:
    """``value`` with its first output replaced by ``first`` (``first_output``), of the same tuple type
    (``torch.return_types.max`` keeps ``.values`` and ``.indices``); ``first`` for a node of one output."""
    if node.outputs > 1 and isinstance(value, tuple):
        return type(value)([first] + list(value[1:]))
    return first


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
            from it, a chunk's tuple, a ``get_attr``, one output of a node with several): it is run as
            the fx node says.
        picks: the helper steps that take one output of a node with several (``y[0]``, ``.values``):
            fx node -> ``(SimNode, index)``.
        outputs: the SimNodes whose values the model returns, in return order.
        returned: the return's inputs as nndct's return node has them (``in_nodes``): :attr:`outputs` but a
            node returned twice (``return y, y``) there twice (``capture`` sets it; :attr:`outputs` until then).
        folded_bn: conv module path -> the path of the BatchNorm2d capture folded into it (``rewrites.fold_bn``);
            empty without rewrites.
        quant_off: True under nndct's quantization-off flow (``--nndct_quant_off``; the session sets it):
            every node runs in float, nothing is quantized (:meth:`runs_float`).
        example_shapes: fx node -> output shape (tuple) seen on the example inputs, propagated on
            first use (test mode needs them; calibration does not; the capture does when a
            torch.Size is sliced or used whole).
    """

    def __init__(self, class_name: str, run: ExampleRun, nodes: List[SimNode],
                 steps: List[Tuple[torch.fx.Node, Optional[SimNode]]], outputs: List[SimNode],
                 picks: Optional[Dict[torch.fx.Node, Tuple[SimNode, int]]] = None) -> None:
        self.class_name = class_name
        self.picks = picks or {}
        self.folded_bn = {}  # type: Dict[str, str]
        self.root = run.root
        self.fx_graph = run.fx_graph
        self._run = run
        self.nodes = nodes
        self.inputs = [n for n in nodes if n.op == INPUT]
        self.steps = steps
        self.outputs = outputs
        self.returned = list(outputs)  # type: List[SimNode]
        self.by_name = {n.name: n for n in nodes}
        self.output_node = [n for n in self.fx_graph.nodes if n.op == "output"][0]
        self._modules = {}  # type: Dict[str, nn.Module]
        self.quant_off = False
        tag_quant_part(nodes)
        self._written = None  # type: Optional[Tuple[int, ...]]

    @property
    def written_inputs(self) -> Tuple[int, ...]:
        """The positions of the model inputs a call of the graph writes in place (``x.sub_(0.5)`` on the
        input, directly or through a view; ``in_place.written_inputs``), found once."""
        if self._written is None:
            self._written = written_inputs(self.gm, self.fx_graph)
        return self._written

    def own_inputs(self, xs: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """``xs`` (one value per model input) with a copy of each input the graph writes in place
        (:attr:`written_inputs`), so that running the graph never writes the caller's tensors; the others,
        and every input of a graph that writes none, are the same objects."""
        written = self.written_inputs
        if not written:
            return tuple(xs)
        return tuple(x.clone() if i in written and isinstance(x, torch.Tensor) else x for i, x in enumerate(xs))

    @property
    def gm(self) -> torch.fx.GraphModule:
        return self._run.gm

    @property
    def example_shapes(self) -> Dict[torch.fx.Node, Any]:
        return self._run.shapes

    def runs_float(self, node: SimNode) -> bool:
        """True when ``node`` runs in float as torch computes it, nothing of it quantized: outside the quantized
        parts (``SimNode.in_quant_part``), or everywhere under :attr:`quant_off` (nndct's modules then run
        their float forward: ``NndctOption.nndct_quant_off``)."""
        return self.quant_off or not node.in_quant_part

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
        and the op types of its input and output nodes, dumped with ``json.dumps(indent=2)``
        (``Graph.simple_description``). A node's output nodes are its output tensor's uses in the order they
        were made (``Node.out_nodes``), and nndct's parser converts the return node first
        (``TorchParser._convert_graph``: its inputs' tensors, and their first use, are made before any other
        node's), so the return comes first among a returned node's readers, once per time it is returned
        (:attr:`returned`; *measured*: tests/data/refused_real/ret_slice, ret_whole_first, ret_slice_of_relu,
        ret_slice_conv, ret_slice_read, ret_twice).
        """
        entries = []
        for n in self.nodes:
            outs = [RETURN] * sum(1 for r in self.returned if r is n) + [u.op for u in n.users]
            entries.append({"op": n.op, "input_ops": [i.op for i in n.inputs], "output_ops": outs})
        entries.append({"op": RETURN, "input_ops": [n.op for n in self.returned], "output_ops": []})
        text = json.dumps({"nodes": entries}, indent=2, separators=(",", ": "))
        return hashlib.md5(text.encode("utf-8")).hexdigest()


def tag_quant_part(nodes: List[SimNode]) -> None:
    """Set every node's ``in_quant_part`` as nndct tags its graph (``GraphOptimizer._tag_quant_nodes``,
    ``nndct_shared/optimization/optimizer.py``), on ``nodes`` in nndct's order.

    Without a QuantStub or DeQuantStub (op roles ``quant_start``, ``quant_end``) every node is in. With
    them: a node a QuantStub reaches along its consumers without passing a DeQuantStub is in, the
    DeQuantStub itself out; then a source node other than an input (a constant) is in when one of its
    consumers in the part is no QuantStub. Every other node is out.
    """
    starts, ends = set(t.QUANT_START_TYPES), set(t.QUANT_END_TYPES)
    if not any(n.op in starts or n.op in ends for n in nodes):
        return
    for n in nodes:
        n.in_quant_part = False
    visited = set()  # type: set
    for source in (n for n in nodes if n.op in starts):
        stack = [source]
        while stack:
            node = stack.pop()
            if node.op in ends:
                node.in_quant_part = False
                continue
            if id(node) in visited:
                continue
            visited.add(id(node))
            node.in_quant_part = True
            stack.extend(node.users)
    for n in nodes:
        if not n.inputs and n.op != INPUT and any(u.op not in starts and u.in_quant_part for u in n.users):
            n.in_quant_part = True
