"""nndct's removal of a ``view`` that keeps its input's shape, with the sizes only it read.

The real quantizer's parser (``pytorch_nndct/parse/trace_helper.py``, pass ``OptPass.remove_reduantant_view``
in ``parse/opt_pass.py``) drops every ``aten::view`` whose output shape on the example equals its input's:
its users read the view's input instead, and each node that made one of the view's other inputs (a
traced size, ``aten::size``) and has no other user goes with it. ``F.local_response_norm`` ends with
``div.view(sizes)`` on a tensor of that shape already: nndct has no reshape there, and no
``nndct_shape`` for the size only that view read. Only ``view``: ``reshape``, ``flatten`` and
``view_as`` are other aten ops and stay.
"""
import operator
from typing import Dict, List, Set, Tuple

import torch
import torch.fx
from torch import nn

from .rewrites import ran_on_example


def _is_view(node: torch.fx.Node) -> bool:
    return (node.op == "call_method" and node.target == "view") or \
        (node.op == "call_function" and node.target is torch.Tensor.view)


def _size_read(node: torch.fx.Node) -> bool:
    # what made a traced size: x.size(), x.size(i), x.shape, and an item of them
    if node.op == "call_method":
        return node.target in ("size", "dim")
    return node.op == "call_function" and node.target in (getattr, operator.getitem)


class _SameShape(torch.fx.Interpreter):
    """Runs the graph once; records the views whose result has the shape of their input."""

    def __init__(self, root: nn.Module, graph: torch.fx.Graph, views: Set[torch.fx.Node]) -> None:
        # a GraphModule of a copy (torch 1.13's Interpreter takes no graph; the capture's graph stays unowned)
        copy, env = torch.fx.Graph(), {}  # type: torch.fx.Graph, Dict[torch.fx.Node, torch.fx.Node]
        copy.output(copy.graph_copy(graph, env))
        super().__init__(torch.fx.GraphModule(root, copy))
        self.original = {v: k for k, v in env.items()}
        views = set(env[v] for v in views)
        self.views = views
        self.same = []  # type: List[torch.fx.Node]

    def run_node(self, n: torch.fx.Node):
        result = super().run_node(n)
        if n in self.views:
            source = self.env.get(n.args[0]) if isinstance(n.args[0], torch.fx.Node) else None
            if isinstance(source, torch.Tensor) and isinstance(result, torch.Tensor) and \
                    tuple(source.shape) == tuple(result.shape):
                self.same.append(self.original[n])
        return result


def remove_redundant_views(root: nn.Module, graph: torch.fx.Graph, examples: Tuple[torch.Tensor, ...]) -> None:
    """Remove each ``view`` whose output shape on ``examples`` is its input's (module docstring), and the
    size reads (``x.size()``, ``x.shape``, an item of them) that only it used. Runs the graph on a copy
    of the examples only when a ``view`` is in it; a failing run removes nothing (capture's own run
    reports it)."""
    views = set(n for n in graph.nodes if _is_view(n))
    if not views:
        return
    finder = _SameShape(root, graph, views)
    if not ran_on_example(finder, examples):
        return
    for node in finder.same:
        inputs = [a for a in node.all_input_nodes if a is not node.args[0]]
        node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
        erased = set()  # type: Set[torch.fx.Node]
        while inputs:  # a size only the view read, then what only that size read
            a = inputs.pop()
            if a not in erased and not a.users and _size_read(a):
                inputs.extend(a.all_input_nodes)
                graph.erase_node(a)
                erased.add(a)
