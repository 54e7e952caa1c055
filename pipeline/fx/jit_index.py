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
other item (a tensor, a bool). nndct merges the chain split by an Ellipsis into one strided slice that
its forward runs on consecutive dimensions (dims 2 and 3): the capture refuses it before calibration
(:func:`refuse_wrong_slices`, :func:`split_chain`); the xmodel writer refuses any other index left
(``ops/xmodel_support.mixed_index_reason``).

nndct also merges slices across getitems (``x[:, 2:6][:, :, 1:3]``: one strided slice of dims [0, 1, 0, 1, 2])
and runs a strided slice on consecutive dimensions from its first whatever its dims; a chain where that takes
other elements than torch (dims not consecutive: an Ellipsis inside it, or several getitems) is refused before
calibration (:func:`refuse_wrong_slices`, ``ops/slicing/chain.py``); several getitems it gets right become one."""
import operator
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.fx

from ..ops.slicing import SLICE_DIMS
from ..ops.slicing.chain import constant

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


def split_chain(index: tuple, shape: Sequence[int]) -> Optional[Tuple[List[int], List[slice], Optional[Tuple[int, ...]]]]:
    """The chain of slices torch.jit records for ``x[index]`` (``x`` of ``shape``) on dimensions that are not
    consecutive, which no getitem names (:func:`jit_pieces` leaves the index whole): a chain split by the
    Ellipsis in an index with an int or None (``x[:, None, 2:6, ..., 0:4]``: dims [2, 4]; ``x[2:4, ..., 1:3, 0]``:
    dims [0, 2]). The walk is torch's ``applySlicing`` (the module docstring).

    Returns:
        (its dims, its slices, the shape of the tensor it slices: ``shape`` after the ops before it, None where
        a bound before it is not a constant int), or None where the index has no such chain."""
    if not all(_is_item(a) for a in index) or index.count(Ellipsis) != 1 \
            or not any(a is None or type(a) is int for a in index):
        return None
    rank = len(shape)
    specified = sum(1 for a in index if a is not None and a is not Ellipsis)
    dim, current = 0, list(shape)  # type: int, Optional[List[int]]
    dims, chain, at = [], [], None  # type: List[int], List[slice], Optional[Tuple[int, ...]]
    for a in index + (None,):  # a last None closes the last chain
        if a is Ellipsis:
            dim += rank - specified
            continue
        if isinstance(a, slice):
            if not chain:
                at = None if current is None else tuple(current)
            dims.append(dim)
            chain.append(a)
            if current is not None and constant([a]):
                current[dim] = len(range(current[dim])[a])
            else:
                current = None
            dim += 1
            continue
        if chain and dims != list(range(dims[0], dims[0] + len(dims))):
            return dims, chain, at
        dims, chain = [], []
        if current is not None and a is None:
            current.insert(dim, 1)
        elif current is not None:
            del current[dim]
        dim += 1 if a is None else 0
    return None


def _slices_of(node: Any) -> Optional[tuple]:
    """The index of a getitem whose items are slices and an Ellipsis (what torch.jit records as ``aten::slice``
    ops alone), or None."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is operator.getitem
            and isinstance(node.args[0], torch.fx.Node)):
        return None
    index = node.args[1] if isinstance(node.args[1], tuple) else (node.args[1],)
    if not index or not all(isinstance(a, slice) or a is Ellipsis for a in index) or index.count(Ellipsis) > 1:
        return None
    return index


