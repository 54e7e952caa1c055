"""The deploy-graph rewrites the real quantizer runs before it writes an xmodel, in its order.

Restates ``_deploy_optimize`` (``pytorch_nndct/qproc/utils.py``) and the ``DevGraphOptimizer``
passes it calls (``nndct_shared/compile/deploy_optimizer.py``, Vitis-AI 3.5; docs/xmodel.md#deploy-graph),
for the op types the simulation captures:

1. drop ``contiguous``;
2. normalise attributes: full-rank ``begin``/``end``/``strides`` and masks for slices, a
   transpose becomes a permute with its full order, negative axes made positive; a permute that only
   swaps the last two dims and feeds only the second operand of a matmul of two tensors is folded into
   its ``transpose_b`` (``fuse_transpose_matmul``);
3. NCHW -> NHWC (``layout.layout_transform``; a matmul of two tensors it makes channels-last is refused), then every recorded tensor permuted to its node's
   new layout (``update_node_data``);
4. pads: ``F.pad`` widths in XIR's per-dimension order, then folded into the conv/pool they feed
   when symmetric, zero-valued and constant (``fuse_pad``);
5. flatten, squeeze/unsqueeze and data-preserving permutes become reshapes to their output shape;
   a ``[0, 3, 1, 2]`` permute feeding a reshape feeding a linear layer is folded into the linear
   layer's weights; consecutive reshapes merge;
6. a constant or parameter second operand of add/sub/mul/div is broadcast to the first operand's shape (a
   parameter that cannot be is refused: the real quantizer fails there);
7. an adaptive average pool whose input divides by its output becomes an average pool.
"""
from collections import deque
from typing import List

import numpy as np

from .... import ops as t
from ....ops.xmodel_support import INT_MAX
from .devgraph import Graph, Node, Tensor
from .layout import PERMUTE, layout_transform
from .lower import XmodelUnsupported

POOL_OR_CONV = t.with_role("pad_fusion")  # the ops a zero pad folds into
RESHAPE_LIKE = t.with_role("reshape_like")  # the ops that become a reshape to their output shape


def optimize(graph: Graph) -> None:
    """Run the passes above on ``graph``, in place."""
    for node in [n for n in graph.nodes if n.type == t.CONTIGUOUS]:
        graph.remove_node(node)
    _update_attrs(graph)
    _fuse_transpose_matmul(graph)
    layout_transform(graph)
    _refuse_channels_last_matmul(graph)
    _update_data(graph)
    _normalize_pads(graph)
    _fuse_pads(graph)
    _reshape_like_to_reshape(graph)
    _merge_permute_into_linear(graph)
    _merge_reshapes(graph)
    _broadcast_consts(graph)
    _adaptive_to_avgpool(graph)


def _update_attrs(graph: Graph) -> None:
    for node in graph.nodes:
        if node.type == t.STRIDED_SLICE:
            rank = node.in_tensors[0].ndim
            begin, last, strides = [0] * rank, [INT_MAX] * rank, [1] * rank
            end = node.attrs["end"]
            for i, pos in enumerate(node.attrs["dims"]):
                begin[pos] = node.attrs["begin"][i]
                if end[i] < last[pos]:
                    last[pos] = end[i]
                strides[pos] = node.attrs["strides"][i]
            node.attrs["begin_mask"] = sum(1 << d for d, v in enumerate(begin) if v == 0)
            # nndct numbers this mask by the slice's own dims list, not by tensor dimension
            node.attrs["end_mask"] = sum(1 << d for d, v in enumerate(end) if v >= INT_MAX)
            node.attrs.update(begin=begin, end=last, strides=strides)
        elif node.type == t.TRANSPOSE:
            order = list(range(node.in_tensors[0].ndim))
            a, b = node.attrs["dims"]
            order[a], order[b] = order[b], order[a]
            node.attrs = {"order": order}
            node.type = PERMUTE
        elif node.type in (t.CONCAT, t.SOFTMAX) and node.attrs["axis"] < 0:
            node.attrs["axis"] += node.in_tensors[0].ndim


def _swaps_last_two(order: List[int]) -> bool:
    """``is_node_just_exchange_last_two_dim`` (``fuse_trans_matmul.py``)."""
    n = len(order)
    return n >= 2 and list(order) == list(range(n - 2)) + [n - 1, n - 2]


def _fuse_transpose_matmul(graph: Graph) -> None:
    """``fuse_transpose_matmul`` (``TransMatmulActvHandler``): a permute swapping the last two dims whose
    only child is a matmul of two tensors goes, the matmul's ``transpose_b`` set. nndct does not look at
    which operand the permute feeds and sets ``transpose_b`` for the first too, a graph that computes
    something else: refused here."""
    for permute, matmul in _chains(graph, [PERMUTE, t.MATMUL]):
        if permute.merged or len(permute.out_nodes) != 1 or not _swaps_last_two(permute.attrs["order"]):
            continue
        if matmul.in_tensors[0] is permute.out:
            raise XmodelUnsupported(
                "xmodel: node %s (%s) cannot be written: its first operand is a transpose of the last two dims, which "
                "the real quantizer folds into transpose_b (fuse_transpose_matmul), a file that would not compute "
                "the model" % (matmul.name, matmul.type))
        matmul.attrs["transpose_b"] = True
        permute.merged = True
        graph.remove_node(permute)


