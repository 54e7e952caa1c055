"""Calls that write their input in place, as torch.jit's trace sees them.

``nn.ReLU(inplace=True)(y)``, ``F.relu_(y)``, ``y.neg_()`` change ``y`` itself: a later reader of ``y``
reads the changed values, whether or not the call's result was assigned (``self.relu(y); return
self.c2(y)``). torch.jit's trace, which the real quantizer parses (``pytorch_nndct/parse/trace_helper.py``),
records the in-place op (``aten::relu_``) and every later use of ``y`` as a use of its result. A torch.fx
graph keeps the later readers on ``y``'s node, which the simulation (computing each node anew, quantized)
would then read before the call: :func:`follow_in_place` rewires them to the call, as the trace has it.

Whether a value may share its storage with another one (a view, the input itself) has one answer here,
:func:`may_alias`; :func:`written_inputs` (the inputs that get a copy), ``fx.dead_values`` (the writes torch.jit's
dead code pass drops: :func:`owner`, :func:`aliases`) and :func:`refuse_lost_writes` (a write nndct runs out of
place whose tensor is read after it through another alias) ask it (docs/xmodel.md#in-place-writes).
"""
import inspect
import operator
from typing import Any, Callable, Dict, List, Optional, Set

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


# torch.nn modules that return their input or a view of it (a module call has no aten schema to ask)
VIEW_MODULES = (nn.Identity, nn.Flatten, nn.Unflatten, nn.modules.dropout._DropoutNd)

# operators whose aten counterpart has another name (``operator.truediv`` is ``aten::div`` on tensors)
_ATEN_NAMES = {operator.truediv: "div", operator.floordiv: "floor_divide", operator.mod: "remainder"}

# calls whose aten schema annotates no alias but which return their input itself or a view of it in eager torch
# (measured under torch 1.13 and 2.13): dropout in eval mode (``_dropout_impl`` returns ``input``), ``type_as`` and
# ``sum_to_size`` of a tensor that has the type or size already, ``einsum`` of a permutation (a permuted view)
SCHEMA_EXCEPTIONS = frozenset(("dropout", "alpha_dropout", "feature_dropout", "feature_alpha_dropout", "type_as",
                               "sum_to_size", "einsum"))


def _call_name(node: torch.fx.Node) -> str:
    """The aten operator name of a call of a tensor method or of a torch/operator function ("" when it has none)."""
    if node.op == "call_method":
        return str(node.target)
    if node.op != "call_function" or node.target in (operator.getitem, operator.setitem):
        return ""
    if node.target in _ATEN_NAMES:
        return _ATEN_NAMES[node.target]
    module = getattr(node.target, "__module__", None) or ""
    # only torch's own functions and Python's operators carry an aten operator's meaning under their name
    return getattr(node.target, "__name__", "") if module.startswith("torch") or module == "_operator" else ""


def _schema_returns_alias(name: str):
    """True when some overload of ``aten::<name>`` (but its ``out=`` variants) returns an alias of an argument
    (its schema's alias annotation, ``Tensor(a)``), False when none does, None when aten has no such operator."""
    packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
    if packet is None or not hasattr(packet, "overloads"):
        return None
    schemas = [getattr(packet, o)._schema for o in packet.overloads()]
    schemas = [s for s in schemas if not any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
                                             for a in s.arguments)]  # out= variants write the out argument
    if not schemas:
        return None
    return any(r.alias_info is not None for s in schemas for r in s.returns)


def may_alias(root: nn.Module, node: torch.fx.Node) -> bool:
    """Whether ``node``'s value may share storage with a tensor it did not make (an argument, the caller's input,
    the model's parameter or buffer), so that a write into it may change another value. The one answer for
    :func:`written_inputs` (copies of the inputs a graph writes) and ``fx.dead_values`` (a write into a value
    nothing reads is dropped only where the value is a tensor of its own, as torch.jit's alias analysis has it).

    - an input (placeholder) or a parameter/buffer (``get_attr``): True;
    - a call that runs in place (:func:`writes_first_argument`: ``y.relu_()``, ``inplace=True``): True;
    - a method or a torch function: its aten operator's schema (``torch.ops.aten.<name>``, every overload but
      the ``out=`` variants; ``Tensor(a)`` returned: ``view``, ``permute``, ``reshape``, ``contiguous``, ``to``),
      except the calls that return their input although the schema says otherwise (``SCHEMA_EXCEPTIONS``);
    - a module call (no schema): True for ``VIEW_MODULES`` and a module with ``inplace=True``; False for any
      other torch.nn module or one with parameters (a conv, a pool: a new tensor); True for a module without
      parameters that is not torch's (its forward is not known);
    - anything else (indexing, ``getattr``, a wrapped function, a method without an aten operator such as
      ``x.float()``): True.

    Conservative: True may name a value that is in fact new (a copy too many, a write kept), never the reverse.

    Args:
        root: the module the graph's ``call_module`` targets are named in.
        node: a node of a ``torch.fx.Graph`` of ``root``.

    Returns:
        bool.
    """
    if node.op in ("placeholder", "get_attr"):
        return True
    if node.op == "call_module":
        m = root.get_submodule(str(node.target))
        if isinstance(m, VIEW_MODULES) or getattr(m, "inplace", False) is True:
            return True
        return not (type(m).__module__.startswith("torch.nn.") or any(True for _ in m.parameters()))
    if writes_first_argument(root, node):
        return True
    name = _call_name(node)
    if name in SCHEMA_EXCEPTIONS:
        return True
    answer = _schema_returns_alias(name) if name else None
    return True if answer is None else answer


