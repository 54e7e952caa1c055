"""Calls that write their input in place, as torch.jit's trace sees them.

``nn.ReLU(inplace=True)(y)``, ``F.relu_(y)``, ``y.neg_()`` change ``y`` itself: a later reader of ``y``
reads the changed values, whether or not the call's result was assigned (``self.relu(y); return
self.c2(y)``). torch.jit's trace, which the real quantizer parses (``pytorch_nndct/parse/trace_helper.py``),
records the in-place op (``aten::relu_``) and every later use of ``y`` as a use of its result. A torch.fx
graph keeps the later readers on ``y``'s node, which the simulation (computing each node anew, quantized)
would then read before the call: :func:`follow_in_place` rewires them to the call, as the trace has it.
"""
import inspect
import operator

import torch
import torch.fx
from torch import nn


def in_place(root: nn.Module, node: torch.fx.Node) -> bool:
    """True when the call runs in place with an ``inplace`` flag: a module with ``inplace=True`` or a
    function called with ``inplace=True`` (by keyword or by position)."""
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


def writes_first_argument(root: nn.Module, node: torch.fx.Node) -> bool:
    """The call writes its first argument and returns it: an ``inplace`` flag, a trailing-underscore
    tensor method (``y.neg_()``, ``y.add_(z)``) or function (``F.relu_``, ``torch.relu_``)."""
    if node.op == "call_method":
        name = str(node.target)
    elif node.op == "call_function" and node.target is not operator.setitem:
        name = getattr(node.target, "__name__", "")
    else:
        name = ""
    underscored = name.endswith("_") and not name.startswith("_")
    return (underscored or in_place(root, node)) and bool(node.args) and isinstance(node.args[0], torch.fx.Node)


def follow_in_place(root: nn.Module, graph: torch.fx.Graph) -> None:
    """Rewire, in place in ``graph``, every reader of a tensor that comes after a call writing that tensor
    in place to read the call's result (module docstring); a graph without such calls is unchanged."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if not writes_first_argument(root, node):
            continue
        written = node.args[0]
        for user in list(written.users):
            if user is not node and order[user] > order[node]:
                user.replace_input_with(written, node)
