"""NCHW -> NHWC on the deploy graph, as the real quantizer's exporter does it.

Restates ``DevGraphOptimizer.layout_tranform`` (``nndct_shared/compile/deploy_optimizer.py``,
Vitis-AI 3.5; docs/xmodel.md#layout): the ops whose XIR form is NHWC ("implicit" ops: convs, pools,
resize, batch norm) get the orders ``[0, 2, 3, 1]`` (swim, NCHW -> NHWC) on their output and input;
the orders spread up through their producers and down through their consumers while those are
rank-preserving, not transposes, not float operators of their own type, and, for a reshape, do not
move data when permuted; where the spreading stops, a ``transpose`` node is inserted:
``<parent>_swim_transpose_<k>`` (to NHWC), ``<parent>_sink_transpose_<k>`` (back to NCHW), or
``<node>_neighbor_transpose_<k>`` where an op mixes transformed and untransformed inputs. Chains of
transposes are then merged, and identities dropped.
"""
from collections import OrderedDict, deque
from typing import Callable, Dict, List, Optional, Sequence, Set

import numpy as np

from .... import ops as t
from ....ops.xmodel_support import XmodelForm, rewrite_axis
from .devgraph import RETURN, Graph, Node
from .lower import XmodelUnsupported

PERMUTE = t.PERMUTE

# the ops whose XIR form is NHWC: the records' (``XmodelForm.nhwc``)
IMPLICIT_OPS = tuple(op for op, f in t.XMODEL.items() if isinstance(f, XmodelForm) and f.nhwc)
SOURCE_OPS = (t.INPUT, t.CONST) + t.QUANT_START_TYPES  # a QuantStub: its part's input (_find_swim_order)


def swim_order(ndim: int) -> tuple:
    """The permutation NCHW -> NHWC for a rank (``_find_swim_order``)."""
    return {2: (0, 1), 3: (0, 2, 1), 4: (0, 2, 3, 1), 5: (0, 3, 4, 2, 1)}[ndim]


def sink_order(ndim: int) -> tuple:
    """The permutation NHWC -> NCHW for a rank (``_find_sink_order``)."""
    return {2: (0, 1), 3: (0, 2, 1), 4: (0, 3, 1, 2), 5: (0, 4, 3, 1, 2)}[ndim]


def is_custom(node: Node) -> bool:
    """A float operator nndct has no op type for (``aten::<name>``, a ``CustomOp``)."""
    return node.type.startswith("aten::")


def _dim_transparent(node: Node) -> bool:
    a, b = node.in_tensors[0].ndim, node.out.ndim
    return bool(a) and bool(b) and a == b


def _special_layout(node: Node) -> bool:
    return bool(node.out.ndim) and node.out.ndim >= 3


def _keeps_memory(node: Node, order: Sequence[int]) -> bool:
    """For a reshape: reshaping then permuting equals permuting then reshaping (nndct tests it on
    random data; distinct values decide it exactly)."""
    if node.type != t.RESHAPE:
        return True
    n = int(np.prod(node.in_tensors[0].shape))
    data = np.arange(n).reshape(node.in_tensors[0].shape)
    a = data.reshape(node.out.shape).transpose(order).flatten()
    b = data.transpose(order).reshape(node.out.shape).flatten()
    return bool(np.array_equal(a, b))


def _passes_layout(node: Node, order: Sequence[int]) -> bool:
    return (_dim_transparent(node) and node.type != PERMUTE and not is_custom(node)
            and _keeps_memory(node, order))


# the attribute rewrites of the ops that carry an axis, a shape or a slice (``attr_transform.py``): the
# records' (``XmodelForm.layout_rewrite``)
SPECIAL_ATTRS = {op: f.layout_rewrite for op, f in t.XMODEL.items()
                 if isinstance(f, XmodelForm) and f.layout_rewrite is not None}
# a shape read (never in the deploy graph: lower.py folds shape arithmetic) takes the axis order too
SPECIAL_ATTRS[t.SHAPE] = rewrite_axis  # type: Dict[str, Callable[[Node, Sequence[int]], None]]


