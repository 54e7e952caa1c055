"""The deploy graph: the quantized model as the real quantizer's xmodel exporter sees it.

Before writing an xmodel, nndct clones its quantized graph into a "device graph" and rewrites it
(``nndct_shared/compile/deploy_optimizer.py``, ``DevGraphOptimizer``): NCHW to NHWC, transposes
where a layout cannot pass, pads folded into convs, reshape-like ops turned into reshapes. The order
of nodes and of each tensor's uses decides where transposes go, what they are called and in which
order the xmodel's ops are created, so this model keeps nndct's bookkeeping
(``nndct_shared/nndct_graph/base_node.py``, ``base_graph.py``):

- a node has input tensors in argument order and one output tensor; a tensor has the node that
  makes it and its uses ``(user, offset)`` in the order they were added;
- ``parents(node)`` are the producers of its inputs in input order (repeats kept), ``children(node)``
  the users of its output in use order, the graph's return node included;
- the graph's nodes form one list; a node inserted between two others goes right after the parent.

Shapes are those of the first batch-1 test forward, NCHW as torch has them until the layout pass
permutes them (``update_node_data``).
"""
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

RETURN = "nndct_return"


class Tensor:
    """A node's output (or a parameter): name, producer, shape, data and uses.

    Attributes:
        name: nndct tensor name (the producing node's name for an output; ``<Class>::<path>.weight``
            for a parameter).
        node: the producing Node; None for a parameter.
        shape: list of ints, or None where nndct has no shape yet (a transpose the layout pass adds).
        data: the values as an np.ndarray (float32) where known: parameters, constants, and every
            output once the batch-1 forward has been recorded.
        uses: ``Use`` entries in the order the users were connected.
    """

    def __init__(self, name: str, node: Optional["Node"] = None, shape: Optional[List[int]] = None,
                 data: Optional[np.ndarray] = None) -> None:
        self.name = name
        self.node = node
        self.shape = None if shape is None else [int(d) for d in shape]
        self.data = data
        self.dtype = "float32"  # nndct's tensor dtype; "bool" for a comparison's output (the data stays float32)
        self.uses = []  # type: List[Use]

    @property
    def ndim(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)

    def from_ndarray(self, data: np.ndarray) -> None:
        """Set data and shape from an array (nndct ``Tensor.from_ndarray``)."""
        self.data = data
        self.shape = [int(d) for d in data.shape]

    def replace_uses_with(self, other: "Tensor") -> None:
        """Every user of this tensor takes ``other`` instead (in use order)."""
        while self.uses:
            use = self.uses.pop(0)
            use.user.in_tensors[use.offset] = other
            other.uses.append(use)

    def __repr__(self) -> str:
        return "Tensor(%s %s)" % (self.name, self.shape)


class Use:
    """One input slot that reads a tensor: the user node and the input index."""

    def __init__(self, user: "Node", offset: int) -> None:
        self.user = user
        self.offset = offset


class Node:
    """One node of the deploy graph.

    Attributes:
        name: nndct node name (``<Class>::<scope>/<trace value>``), the source of the xmodel op names.
        type: nndct op type (``pipeline.ops``; ``nndct_permute`` for inserted transposes).
        attrs: nndct attributes by name (``kernel``, ``pad``, ``axis``, ``shape``, ``order``, ...),
            in nndct's own conventions (``kernel`` as [w, h], ``pad`` as [left, right, top, bottom]).
        params: parameter kind (``weights``, ``bias``) -> parameter Tensor, in nndct's order.
        in_tensors: input tensors in argument order (parameters not included).
        out_tensors: the output tensor (one; the return node has none).
        transpose_in_order, transpose_out_order: the NCHW -> NHWC permutations the layout pass
            assigns (None where the node keeps torch's layout).
        merged: set by the fusion passes (pad into conv, permute into a linear).
    """

    def __init__(self, name: str, type_: str, attrs: Optional[Dict[str, Any]] = None) -> None:
        self.name = name
        self.type = type_
        self.attrs = dict(attrs or {})
        self.params = OrderedDict()  # type: Dict[str, Tensor]
        self.in_tensors = []  # type: List[Tensor]
        self.out_tensors = []  # type: List[Tensor]
        self.transpose_in_order = None  # type: Optional[tuple]
        self.transpose_out_order = None  # type: Optional[tuple]
        self.merged = False
        self.graph = None  # type: Optional[Graph]

    @property
    def out(self) -> Tensor:
        return self.out_tensors[0]

    @property
    def in_nodes(self) -> List[str]:
        return [t.node.name for t in self.in_tensors if t.node is not None]

    @property
    def out_nodes(self) -> List[str]:
        return [u.user.name for t in self.out_tensors for u in t.uses]

    def add_in_tensor(self, tensor: Tensor) -> None:
        tensor.uses.append(Use(self, len(self.in_tensors)))
        self.in_tensors.append(tensor)

    def add_out_tensor(self, tensor: Tensor) -> None:
        tensor.node = self
        self.out_tensors.append(tensor)

    def replace_input_at(self, i: int, new: Tensor) -> None:
        """Input ``i`` reads ``new``: its use moves to the end of ``new``'s uses."""
        old = self.in_tensors[i]
        if old is new:
            return
        self.in_tensors[i] = new
        for use in [u for u in old.uses if u.user is self]:
            old.uses.remove(use)
            new.uses.append(use)

    def remove_input(self, i: int) -> None:
        """Drop input ``i``; later inputs move down one index."""
        self._drop_input(i)
        for j in range(i + 1, len(self.in_tensors)):
            self._use_for(j).offset -= 1
        self.in_tensors.pop(i)

    def _use_for(self, i: int) -> Use:
        return [u for u in self.in_tensors[i].uses if u.user is self and u.offset == i][0]

    def _drop_input(self, i: int) -> None:
        tensor = self.in_tensors[i]
        tensor.uses.remove(self._use_for(i))

    def destroy(self) -> None:
        """Remove the node: its output's remaining users lose nothing (callers rewire them first),
        its inputs forget this user, and it leaves the node list."""
        for i in range(len(self.in_tensors)):
            self._drop_input(i)
        self.in_tensors = []
        self.graph.forget(self)

    def __repr__(self) -> str:
        return "Node(%s: %s)" % (self.name, self.type)


