"""A tensor indexed by a tuple of slices, ints, None and Ellipsis (``x[:, 0]``, ``x[:, None]``, ``x[..., 1]``),
split into the ops torch.jit records for it, which are the nodes nndct's parser makes (``capture``).

torch's ``THPVariable_getitem`` / ``applySlicing`` (``torch/csrc/autograd/python_variable_indexing.cpp``),
while tracing, walks the index with a dimension counter ``dim`` on the indexed tensor:

- a slice records ``aten::slice(x, dim, start, end, step)``, also a full ``:`` (the slice optimization
  is off while tracing), and moves to the next dimension;
- an int records ``aten::select(x, dim, i)``; the dimension goes, so ``dim`` stays;
- None records ``aten::unsqueeze(x, dim)`` and moves past the new dimension;
- Ellipsis records nothing and skips the dimensions it stands for: ``dim += rank - specified``, with
  ``rank`` the indexed tensor's and ``specified`` the index's items other than None and Ellipsis.
  A lone ``x[None]`` is ``unsqueeze(x, 0)``, a lone ``x[i]`` a select of dimension 0.

nndct's parser (``pytorch_nndct/parse/trace_helper.py``, ``OptPass.slice_to_strided_slice``) merges each
chain of consecutive ``aten::slice`` into one ``nndct_strided_slice`` whose ``dims`` are the chain's
dimensions, in order; ``aten::select`` becomes ``nndct_select`` {dim, index} (merged into a slice only
before an in-place copy, ``merge_select_to_strided_slice``, which reading a tensor never is) and
``aten::unsqueeze`` ``nndct_unsqueeze``.

The getitem becomes those ops, in the same order: a chain of slices one getitem of its slices (an
Ellipsis among them kept where it lies, so the slice's ``dims`` are the chain's), an int
``torch.select(x, dim, i)``, None ``torch.unsqueeze(x, dim)``; the values are torch's own. A chain of
consecutive dimensions that does not start at dimension 0 (after an int or None: ``x[:, 0, 3:4]`` is
``slice(x, 0)``, ``select(1, 0)``, ``slice(1, 3, 4)``) is a getitem led by full slices for the dimensions
before it, which torch.jit does not record: the getitem's ``meta[SLICE_DIMS]`` holds the chain's
dimensions, which the slice's ``dims`` are. A chain no getitem names (split by an Ellipsis after an int or
None, ``x[:, None, 2:6, ..., 0:8]``: dims 2 and 4) leaves the getitem as it was, as does an index with any
other item (a tensor, a bool); the xmodel writer refuses it (``ops/xmodel_support.mixed_index_reason``)."""
import operator
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.fx

from ..ops.slicing import SLICE_DIMS

# ("slices", ((index, ...), dims or None)) | ("select", (dim, i)) | ("unsqueeze", dim)
Piece = Tuple[str, Any]


def _is_item(a: Any) -> bool:
    return a is None or a is Ellipsis or isinstance(a, slice) or type(a) is int


def _chain_index(dims: List[int], slices: List[slice], rank: Optional[int]) -> Optional[tuple]:
    """The getitem index whose slices fall on ``dims`` of a tensor of ``rank`` dims: the slices from
    dimension 0, or the first from 0 and the rest up to the last dimension with an Ellipsis between;
    None when no index names those dimensions."""
    if dims == list(range(len(dims))):
        return tuple(slices)
    for a in range(len(dims)):
        tail = len(dims) - a
        if rank is not None and dims == list(range(a)) + list(range(rank - tail, rank)):
            return tuple(slices[:a]) + (Ellipsis,) + tuple(slices[a:])
    return None


def jit_pieces(index: tuple, rank: Optional[int]) -> Optional[List[Piece]]:
    """The ops torch.jit records for ``x[index]`` (see the module docstring), or None where the getitem
    stays as it is. ``rank``: the indexed tensor's, needed only where ``index`` holds an Ellipsis."""
    if not all(_is_item(a) for a in index) or sum(a is Ellipsis for a in index) > 1:
        return None
    if Ellipsis in index and rank is None:
        return None
    specified = sum(1 for a in index if a is not None and a is not Ellipsis)
    pieces = []  # type: List[Piece]
    dim, current = 0, rank  # the counter, and the current tensor's rank where known
    chain_dims, chain = [], []  # type: List[int], List[slice]

    def close() -> bool:
        if chain:
            where, dims = _chain_index(chain_dims, chain, current), None  # type: Optional[tuple], Optional[list]
            if where is None and chain_dims == list(range(chain_dims[0], chain_dims[0] + len(chain))):
                where, dims = (slice(None),) * chain_dims[0] + tuple(chain), list(chain_dims)
            if where is None:
                return False
            pieces.append(("slices", (where, dims)))
            del chain_dims[:], chain[:]
        return True

    for a in index:
        if a is Ellipsis:
            dim += rank - specified
        elif isinstance(a, slice):
            chain_dims.append(dim)
            chain.append(a)
            dim += 1
        else:
            if not close():
                return None
            if a is None:
                pieces.append(("unsqueeze", dim))
                dim += 1
                current = None if current is None else current + 1
            else:
                pieces.append(("select", (dim, a)))
                current = None if current is None else current - 1
    return pieces if close() else None


def split_select_index(graph: torch.fx.Graph, rank: Callable[[torch.fx.Node], int]) -> None:
    """Every getitem of a tensor whose index holds an int or None next to other items (a tuple), or
    is a lone None, made the ops torch.jit records for it (:func:`jit_pieces`). ``rank(node)``: the
    rank of a node's tensor on the example, asked only for an index with an Ellipsis. A tuple index
    can only index a tensor (a Python sequence refuses it), and so can None."""
    for node in list(graph.nodes):
        if not (node.op == "call_function" and node.target is operator.getitem
                and isinstance(node.args[0], torch.fx.Node)):
            continue
        index = node.args[1]
        if index is None:
            index = (None,)
        elif not (isinstance(index, tuple) and any(a is None or type(a) is int for a in index)):
            continue
        if not all(_is_item(a) for a in index):
            continue
        pieces = jit_pieces(index, rank(node.args[0]) if Ellipsis in index else None)
        if pieces is None:
            continue
        with graph.inserting_before(node):
            value = node.args[0]
            for kind, what in pieces:
                if kind == "slices":
                    value = graph.call_function(operator.getitem, (value, what[0]))
                    if what[1] is not None:
                        value.meta[SLICE_DIMS] = what[1]
                elif kind == "select":
                    value = graph.call_function(torch.select, (value,) + tuple(what))
                else:
                    value = graph.call_function(torch.unsqueeze, (value, what))
        node.replace_all_uses_with(value)
        graph.erase_node(node)
