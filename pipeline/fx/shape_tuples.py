"""Which sizes of which ``x.shape`` / ``x.size()`` the graph reads: nndct's ``nndct_shape`` nodes.

torch.jit.trace records a tensor's torch.Size as one ``aten::size(x, d)`` per dimension ``d``,
made where ``.shape``/``.size()`` is read and in dimension order; its dead-code pass drops the
sizes nothing reads. nndct's parser makes each remaining one an ``nndct_shape`` node with
``dim=d`` (``pytorch_nndct/parse/op_dispatcher.py``, ``size``) and lists tuples of them
(``prim::ListConstruct``) as no node of their own. So ``x.shape[-2:]`` is two nodes (dims 2 and
3 of a 4-d ``x``), ``B, C, H, W = x.shape`` one per name that is used, ``y.reshape(x.shape)``
one per dimension, and ``x.shape[:2] + x.shape[2:]`` one per dimension of each read (observed
with pytorch_nndct 3.5: the node names and the graph description of its ``quant_info.json``).

Here a torch.fx graph reads a torch.Size with one ``getattr(x, "shape")`` or ``x.size()`` node
(an *access*); indexing, slicing and concatenating (``+``) the tuple are further fx nodes.
``ShapeTuples`` follows them to the sizes read: an int index reads one size; any other use of a
(sliced, concatenated) tuple reads all of its sizes.
"""
import operator
from typing import Callable, Dict, List, Optional, Tuple

import torch.fx

from ..errors import QuantizationError

Size = Tuple[torch.fx.Node, int]  # (the access, the dimension): one aten::size of the trace


def is_access(node: torch.fx.Node) -> bool:
    """``x.shape`` or ``x.size()`` (no dimension): a whole torch.Size."""
    if node.op == "call_function" and node.target is getattr:
        return node.args[1] == "shape"
    return node.op == "call_method" and node.target == "size" and len(node.args) == 1 and not node.kwargs


def _getitem_on(node: torch.fx.Node, tuples: Dict[torch.fx.Node, List[Optional[Size]]]) -> bool:
    return node.op == "call_function" and node.target is operator.getitem and node.args[0] in tuples


def _literal_tuple(v) -> bool:
    return isinstance(v, (tuple, list)) and not any(isinstance(e, torch.fx.Node) for e in v)


class ShapeTuples:
    """The sizes an fx graph reads from its torch.Size values.

    Args:
        graph: the (rewritten) fx graph, topologically ordered.
        rank_of: fx node -> the rank of the tensor it computes; called only for an access whose
            tuple is read other than by non-negative int indices (a slice, a negative index, a
            whole use), as the dimensions are then relative to the rank.

    Attributes:
        tuples: fx node -> its elements, for each access and each slice / concatenation of
            accesses; an element is a ``Size`` or None (a Python int of a literal tuple).
        sizes: fx node -> the ``Size`` it reads, for each int index of such a tuple (None: an
            int of a literal tuple).
        read: access -> the dimensions the graph reads from it, ascending (the nndct_shape nodes
            it makes, in their order).
        rank_of: the ``rank_of`` given (the capture's preludes ask it too, ``record.Prelude``).
    """

    def __init__(self, graph: torch.fx.Graph, rank_of: Callable[[torch.fx.Node], int]) -> None:
        self.rank_of = rank_of
        self.tuples = {}  # type: Dict[torch.fx.Node, List[Optional[Size]]]
        self.sizes = {}  # type: Dict[torch.fx.Node, Optional[Size]]
        for node in graph.nodes:
            if is_access(node):
                self.tuples[node] = [(node, d) for d in range(self._rank(node, rank_of))]
            elif _getitem_on(node, self.tuples) and isinstance(node.args[1], int):
                elements = self.tuples[node.args[0]]
                if not -len(elements) <= node.args[1] < len(elements):
                    raise QuantizationError("node %r reads size %d of a torch.Size of %d" % (
                        node.name, node.args[1], len(elements)))
                self.sizes[node] = elements[node.args[1]]
            elif _getitem_on(node, self.tuples) and isinstance(node.args[1], slice):
                self.tuples[node] = self.tuples[node.args[0]][node.args[1]]
            elif self._concatenation(node):
                self.tuples[node] = [e for a in node.args
                                     for e in (self.tuples[a] if isinstance(a, torch.fx.Node) else [None] * len(a))]
        read = {}  # type: Dict[torch.fx.Node, set]
        for node, size in self.sizes.items():
            if size is not None and node.users:  # the trace's dead-code pass drops a size nothing reads
                read.setdefault(size[0], set()).add(size[1])
        for node, elements in self.tuples.items():
            if any(u not in self.tuples and u not in self.sizes for u in node.users):
                for e in elements:
                    if e is not None:
                        read.setdefault(e[0], set()).add(e[1])
        self.read = {a: sorted(read.get(a, ())) for a in self.tuples if is_access(a)}

    def _concatenation(self, node: torch.fx.Node) -> bool:
        """``a + b`` of torch.Size values (or of one and a literal tuple)."""
        if not (node.op == "call_function" and node.target is operator.add and len(node.args) == 2):
            return False
        tuples = [isinstance(a, torch.fx.Node) and a in self.tuples for a in node.args]
        return any(tuples) and all(t or _literal_tuple(a) for t, a in zip(tuples, node.args))

    @staticmethod
    def _rank(access: torch.fx.Node, rank_of: Callable[[torch.fx.Node], int]) -> int:
        if not access.users:
            return 0
        indices = [u.args[1] for u in access.users if u.op == "call_function" and u.target is operator.getitem]
        if len(indices) == len(access.users) and all(isinstance(i, int) and i >= 0 for i in indices):
            return 1 + max(indices)  # enough for these indices; the rank itself is not needed
        return rank_of(access.args[0])

    def elements(self, node: torch.fx.Node) -> List[Size]:
        """The sizes a tuple node (an access, a slice or a concatenation) reads, in order."""
        return [e for e in self.tuples[node] if e is not None]
