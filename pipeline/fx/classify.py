"""The op type of one fx node of the rewritten graph (``capture``, step 4): a type of the op list
(``pipeline.ops``) or ``aten::<name>`` for a float operator nndct has no type for; and the shapes of
the calls that make several nodes (``x[idx]``, chunk/split)."""
import operator
from typing import Any, Optional

import torch
import torch.fx
from torch import nn

from ..errors import QuantizationError
from .. import ops as t
from ..ops import (FUNCTION_OPS, FUNCTION_RULES, METHOD_OPS, MODULE_OPS, MODULE_RULES, SPLIT_FUNCTIONS, SPLIT_METHODS,
                   STRIDED_SLICE)
from .in_place import in_place
from .refusals import refuse_in_simulation
from .rewrites import REMOVED_FUNCTIONS, REMOVED_MODULES


def classify(root: nn.Module, node: torch.fx.Node, strict: bool = True) -> str:
    """The op type of one fx node (its call targets named in ``root``): a row of the op table, or ``aten::<name>`` (float operator).
    A float operator called in place (``nn.SiLU(inplace=True)``, ``F.silu(x, inplace=True)``) is
    ``aten::<name>_``: torch.jit traces ``aten::silu_`` and nndct keeps the kind, underscore and all,
    in the node's name (``aten_silu__2``) and the xmodel op's type.
    ``strict``: refuse what the simulation cannot run (a conv padding other than zeros, and the calls
    of ``refusals.py`` it has no form for: a Conv1d, a group norm, ...).

    Raises:
        QuantizationError: with ``strict``, a call the simulation refuses (named, with the reason)."""
    if strict:
        refuse_in_simulation(root, node)
    op = _classify_kind(root, node, strict)
    if op.startswith("aten::") and in_place(root, node):
        op += "_"
    return op


def _classify_kind(root: nn.Module, node: torch.fx.Node, strict: bool = True) -> str:
    if node.op == "call_module":
        m = root.get_submodule(node.target)
        rule = MODULE_RULES.get(type(m))
        op = rule(m, strict) if rule is not None else None
        if op is not None:
            return op
        if type(m) in MODULE_OPS:
            return MODULE_OPS[type(m)]
        if isinstance(m, REMOVED_MODULES):
            return t.IDENTITY
        return "aten::%s" % type(m).__name__.lower()
    if node.op == "call_function":
        if node.target in FUNCTION_OPS:
            return FUNCTION_OPS[node.target]
        if node.target in FUNCTION_RULES:
            return FUNCTION_RULES[node.target](node)
        if node.target in REMOVED_FUNCTIONS:
            return t.IDENTITY
        return _aten(getattr(node.target, "__name__", "op"))
    if node.target in METHOD_OPS:  # call_method
        return METHOD_OPS[node.target]
    return _aten(str(node.target))


def _aten(name: str) -> str:
    """The float operator's type of a call named ``name``: ``aten::<name>``, an operator's dunder name
    without its underscores (``__matmul__``: ``aten::matmul``), an in-place call's kept (``y.neg_()``:
    ``aten::neg_``, as torch.jit traces it and nndct names the node, ``aten_neg__2``)."""
    if name.startswith("__") and name.endswith("__"):
        return "aten::%s" % name.strip("_")
    return "aten::%s" % name.lstrip("_")


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def float_operand(fx_node: Optional[torch.fx.Node]) -> bool:
    """True when a Python float operand makes arithmetic on sizes a float (``(C // h) ** -0.5``):
    torch traces a float tensor there, which nndct quantizes like any other."""
    return fx_node is not None and any(isinstance(a, float) for a in fx_node.args)


def getitem_kind(idx: Any) -> str:
    """``x[idx]`` as torch.jit traces it: an int selects (aten::select), a tensor gathers
    (aten::index), anything else slices (one nndct_strided_slice)."""
    if isinstance(idx, int):
        return t.SELECT
    if isinstance(idx, torch.fx.Node) or (isinstance(idx, tuple) and any(isinstance(i, torch.fx.Node) for i in idx)):
        return t.INDEX
    return STRIDED_SLICE


def split_pieces(node: torch.fx.Node) -> Optional[int]:
    """Number of pieces of a chunk/split node (a split by size without the traced shape: as many
    as the pieces taken), or None when the node is no chunk/split."""
    if not ((node.op == "call_function" and node.target in SPLIT_FUNCTIONS)
            or (node.op == "call_method" and node.target in SPLIT_METHODS)):
        return None
    second = node.args[1] if len(node.args) > 1 else node.kwargs.get(
        "chunks", node.kwargs.get("split_size_or_sections", node.kwargs.get("split_size")))
    if isinstance(second, (list, tuple)):
        return len(second)
    if (node.target == "chunk" or node.target is torch.chunk) and isinstance(second, int):
        return second
    taken = [u.args[1] for u in node.users if u.op == "call_function" and u.target is operator.getitem
             and isinstance(u.args[1], int)]
    return 1 + max(taken) if taken else 1