def _refuse_channels_last_matmul(graph: Graph) -> None:
    """nndct's ``layout_tranform`` carries channels-last through a matmul of two tensors as through any
    rank-keeping op (a conv's output fed to it without a reshape): the file would multiply other dims than
    torch does, so it is refused."""
    for node in graph.nodes:
        order = node.transpose_in_order
        if node.type == t.MATMUL and order and list(order) != sorted(order):
            raise XmodelUnsupported(
                "xmodel: node %s (%s) cannot be written: the real quantizer's layout pass (layout_tranform) carries "
                "channels-last %s through it, and the file would multiply other dims than torch does; flatten or "
                "permute its operands out of the conv layout first (x.flatten(2), as attention does)"
                % (node.name, node.type, tuple(order)))


def _update_data(graph: Graph) -> None:
    for node in graph.nodes:
        for tensor in node.out_tensors:
            if tensor.data is not None and node.transpose_out_order:
                tensor.from_ndarray(np.transpose(tensor.data, node.transpose_out_order))
    for node in graph.nodes:
        if node.type == PERMUTE and node.in_tensors[0].data is not None:
            node.out.from_ndarray(np.transpose(node.in_tensors[0].data, node.attrs["order"]))


def _normalize_pads(graph: Graph) -> None:
    for node in graph.nodes:
        if node.type != t.PAD:
            continue
        rank = node.in_tensors[0].ndim
        pads = list(node.attrs["pad_with"]) + [0] * (2 * rank - len(node.attrs["pad_with"]))
        pads = pads[::-1]
        for i in range(rank):
            pads[2 * i], pads[2 * i + 1] = pads[2 * i + 1], pads[2 * i]
        if node.transpose_out_order:
            order = node.transpose_out_order
            pads = [p for axis in order for p in (pads[2 * axis], pads[2 * axis + 1])]
        node.attrs["pad_with"] = pads
        node.attrs["constant_values"] = [float(node.attrs["constant_values"])] * len(pads)


def _fuse_pads(graph: Graph) -> None:
    for node in [n for n in graph.nodes if n.type == t.PAD]:
        pads = node.attrs["pad_with"]
        children = graph.children(node)
        if (node.attrs["mode"] != "CONSTANT" or len(pads) != 8 or node.attrs["constant_values"][0] != 0
                or any(pads[2 * i] != pads[2 * i + 1] for i in range(4))
                or any(c.type not in POOL_OR_CONV for c in children)):
            continue
        for child in children:
            pad = child.attrs["pad"]
            child.attrs["pad"] = [pad[0] + pads[4], pad[1] + pads[5], pad[2] + pads[2], pad[3] + pads[3]]
        graph.remove_node(node)


def _moves_memory(node: Node) -> bool:
    """A permute that changes the order of the non-unit dimensions (``_mem_layout_changed``)."""
    queue = deque(i for i, d in enumerate(node.in_tensors[0].shape) if d > 1)
    for dim_size, dim in zip(node.out.shape, node.attrs["order"]):
        if dim_size > 1 and dim != queue.popleft():
            return True
    return False


def _reshape_like_to_reshape(graph: Graph) -> None:
    for node in graph.nodes:
        if node.type in RESHAPE_LIKE or (node.type == PERMUTE and not _moves_memory(node)):
            node.type = t.RESHAPE
            node.attrs = {"shape": list(node.out.shape)}


def _chains(graph: Graph, types: List[str]) -> List[List[Node]]:
    """Paths parent -> child whose node types are ``types``, in node order (the cases of nndct's
    pattern search that these passes meet)."""
    found = [[n] for n in graph.nodes if n.type == types[0]]
    for wanted in types[1:]:
        found = [path + [c] for path in found for c in graph.children(path[-1]) if c.type == wanted]
    return found


def _merge_permute_into_linear(graph: Graph) -> None:
    for permute, reshape, dense in _chains(graph, [PERMUTE, t.RESHAPE, t.DENSE]):
        if permute.merged or len(permute.out_nodes) > 1 or len(reshape.out_nodes) > 1:
            continue
        if list(permute.attrs["order"]) != [0, 3, 1, 2]:
            continue
        shape = reshape.out.shape
        if shape[-2] != permute.out.shape[0] or any(d > 1 for d in shape[:-2]):
            continue
        weights = dense.params["weights"]
        n, c, h, w = permute.out.shape
        # the linear layer's input order becomes (h, w, c) instead of (c, h, w)
        weights.data = np.ascontiguousarray(
            weights.data.reshape(weights.data.shape[0], c, h, w).transpose(0, 2, 3, 1)).reshape(weights.shape)
        permute.merged = True
        graph.remove_node(permute)