class Graph:
    """The deploy graph: nodes in one ordered list plus a return node that reads the outputs.

    Attributes:
        name: the model's class name.
        nodes: the node list (nndct's top block).
        return_node: a node of type ``nndct_return`` whose inputs are the model's outputs.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes = []  # type: List[Node]
        self.return_node = Node("return_0", RETURN)
        self.return_node.graph = self
        self._by_name = {}  # type: Dict[str, Node]

    def append(self, node: Node) -> Node:
        node.graph = self
        self.nodes.append(node)
        self._by_name[node.name] = node
        return node

    def node(self, name: str) -> Node:
        return self.return_node if name == self.return_node.name else self._by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def forget(self, node: Node) -> None:
        self.nodes.remove(node)
        del self._by_name[node.name]

    def parents(self, node: Node) -> List[Node]:
        return [self.node(n) for n in node.in_nodes]

    def children(self, node: Node) -> List[Node]:
        return [self.node(n) for n in node.out_nodes]

    def op_types(self) -> set:
        return {n.type for n in self.nodes}

    def insert_between(self, new: Node, parent: Node, child: Node) -> None:
        """Put ``new`` on the edge parent -> child (nndct ``insert_node_between_nodes``): ``new``
        reads the parent's output, the child's first input from the parent reads ``new``'s, and
        ``new`` goes into the node list right after the parent."""
        new.graph = self
        new.add_out_tensor(Tensor(new.name))
        out, offset = None, None
        for t in parent.out_tensors:
            for use in t.uses:
                if use.user is child:
                    out, offset = t, use.offset
                    break
        child.replace_input_at(offset, new.out)
        new.add_in_tensor(out)
        self.nodes.insert(self.nodes.index(parent) + 1, new)
        self._by_name[new.name] = new

    def remove_node(self, node: Node) -> None:
        """Bypass and delete a one-input node (nndct ``Graph.remove_node``)."""
        node.out.replace_uses_with(node.in_tensors[0])
        node.destroy()


def quant_parts(graph: Graph, starts: Sequence[str]) -> List[Graph]:
    """The deploy graph's quantized parts, one graph each, as nndct's ``partition_by_quant_part``
    (``nndct_shared/compile/deploy_optimizer.py``) makes them; ``[graph]`` itself when no node is of a
    ``starts`` type (QuantStub: op role ``quant_start``).

    Every node of ``graph`` lies in a part (the writer leaves the others out). In node order, each QuantStub
    and each node without inputs starts a set: every node it reaches along its consumers, tagged with the
    first set that reaches it; a set joins the set of its smallest tag. A part is named ``<name>_<id>`` (its
    set's number) and holds its nodes in the graph's order; an input from outside is none of its inputs.
    """
    if not any(n.type in starts for n in graph.nodes):
        return [graph]
    tag = {}  # type: Dict[str, int]
    sets = []  # type: List[List[Node]]
    for node in graph.nodes:
        if node.type not in starts and node.in_tensors:
            continue
        members, stack, seen = [], [node], set()  # type: List[Node], List[Node], set
        while stack:
            n = stack.pop()
            if n.name in seen or n.type == RETURN:
                continue
            seen.add(n.name)
            tag.setdefault(n.name, len(sets))
            members.append(n)
            stack.extend(reversed(graph.children(n)))
        sets.append(members)
    merged = OrderedDict()  # type: Dict[int, set]
    for members in sets:
        merged.setdefault(min(tag[n.name] for n in members), set()).update(n.name for n in members)
    parts = []  # type: List[Graph]
    for number, names in merged.items():
        part = Graph("%s_%d" % (graph.name, number))
        for node in graph.nodes:
            if node.name in names:
                part.nodes.append(node)
                part._by_name[node.name] = node
        parts.append(part)
    return parts