def _permute(graph: Graph, name: str, order: Sequence[int], parent: Node, child: Node) -> Node:
    """A transpose ``name`` of ``order`` on the edge parent -> child.

    Raises:
        XmodelUnsupported: ``child`` reads ``parent``'s output more than once (``z * z``,
            ``torch.cat([z, z])``); see :func:`_refuse_double_read`."""
    reads = sum(1 for o in parent.out_tensors for u in o.uses if u.user is child)
    if reads > 1:
        raise _refuse_double_read(parent, child, reads)
    node = Node(name, PERMUTE, {"order": list(order)})
    graph.insert_between(node, parent, child)
    return node


def _refuse_double_read(parent: Node, child: Node, reads: int) -> XmodelUnsupported:
    """The refusal of a transpose on an edge its child reads more than once. The real quantizer fails there
    too: ``layout_tranform`` (``nndct_shared/compile/deploy_optimizer.py``) lists the edge once per read and
    inserts a transpose for each; ``insert_node_between_nodes`` (``nndct_graph/base_graph.py``) rewires
    every read of the child at the first (``Node.replace_input_at`` moves all its uses), so the second finds
    no read left and ``replace_input_at(None, ...)`` raises a bare TypeError: no xmodel is written."""
    return XmodelUnsupported(
        "xmodel: node %s (%s) reads the output of %s %d times, where the NCHW -> NHWC layout pass puts a "
        "transpose (a permute before it, or layouts that differ): not supported by the real quantizer "
        "either (its layout pass, DevGraphOptimizer.layout_tranform, inserts one transpose per read and "
        "fails with a TypeError at the second). Instead apply the op before the permute back: "
        "(t * t).permute(0, 3, 1, 2) rather than z * z with z = t.permute(0, 3, 1, 2)."
        % (child.name, child.type, parent.name, reads))


def _adopt(node: Node, order: tuple) -> None:
    """``node`` takes ``order`` on its input and output; an op with an axis attribute rewrites it."""
    node.transpose_in_order = order
    node.transpose_out_order = order
    if node.type in SPECIAL_ATTRS:
        SPECIAL_ATTRS[node.type](node, order)


def _insert_transposes(graph: Graph, between: Dict[tuple, list], kind: str) -> List[Node]:
    """A transpose ``<parent>_<kind>_transpose_<k>`` on each edge (parent, child) of ``between``,
    numbered in order over all of them."""
    inserted = []  # type: List[Node]
    for order, pairs in between.items():
        for pn, cn in pairs:
            name = "%s_%s_transpose_%d" % (pn.name, kind, len(inserted))
            inserted.append(_permute(graph, name, order, pn, cn))
    return inserted


def layout_transform(graph: Graph) -> None:
    """Assign NHWC orders and insert/merge transposes, in place (``layout_tranform``)."""
    inserted = []  # type: List[Node]
    implicit = [n for n in graph.nodes if n.type in IMPLICIT_OPS]
    swim = OrderedDict()  # type: Dict[tuple, List[Node]]
    sink = OrderedDict()  # type: Dict[tuple, List[Node]]
    swim_in = {}  # type: Dict[str, tuple]
    for node in implicit:
        swim.setdefault(swim_order(node.out.ndim), []).append(node)
        swim_in[node.name] = swim_order(node.in_tensors[0].ndim)
        sink.setdefault(sink_order(node.out.ndim), []).append(node)

    # upwards: producers take the NHWC order while they can
    between = OrderedDict()  # type: Dict[tuple, list]
    visited = set()  # type: Set[Node]
    for order, nodes in swim.items():
        for start in nodes:
            queue = deque([start])
            visited.add(start)
            start.transpose_out_order = order
            start.transpose_in_order = swim_in[start.name]
            while queue:
                node = queue.popleft()
                for pn in graph.parents(node):
                    if pn in visited:
                        continue
                    if not _special_layout(pn) or pn.type in IMPLICIT_OPS:
                        continue
                    if pn.type in SOURCE_OPS or _passes_layout(pn, node.transpose_in_order):
                        _adopt(pn, node.transpose_in_order)
                        queue.append(pn)
                        visited.add(pn)
                    else:
                        between.setdefault(order, []).append((pn, node))
    inserted += _insert_transposes(graph, between, "swim")

    # downwards: consumers of NHWC nodes follow while they can
    for node in graph.nodes:
        if node.transpose_out_order:
            group = sink.setdefault(sink_order(len(node.transpose_out_order)), [])
            if node not in group:
                group.append(node)
    between = OrderedDict()
    visited = set()
    for order, nodes in sink.items():
        for start in nodes:
            if start in visited:
                continue
            queue = deque([start])
            visited.add(start)
            while queue:
                node = queue.popleft()
                for cn in graph.children(node):
                    if cn in visited:
                        continue
                    if cn.type in IMPLICIT_OPS or cn.type == RETURN:
                        continue
                    if cn.type == t.SHAPE:
                        visited.add(cn)
                        if node.transpose_out_order:
                            SPECIAL_ATTRS[cn.type](cn, node.transpose_out_order)
                            continue
                    elif cn.transpose_out_order:
                        queue.append(cn)
                        visited.add(cn)
                    elif _passes_layout(cn, node.transpose_out_order):
                        _adopt(cn, node.transpose_out_order)
                        queue.append(cn)
                        visited.add(cn)
                    else:
                        between.setdefault(order, []).append((node, cn))
    inserted += _insert_transposes(graph, between, "sink")

    # ops fed by both layouts: their untransformed inputs get a transpose
    neighbors = OrderedDict()  # type: Dict[Node, tuple]
    for node in graph.nodes:
        if len(node.in_nodes) <= 1 or not node.out_nodes:
            continue
        orders = [pn.transpose_out_order for pn in graph.parents(node)]
        if all(o is None for o in orders) or all(o is not None for o in orders):
            continue
        neighbors[node] = [o for o in orders if o is not None][0]
    for node, order in neighbors.items():
        index = 0
        for pn in graph.parents(node):
            if (pn.transpose_out_order is None and pn.out.ndim and node.out.ndim
                    and pn.out.ndim == node.out.ndim):
                inserted.append(_permute(graph, "%s_neighbor_transpose_%d" % (node.name, index), order, pn, node))
                index += 1
    _merge_transposes(graph, inserted)