def storage_base(root: nn.Module, node: torch.fx.Node) -> torch.fx.Node:
    """The value whose storage ``node``'s value is, as far as the graph tells: ``node`` followed back through the
    first arguments of the calls that may return it or a view of it (:func:`may_alias`): ``y`` for ``y[:, 0:2]``
    and ``y.view(-1)``; an input or a parameter/buffer (``get_attr``) ends the walk, and so does a call whose first
    argument is no node."""
    while may_alias(root, node) and node.op not in ("placeholder", "get_attr"):
        first = node.args[0] if node.args else None
        if not isinstance(first, torch.fx.Node):
            break
        node = first
    return node


def owner(root: nn.Module, node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """:func:`storage_base` where it is a tensor of its own (a value no other one shares storage with); None where
    it is an input, a parameter or buffer, or a call not known to return a new tensor."""
    base = storage_base(root, node)
    return None if may_alias(root, base) else base


def aliases(root: nn.Module, base: torch.fx.Node, stop: Optional[torch.fx.Node] = None) -> Set[torch.fx.Node]:
    """``base`` and every value that may share its storage: the calls on it, or on one of them, that may return
    their first argument or a view of it (:func:`may_alias`); ``stop`` (a call writing in place) and what is made
    from it are left out."""
    found, stack = {base}, [base]
    while stack:
        for user in stack.pop().users:
            if user is not stop and user not in found and user.args and user.args[0] in found \
                    and may_alias(root, user):
                found.add(user)
                stack.append(user)
    return found


def augmented_writes(root: nn.Module, graph: torch.fx.Graph, shape: Callable[[torch.fx.Node], Any],
                     refuse: bool) -> None:
    """Give, in place in ``graph``, each augmented assignment of a tensor (``y += z``, ``y -= z``, ``y *= z``,
    ``y /= z``: nodes the capture's tracer marked ``node.meta[tracer.AUGMENTED]``, traced as the plain operator)
    the meaning torch.jit's trace records, which the real quantizer parses: a write of ``y`` in place
    (``aten::add_``, ``aten::sub_``, ...), read afterwards through every name of ``y``.

    - ``y += z``: the call becomes ``y.add_(z)``, which nndct's parser takes for its add
      (``OpCreator.op_convert_map``) and the simulation runs out of place; :func:`follow_in_place` then gives
      the later readers of ``y`` (``identity = y`` read after the write) the result, and
      :func:`refuse_lost_writes` refuses a write into a view whose base is read afterwards.
    - ``y -= z``, ``y *= z``, ``y /= z``: the plain operator as before where no other name reads ``y`` after
      the write; where one does (``refuse``: the simulation's capture), refused before calibration. nndct keeps
      ``aten::sub_``/``aten::mul_``/``aten::div_`` as custom ops (no ``op_convert_map`` entry), whose results
      the simulation has not been compared with.
    - a number (``n += 1`` on a size, ``shape(y)`` None): Python's own ``+=``, a new value; unchanged.

    Args:
        root: the module the graph's targets are named in. graph: the capture's ``torch.fx.Graph``.
        shape: the shape of a node's value on the example, None where it is not a tensor.
        refuse: raise for the refused forms (the simulation's capture), else leave them as traced.

    Raises:
        NotSimulated: ``y -= z``/``*=``/``/=`` of a tensor another name reads after the write.
    """
    from .refusals import NotSimulated
    from .tracer import AUGMENTED
    order = {n: i for i, n in enumerate(graph.nodes)}  # type: Dict[torch.fx.Node, int]
    for node in list(graph.nodes):
        first = node.args[0] if node.args else None
        if not node.meta.get(AUGMENTED) or not isinstance(first, torch.fx.Node) or shape(first) is None:
            continue
        if node.target is operator.add:
            node.op, node.target = "call_method", "add_"  # as torch.jit records ``y += z``
            continue
        late = _later_readers(root, node, storage_base(root, first), order)
        if late and refuse:
            raise NotSimulated(
                "node %r (%s= on %r) writes %r in place, and %r reads it after the write through another name: "
                "torch.jit's trace, which the real quantizer parses, records an in-place %s_ that nndct keeps as a "
                "custom op, which the simulation does not reproduce. Write the result to a new name "
                "(y2 = y %s z) and read the one you mean"
                % (node.name, _OPERATOR_SIGNS[node.target], first.name, first.name, late[0].name,
                   node.target.__name__, _OPERATOR_SIGNS[node.target]))


def _later_readers(root: nn.Module, node: torch.fx.Node, base: torch.fx.Node,
                   order: Dict[torch.fx.Node, int]) -> List[torch.fx.Node]:
    """The readers, after ``node`` (a write) in the graph's ``order``, of ``base`` or of any value that may share
    its storage (:func:`aliases`, made from before the write), first first."""
    return sorted((u for a in aliases(root, base, stop=node) for u in a.users
                   if u is not node and order[u] > order[node]), key=order.get)


_OPERATOR_SIGNS = {operator.sub: "-", operator.mul: "*", operator.truediv: "/"}


# ``x += y`` and ``x *= y`` (fx: ``operator.iadd``) and the in-place methods nndct's parser takes for their out-of-place
# op (``OpCreator.op_convert_map`` in pytorch_nndct/parse/op_dispatcher.py: ``aten::add_`` is ``add``): nndct's module
# for them runs out of place (its elemwise add and mul), and so does the simulation
OUT_OF_PLACE = {operator.iadd: operator.add, operator.imul: operator.mul}
OUT_OF_PLACE_METHODS = {"add_": "add"}


def refuse_lost_writes(root: nn.Module, graph: torch.fx.Graph) -> None:
    """Refuse, before calibration, an in-place write nndct runs out of place (``OUT_OF_PLACE``,
    ``OUT_OF_PLACE_METHODS``) into a value that shares its storage with another one read after the write
    (``y.view(-1).add_(1)`` and then ``y`` read): torch.jit's trace, which the real
    quantizer parses, records that later read as a read of the tensor before the write, and nndct's add does not
    write it, so the real quantizer computes the model without the write, silently (measured:
    tests/data/refused_real/view_add_read gives the same outputs as view_add_unread). A reader of the written value
    itself reads the write's result (:func:`follow_in_place`), as the trace has it: not refused.

    Raises:
        NotSimulated: naming the write, the value it writes into and the first reader that would miss it.
    """
    from .refusals import NotSimulated
    order = {n: i for i, n in enumerate(graph.nodes)}  # type: Dict[torch.fx.Node, int]
    for node in graph.nodes:
        run_out_of_place = (node.op == "call_method" and node.target in OUT_OF_PLACE_METHODS) \
            or (node.op == "call_function" and node.target in OUT_OF_PLACE)
        if not run_out_of_place or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        base = storage_base(root, node.args[0])
        late = _later_readers(root, node, base, order)
        if late:
            raise NotSimulated(
                "node %r writes %r in place, which shares its storage with %r, read after it by %r: the real "
                "quantizer runs this write out of place (nndct's elementwise op; torch.jit's trace records the later "
                "read as a read of %r before the write), so it would quantize the model without the write. Write "
                "the result to a new tensor and read that instead (y = y + 1; a part of it: torch.cat or "
                "torch.where of the pieces)" % (node.name, node.args[0].name, base.name, late[0].name, base.name))


# ``x[idx] = v`` and the augmented assignments (``x += y``) write their first argument.
WRITING_OPERATORS = frozenset((operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv))


def written_inputs(root: nn.Module, graph: torch.fx.Graph):
    """The positions of the graph's inputs (placeholders, in order) that running it may write in place.

    A call writes an input when it writes its first argument (:func:`writes_first_argument`: ``x.sub_(0.5)``,
    ``F.relu_(x)``, ``nn.ReLU(inplace=True)(x)``; or ``x[idx] = v``, ``x += y``: ``WRITING_OPERATORS``) and
    that argument is the input or may share its storage (a chain of views or of in-place calls:
    ``x.view(-1).mul_(2)``, ``x[:, :1].zero_()``; :func:`may_alias`). Conservative: a call not known to return a
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
                if may_alias(root, user):
                    aliases.add(user)
                    stack.append(user)
    return tuple(written)