def _merge_reshapes(graph: Graph) -> None:
    while True:
        chains = _chains(graph, [t.RESHAPE, t.RESHAPE])
        if not chains:
            return
        seen = set()  # type: set
        for first, second in chains:
            if first.name in seen or second.name in seen:
                continue
            seen.update((first.name, second.name))
            for use in list(first.out.uses):
                if use.user.type == t.RESHAPE:
                    use.user.replace_input_at(use.offset, first.in_tensors[0])
        dead = [n for n in graph.nodes if n.type == t.RESHAPE and not n.out.uses]
        if not dead:
            return
        for node in dead:
            node.destroy()


def _broadcast_consts(graph: Graph) -> None:
    """``broadcast_const_for_binary_op``: the second operand of add/sub/rsub/mul/div, a constant or a parameter
    of another shape than the first, becomes ``ones(first.shape) * other`` (the first's shape after the layout
    pass: NHWC where it took it). A parameter that does not broadcast to it (a ``(C, 1, 1)`` one against an
    NHWC ``(N, H, W, C)`` tensor) is where the real quantizer fails: refused, naming that; one that broadcasts
    there along other dimensions than torch broadcast it (a ``(1, C, 1, 1)`` one against NHWC) is refused too:
    the real quantizer would write a constant its file does not compute the model with."""
    for node in graph.nodes:
        if node.type not in t.BINARY_TYPES:
            continue
        first, other = node.in_tensors
        if other.node is None and np.shape(other.data) != np.shape(first.data):  # a parameter operand
            other.from_ndarray(_broadcast_param(node, first, other))
        elif other.node is not None and other.node.type == t.CONST and np.shape(other.data) != np.shape(first.data):
            data = np.ones(first.shape, dtype=first.data.dtype) * other.data
            other.from_ndarray(np.asarray(data))
            other.node.transpose_out_order = None
            other.node.attrs["data"] = other.data


def _broadcast_param(node: Node, first: Tensor, other: Tensor) -> np.ndarray:
    """``ones(first.shape) * other`` for a parameter operand ``other`` (float32 ndarray, ``first``'s deploy
    shape), checked against torch's broadcast in ``first``'s torch layout (the node's ``transpose_in_order``
    undone).

    Raises:
        XmodelUnsupported: it does not broadcast (the real quantizer's ValueError), or it lands on other
            dimensions than in torch's layout.
    """
    why = ("a parameter or buffer of the model is an operand, %s of shape %s, which the real quantizer broadcasts "
           "to the other operand's shape in its deploy graph, %s (NHWC where the layout pass made it so), "
           % (other.name.split("::")[-1], tuple(other.shape), tuple(first.shape)))
    hint = "; a (C,) parameter broadcasts over channels-last tensors, or fold a per-channel scale or shift into " \
           "the conv before it"
    try:
        data = np.ones(first.shape, dtype=first.data.dtype) * other.data
    except ValueError as e:
        raise XmodelUnsupported("xmodel: node %s (%s) cannot be written: %sand cannot (broadcast_const_for_binary_op: "
                                "%s)%s" % (node.name, node.type, why, str(e).strip(), hint))
    order = node.transpose_in_order  # the layout the node reads its operands in (None: torch's)
    if order:
        torch_shape = [0] * len(order)
        for j, axis in enumerate(order):
            torch_shape[axis] = first.shape[j]
        if not np.array_equal(np.transpose(np.ones(torch_shape, first.data.dtype) * other.data, order), data):
            raise XmodelUnsupported("xmodel: node %s (%s) cannot be written: %salong other dimensions than torch "
                                    "broadcasts it in %s: the file would not compute the model%s"
                                    % (node.name, node.type, why, tuple(torch_shape), hint))
    return np.asarray(data)


def _adaptive_to_avgpool(graph: Graph) -> None:
    for node in graph.nodes:
        if node.type != t.ADAPTIVEAVGPOOL2D:
            continue
        size_in, size_out = node.in_tensors[0].shape[1:3], node.out.shape[1:3]
        if any(i % o for i, o in zip(size_in, size_out)):
            continue
        stride = [size_in[i] // size_out[i] for i in range(2)]
        kernel = [size_in[i] - (size_out[i] - 1) * stride[i] for i in range(2)]
        node.type = t.AVG_POOL
        node.attrs = {"kernel": [kernel[1], kernel[0]], "stride": [stride[1], stride[0]], "count_include_pad": True,
                      "pad_mode": 0, "pad": [0, 0, 0, 0], "global": list(size_out) == [1, 1]}
