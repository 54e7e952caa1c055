"""A tensor indexed by slices, ints, None and Ellipsis: the capture splits the getitem into the ops torch.jit
records for it (pipeline/fx/jit_index.py), which are the nodes nndct parses (docs/xmodel.md#ops). Held here
against torch.jit's own trace; tests/fidelity/test_refused_real.py holds int_index, none_index,
ellipsis_index and the slices after an int or None (int_slice_index, none_int_slice_index, int_slice_int_index,
none_slice_index) against the real quantizer."""
import operator

import pytest
import torch
import torch.fx

from pipeline.fx.jit_index import jit_pieces, split_chain, split_select_index
from pipeline.ops.slicing import SLICE_DIMS

E = Ellipsis
INT64_MAX = 9223372036854775807
SPLIT = [(slice(None), 0), (slice(None), None), (E, 1), (0,), (0, slice(1, 3)), (slice(None), slice(None), 2, 1),
         (None,), (E, None), (1, E, 0), (slice(1, 3), E, None), (slice(None), slice(0, 2), E, 0),
         # a chain after an int or None: a getitem led by full slices, its traced dims (SLICE_DIMS) the chain's
         (None, slice(1, 2)), (slice(None), None, slice(None), 0), (E, slice(1, 2), 0), (slice(None), 0, slice(3, 4)),
         (slice(None), 1, slice(2, 4), 0), (None, slice(None), slice(1, 2)), (0, 1, slice(1, 3), slice(None, None, 2))]
# a chain split by an Ellipsis in an index with an int or None: no getitem names it
LEFT = [(None, slice(1, 2), E, slice(0, 1)), (slice(None), None, slice(2, 3), E, slice(0, 4)),
        (slice(0, 2), E, slice(1, 3), 0)]


def _jit_ops(index, x):
    """(kind, constant arguments after the input) of every slice, select and unsqueeze torch.jit records."""
    graph = torch.jit.trace(lambda t: t[index], (x,)).graph
    return [(n.kind()[len("aten::"):], [i.toIValue() for i in list(n.inputs())[1:]]) for n in graph.nodes()
            if n.kind() in ("aten::slice", "aten::select", "aten::unsqueeze")]


def _ops_of(pieces, rank):
    ops = []
    for kind, what in pieces:
        if kind == "slices":
            what, traced = what
            at = what.index(E) if E in what else len(what)
            after = what[at + 1:]
            dims = list(range(at)) + [rank - len(after) + i for i in range(len(after))]
            items = [s for s in what if s is not E]
            if traced is not None:  # the getitem's leading full slices are not traced
                assert all(s == slice(None) for s in items[:len(items) - len(traced)])
                dims, items = traced, items[len(items) - len(traced):]
            for dim, s in zip(dims, items):
                ops.append(("slice", [dim, 0 if s.start is None else s.start, INT64_MAX if s.stop is None else s.stop,
                                      s.step or 1]))
        elif kind == "select":
            ops.append(("select", list(what)))
            rank -= 1
        else:
            ops.append(("unsqueeze", [what]))
            rank += 1
    return ops


@pytest.mark.parametrize("index", SPLIT, ids=str)
def test_the_pieces_are_the_ops_torch_jit_records(index):
    x = torch.randn(2, 3, 4, 5)
    assert _ops_of(jit_pieces(index, x.dim()), x.dim()) == _jit_ops(index, x)


@pytest.mark.parametrize("index", LEFT, ids=str)
def test_a_chain_no_getitem_names_leaves_the_index_as_it_is(index):
    assert jit_pieces(index, 4) is None


@pytest.mark.parametrize("index", SPLIT + LEFT, ids=str)
def test_the_split_graph_computes_the_same_values(index):
    x = torch.randn(2, 3, 4, 5)
    graph = torch.fx.Graph()
    graph.output(graph.call_function(operator.getitem, (graph.placeholder("x"), index)))
    split_select_index(graph, lambda node: 4)
    targets = [n.target for n in graph.nodes if n.op == "call_function"]
    assert len(targets) == (1 if jit_pieces(index, 4) is None else len(jit_pieces(index, 4)))
    traced = [n.meta.get(SLICE_DIMS) for n in graph.nodes if n.target is operator.getitem]
    assert traced == [what[1] for kind, what in jit_pieces(index, 4) or [("slices", (index, None))] if kind == "slices"]
    assert torch.equal(torch.fx.GraphModule(torch.nn.Module(), graph)(x), x[index])



@pytest.mark.parametrize("index, dims, shape", [
    (LEFT[0], [1, 4], (1, 2, 3, 4, 5)),  # after the unsqueeze of dim 0
    (LEFT[1], [2, 4], (2, 1, 3, 4, 5)),
    (LEFT[2], [0, 2], (2, 3, 4, 5)),  # before the select
], ids=str)
def test_the_split_chain_is_the_slices_torch_jit_records_on_dims_that_are_not_consecutive(index, dims, shape):
    """split_chain: the chain no getitem names, its dims and slices a run of torch.jit's slice ops, on the
    shape the ops before it leave (the capture refuses that chain: tests/export/test_robust_refusals.py)."""
    x = torch.randn(2, 3, 4, 5)
    got_dims, slices, got_shape = split_chain(index, tuple(x.shape))
    assert (got_dims, got_shape) == (dims, shape)
    run = [("slice", [d, 0 if s.start is None else s.start, s.stop, s.step or 1]) for d, s in zip(dims, slices)]
    ops = _jit_ops(index, x)
    assert any(ops[i:i + len(run)] == run for i in range(len(ops)))


def test_no_split_chain_where_the_slices_are_consecutive():
    assert split_chain((slice(None), None, slice(2, 3), slice(None), slice(0, 4)), (2, 3, 4, 5)) is None
    assert split_chain((slice(None), 0, slice(2, 3), E, slice(0, 4)), (2, 3, 4, 5)) is None  # E stands for none
    assert split_chain((slice(None), E, slice(0, 4)), (2, 3, 4, 5)) is None  # no int or None: one getitem