def _merge_transposes(graph: Graph, inserted: List[Node]) -> None:
    """Fold chains of transposes into one, drop identities, share equal siblings (the end of
    ``layout_tranform``: ``merge_father_and_child_iteration`` and ``merge_brothers``)."""
    to_remove = list(inserted)
    reserved = []  # type: List[Node]

    def merge_group(group: List[Node]) -> None:
        order = []  # type: List[int]
        keep = None  # type: Optional[Node]
        for trans in group:
            prev = keep
            if trans not in to_remove:
                keep = trans
            if prev is not None and keep is not prev and prev not in to_remove:
                to_remove.append(prev)
            if not order:
                order = list(trans.attrs["order"])
            else:
                step = trans.attrs["order"]
                order = [order[step[i]] for i in range(len(order))]
        if keep is None:
            keep = group[-1]
        keep.attrs["order"] = order
        reserved.append(keep)
        group.clear()

    group = []  # type: List[Node]
    visited = set()  # type: Set[Node]
    for source in [n for n in graph.nodes if not n.in_tensors]:
        stack = [source]
        while stack:
            node = stack.pop()
            visited.add(node)
            if node.type == PERMUTE:
                children = graph.children(node)
                if node.out_nodes and all(c.type == PERMUTE for c in children):
                    group.append(node)
                    if len(node.out_nodes) > 1:
                        merge_group(group)
                else:
                    group.append(node)
                    merge_group(group)
            stack.extend(reversed([c for c in graph.children(node) if c not in visited]))

    to_remove = [n for n in to_remove if n not in reserved]
    for node in reserved:
        if list(node.attrs["order"]) == list(range(len(node.attrs["order"]))):
            to_remove.append(node)
    for node in to_remove:
        graph.remove_node(node)
    _merge_brothers(graph, reserved, to_remove)


def _merge_brothers(graph: Graph, reserved: List[Node], removed: List[Node]) -> None:
    doomed = []  # type: List[Node]
    for node in graph.nodes:
        children = graph.children(node)
        if len(node.out_nodes) > 1 and all(c.type == PERMUTE for c in children):
            orders = [c.attrs["order"] for c in children]
            if any(o != orders[0] for o in orders):
                continue
            keep = None
            for c in children:
                if c not in removed:
                    keep = c
            if keep is None:
                keep = children[0]
            for c in children:
                if c is not keep and c in reserved:
                    doomed.append(c)
                    c.out.replace_uses_with(keep.out)
    for node in doomed:
        node.destroy()
