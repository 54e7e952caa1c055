"""nndct's node order and names for the built nodes (``capture``, step 4; golden_wide README,
"nndct node names"): the number operands of arithmetic first, in the order nndct's parser makes
them, then every other node in graph order, each named ``<type>_<index>``."""
from typing import Dict, List, Optional, Tuple

import torch.fx
from torch import nn

from .. import ops as t
from .builder import NodeBuilder
from .graph import SimNode
from ..ops import CONST
from .shape_tuples import ShapeTuples


def in_place_method(node: SimNode) -> bool:
    """The node is a call of an in-place tensor method (``x.add_(1)``): torch.jit traces ``aten::add_``, whose
    kind nndct's parser leaves out of ``OptPass.transform_const_scalar_to_const_tensor`` (it converts the number
    operands of ``add``, ``sub``, ``mul``, ``div``, ``rsub`` and ``remainder``; ``trace_helper.py``), so that its
    number operand stays the tensor constant torch.jit recorded (:func:`traced_constant`)."""
    fx_node = node.fx_node
    return fx_node is not None and fx_node.op == "call_method" and str(fx_node.target).endswith("_")


def traced_constant(node: SimNode) -> bool:
    """A number operand of in-place arithmetic only (:func:`in_place_method`): the tensor constant torch.jit
    recorded, which nndct's parser does not turn into a quantized const (measured: ``x.add_(1)``'s int64
    constant has no quant_info.json entry, and the real xmodel its float32 const without a fix op,
    tests/data/refused_real/inplace_input)."""
    return node.op == CONST and bool(node.users) and all(in_place_method(u) for u in node.users)


def nndct_const_order(consts: List[SimNode], nodes: List[SimNode]) -> List[SimNode]:
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
        if in_place_method(n):
            return None  # OptPass converts the operands of add, sub, ...: not add_'s, a traced constant already
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


def build_nodes(root: nn.Module, class_name: str, fx_graph: torch.fx.Graph, shapes: ShapeTuples, strict: bool,
                param_names: Optional[Dict[str, Dict[str, str]]]
                ) -> Tuple[List[SimNode], List[Tuple[torch.fx.Node, Optional[SimNode]]], List[SimNode],
                           Dict[torch.fx.Node, Tuple[SimNode, int]]]:
    """The nndct nodes of ``fx_graph`` (its call targets named in ``root``), ordered, named and linked.

    Args:
        root: the rewritten working copy the graph's nodes name. class_name: the model's class name.
        fx_graph: the rewritten graph. shapes: its torch.Size reads (``ShapeTuples``).
        strict: refuse what the simulation cannot run (False: the as-written view of inspect).
        param_names: module path -> nndct parameter names (inlined attention), or None.

    Returns:
        ``(nodes, steps, outputs, picks, returned)``: nodes in nndct's order with their names, inputs and
        users set; every fx node but the output with its SimNode (None for a helper step); the returned
        nodes, each once (``is_output`` set); the helper steps that take one output of a node with several
        (``SimGraph.picks``); the return's inputs as nndct's return node has them, a tensor returned twice
        twice (``SimGraph.returned``).

    Raises:
        QuantizationError: a conv/linear module called twice (strict), a conv padding other than
            zeros (strict), a layer norm whose weight or bias is computed in forward().
    """
    builder = NodeBuilder(root, class_name, shapes, strict, param_names)
    outputs, returned = [], []  # type: List[SimNode], List[SimNode]
    for fx_node in fx_graph.nodes:
        if fx_node.op == "output":
            outputs = builder.resolve_all(fx_node.all_input_nodes)
            returned = builder.operands(fx_node.args)  # lists and tuples flattened, repeats kept
            if set(map(id, returned)) != set(map(id, outputs)):  # a container it does not open (a dict)
                returned = list(outputs)
        else:
            builder.visit(fx_node)
    nodes = nndct_const_order(builder.consts, builder.nodes) + builder.nodes
    for index, node in enumerate(nodes):
        node.name = "%s_%d" % (node.op.replace("::", "_"), index)  # aten::mean -> aten_mean_22
        for i in node.inputs:
            i.users.append(node)
    for n in outputs:
        n.is_output = True
    for c in builder.consts:  # an int operand of tensor arithmetic (x + 3) is a float constant
        c.shape_value = isinstance(c.value, int) and all(u.shape_value for u in c.users)
    return nodes, builder.steps, outputs, builder.picks, returned
