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


# Modules that return their input or a view of it.
VIEW_MODULES = (nn.Identity, nn.Flatten, nn.Unflatten, nn.Dropout, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)


def _may_alias(root: nn.Module, node: torch.fx.Node) -> bool:
    """Whether ``node``'s value may share storage with its first argument (conservative: any call of a
    function or a method not known to return a new tensor, a module that returns its input or a view of it)."""
    if node.op == "call_module":
        m = root.get_submodule(node.target)
        return isinstance(m, VIEW_MODULES) or getattr(m, "inplace", False) is True
    if node.op == "call_method":
        return str(node.target) not in NEW_TENSOR_METHODS
    if node.op == "call_function":
        return node.target not in NEW_TENSOR_FUNCTIONS
    return False


# Functions and tensor methods that always return a new tensor or a number (never a view of an argument, never
# the argument itself); any other call counts as one that may: a view (``x.view``, ``x[:, :1]``, ``x.T``), or
# the tensor itself (``x.float()`` of a float32 ``x``, ``x.contiguous()`` of a contiguous one).
NEW_TENSOR_FUNCTIONS = frozenset((operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
                                  operator.neg, operator.matmul, operator.pow, torch.add, torch.sub, torch.mul,
                                  torch.div, torch.cat, torch.stack, torch.matmul, torch.relu, torch.sigmoid,
                                  torch.tanh, torch.exp, torch.clamp))
NEW_TENSOR_METHODS = frozenset(("add", "sub", "mul", "div", "neg", "abs", "pow", "sqrt", "exp", "clamp", "clone",
                                "relu", "sigmoid", "tanh", "softmax", "matmul", "mean", "sum", "size", "dim"))


# ``x[idx] = v`` and the augmented assignments (``x += y``) write their first argument.
WRITING_OPERATORS = frozenset((operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv))


def written_inputs(root: nn.Module, graph: torch.fx.Graph):
    """The positions of the graph's inputs (placeholders, in order) that running it may write in place.

    A call writes an input when it writes its first argument (:func:`writes_first_argument`: ``x.sub_(0.5)``,
    ``F.relu_(x)``, ``nn.ReLU(inplace=True)(x)``; or ``x[idx] = v``, ``x += y``: ``WRITING_OPERATORS``) and
    that argument is the input or may share its storage (a chain of views or of in-place calls:
    ``x.view(-1).mul_(2)``, ``x[:, :1].zero_()``). Conservative: a function or method not known to return a
    new tensor counts as a view, so the answer may list an input that is not written (a copy too many), not
    leave out one that a traced call writes. A graph that writes no input gives ``()``.

    Args:
        root: the module the graph's call targets are named in (its ``call_module`` targets).
        graph: the ``torch.fx.Graph`` (float capture, a step's trace, or a lowered test-mode model).

    Returns:
        A tuple of ints, increasing: 0 for the first placeholder.
    """
    written = []
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for i, p in enumerate(placeholders):
        aliases, stack = {p}, [p]
        while stack and i not in written:
            for user in list(stack.pop().users):
                first = user.args[0] if user.args else None
                if user in aliases or not isinstance(first, torch.fx.Node) or first not in aliases:
                    continue
                if writes_first_argument(root, user) or (user.op == "call_function"
                                                        and user.target in WRITING_OPERATORS):
                    written.append(i)
                    break
                if _may_alias(root, user):
                    aliases.add(user)
                    stack.append(user)
    return tuple(written)