def refuse_wrong_slices(graph: torch.fx.Graph, shape: Callable[[torch.fx.Node], Any]) -> None:
    """Refuse, before calibration, every chain of slices the real quantizer computes otherwise than torch
    (``ops/slicing/chain.py``): the slicing getitems (after :func:`split_select_index`) in a row, each read by
    the next alone, are the ``aten::slice`` ops nndct's parser merges into one strided slice. ``shape(node)``:
    the shape of a node's value on the example (None: not a tensor), asked only for a chain of several
    getitems or one with an Ellipsis. A chain of several getitems it gets right becomes the one getitem nndct
    makes of it (:func:`_merge`).

    Raises:
        NotSimulated: the chain's nodes, as the model writes it, and ``chain.wrong_chain_reason``."""
    from ..ops.slicing import _slice_dims
    from ..ops.slicing.chain import wrong_chain_reason
    from .refusals import NotSimulated
    merged = set()  # type: set   # the getitems of the chains merged already
    for node in list(graph.nodes):
        if node in merged:
            continue
        _refuse_split_chain(node, shape)
        index = _slices_of(node)
        source = node.args[0] if index is not None else None
        if index is None or (_slices_of(source) is not None and len(source.users) == 1):
            continue  # not a getitem of slices, or not the first of its chain
        chain = [node]
        while len(chain[-1].users) == 1:
            (user,) = chain[-1].users
            if _slices_of(user) is None or user.args[0] is not chain[-1]:
                break
            chain.append(user)
        if len(chain) == 1 and Ellipsis not in index:
            continue  # one getitem's slices from dimension 0 (or from its SLICE_DIMS): consecutive
        size = shape(source)
        if size is None:
            continue  # a slice of a tuple or a size, not of a tensor
        dims, slices, texts = [], [], []  # type: List[int], List[slice], List[str]
        rank = len(size)
        for g in chain:
            items = _slices_of(g)
            for dim, item in _slice_dims(items, rank, g.meta.get(SLICE_DIMS)):
                dims.append(dim)
                slices.append(item)
            texts.append("[%s]" % _text(items))
        if not dims:
            continue
        reason = wrong_chain_reason(dims, slices, tuple(size), "x" + "".join(texts), len(chain))
        if reason is not None:
            raise NotSimulated("node%s %s: %s" % ("s" if len(chain) > 1 else "", ", ".join(repr(g.name) for g in chain),
                                                  reason))
        if len(chain) > 1:
            _merge(graph, chain, dims, slices)
            merged.update(chain)


def _refuse_split_chain(node: torch.fx.Node, shape: Callable[[torch.fx.Node], Any]) -> None:
    """Refuse a getitem :func:`split_select_index` left whole whose index holds a chain of slices on dimensions
    that are not consecutive (:func:`split_chain`), with ``chain.wrong_chain_reason`` and the index with the
    Ellipsis written as the full slices it stands for (one chain of consecutive dimensions, which is split
    and written). *Measured*: the real quantizer runs the chain on consecutive dimensions from its first
    (``y[:, None, 2:6, ..., 0:4]`` on dims [2, 3]), and a Linear reading it fails in its calibration
    (``RuntimeError: mat1 and mat2 shapes cannot be multiplied``: tests/data/refused_real/ellipsis_split_index).

    Raises:
        NotSimulated: the node, the index as the model writes it, the reason and the index that is written."""
    from ..ops.slicing.chain import wrong_chain_reason
    from .refusals import NotSimulated
    if not (node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node)
            and isinstance(node.args[1], tuple)):
        return
    index = node.args[1]
    if not all(_is_item(a) for a in index) or Ellipsis not in index or not any(a is None or type(a) is int
                                                                                for a in index):
        return
    size = shape(node.args[0])
    found = None if size is None else split_chain(index, tuple(size))
    if found is None:
        return
    dims, slices, at = found
    where = index.index(Ellipsis)
    full = index[:where] + (slice(None),) * (len(size) - sum(1 for a in index if a is not None and a is not Ellipsis)) \
        + index[where + 1:]
    written = "x[%s]" % _text(index)
    reason = wrong_chain_reason(dims, slices, at, written, 1, instead="x[%s] for %s" % (_text(full), written),
                                after="a layer after it that needs torch's shape fails in its calibration "
                                      "(measured: a Linear reading it, RuntimeError: mat1 and mat2 shapes cannot "
                                      "be multiplied)")
    if reason is not None:
        raise NotSimulated("node %r: %s" % (node.name, reason))


def _merge(graph: torch.fx.Graph, chain: List[torch.fx.Node], dims: List[int], slices: List[slice]) -> None:
    """The getitems of a chain the real quantizer gets right made the one strided slice nndct's parser makes
    of them: one getitem indexing what nndct's forward indexes (full slices for the dims before the chain's
    first, then the chain's slices: torch's elements, :func:`refuse_wrong_slices` checked), its
    ``meta[SLICE_DIMS]`` the chain's dims, repeats and all, which the deploy form reads as nndct's does."""
    with graph.inserting_before(chain[-1]):
        merged = graph.call_function(operator.getitem, (chain[0].args[0], (slice(None),) * dims[0] + tuple(slices)))
    merged.meta[SLICE_DIMS] = list(dims)
    chain[-1].replace_all_uses_with(merged)
    for g in reversed(chain):
        graph.erase_node(g)


def _text(index: tuple) -> str:
    """``index`` as Python writes it (``:, None, 2:6, ...``; a bound read from a size as ``n``)."""
    def bound(v: Any) -> str:
        return "" if v is None else str(v) if type(v) is int else "n"
    return ", ".join("..." if a is Ellipsis else "None" if a is None else str(a) if type(a) is int else
                     ("%s:%s" % (bound(a.start), bound(a.stop)) + ("" if a.step is None else ":" + bound(a.step)))
                     for a in index)
