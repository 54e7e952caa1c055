"""Values forward computes and never uses, dropped as the real quantizer's trace drops them.

nndct parses a ``torch.jit`` trace of the model, and runs torch's dead code elimination on it before
making a node of any traced op (``pytorch_nndct/utils/jit_utils.py``: ``optimize_graph``, which
``_optimize_graph_19`` makes ``torch._C._jit_pass_dce`` among inlining and constant propagation, called
by ``pytorch_nndct/parse/trace_helper.py``'s ``TorchGraphHandler._trace_graph_from_model`` on the trace). So a value no output
depends on (``z = y.permute(0, 2, 3, 1)`` left unused, a conv call whose result is thrown away, the
second piece of ``a, b = torch.split(y, 4, 1)`` when only ``a`` is read), and everything computed only
for it, is no node of the real quantizer: no ``quant_info.json`` entry (not even its parameters'), no
test-mode op, no xmodel op, and it takes no part in the fix positions of the live nodes (a conv
whose output also fed a dead permute is fused with its ReLU as if the permute were not there). Measured
on the real quantizer: tests/data/refused_real/dead_* and unused_module.

A torch.fx graph keeps such nodes; :func:`remove_dead_values` erases them. The trace numbers of the
values torch.jit gave the dead ops before its pass ran are not affected (they are the xmodel's op
names' business: ``quantizers/sim/xmodel/names.py`` traces the model itself).
"""
import operator
from typing import Dict

import torch
import torch.fx
from torch import nn

from .in_place import aliases, owner, writes_first_argument

# fx node kinds that compute a value (placeholders, the inputs, and the output are never dead)
_COMPUTING = ("call_function", "call_method", "call_module", "get_attr")


def _writes(root: nn.Module, node: torch.fx.Node) -> bool:
    """The call changes a tensor it is given: in place (``y.relu_()``, ``inplace=True``) or ``x[idx] = v``."""
    return (node.op == "call_function" and node.target is operator.setitem) or writes_first_argument(root, node)


def _dead(root: nn.Module, node: torch.fx.Node, order: Dict[torch.fx.Node, int]) -> bool:
    if node.op not in _COMPUTING or node.users:
        return False
    if not _writes(root, node):
        return True
    # a write whose result is not read is dead when what it writes is a tensor of its own, or a view of one (y[:, 0:2],
    # y.view(-1)), that nothing reads after it through any of its aliases (a reader after it of what it writes reads
    # its result instead: in_place.follow_in_place): torch.jit's dead code pass, with its alias analysis, drops it
    # then (measured: tests/data/refused_real/dead_inplace, slice_zero_unread, view_add_unread, pool_write_unread)
    written = node.args[0]
    base = owner(root, written) if isinstance(written, torch.fx.Node) else None
    return base is not None and not any(order[u] > order[node] for a in aliases(root, base, stop=node) for u in a.users)


def remove_dead_values(root: nn.Module, graph: torch.fx.Graph) -> int:
    """Erase from ``graph`` every node no output depends on (module docstring), last first, so that a
    dead chain goes whole; a call that writes a tensor in place goes only where what it writes is lost
    (a tensor of its own or a view of one, ``in_place.may_alias``, that nothing reads after through any alias). Returns how many were erased (0: ``graph`` is unchanged)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    erased = 0
    for node in reversed(list(graph.nodes)):
        if _dead(root, node, order):
            graph.erase_node(node)
            erased += 1
    return erased
