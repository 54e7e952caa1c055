"""One answer to "may this value share storage with another one" (``pipeline.fx.in_place.may_alias``), and what
follows from it: the inputs a graph writes (``written_inputs``: copies), the in-place writes torch.jit's dead code
pass drops (``fx.dead_values``), and the writes the real quantizer loses (``refuse_lost_writes``).

The facts against the real quantizer are in tests/data/refused_real/ (inplace_*, slice_zero_*, view_add_*,
pool_write_unread; tests/fidelity/test_refused_real.py); here, each rule on small graphs.
"""
import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from pipeline.fx.dead_values import remove_dead_values
from pipeline.fx.in_place import follow_in_place, may_alias, refuse_lost_writes, written_inputs
from pipeline.fx.refusals import NotSimulated


class _Leaf(nn.Module):
    """A module without parameters whose forward the graph does not show (kept a leaf by _Tracer)."""
    def forward(self, x):
        return x.view(-1)


class _Tracer(torch.fx.Tracer):
    def is_leaf_module(self, m, name):
        return isinstance(m, _Leaf) or super().is_leaf_module(m, name)


class _Calls(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body
        self.conv = nn.Conv2d(3, 3, 1)
        self.pool = nn.MaxPool2d(2)
        self.leaf = _Leaf()

    def forward(self, x):
        return self.body(self, x)


def _graph(body):
    root = _Calls(body)
    return root, _Tracer().trace(root)


def _result(graph):
    """The value the graph returns (its one computed node, in the cases below)."""
    return next(n for n in graph.nodes if n.op == "output").args[0]


@pytest.mark.parametrize("body,alias", [
    (lambda m, x: x.flip(1), False),  # aten::flip returns a new tensor (no hand-kept list held it)
    (lambda m, x: x.softmax(1), False),  # only an overload aten::softmax.int: no default overload
    (lambda m, x: x.reshape(-1), True),  # Tensor(a): may be a view
    (lambda m, x: x.contiguous(), True),
    (lambda m, x: F.dropout(x, training=False), True),  # returns its input although the schema says not
    (lambda m, x: x.type_as(x), True),
    (lambda m, x: x.float(), True),  # no aten operator: not known
    (lambda m, x: x / 2, False),  # operator.truediv: aten::div
    (lambda m, x: m.pool(x), False),  # a torch.nn module without parameters: a new tensor
    (lambda m, x: m.leaf(x), True),  # a module without parameters that is not torch's: not known
    (lambda m, x: m.conv(x), False),
    (lambda m, x: x, True),  # an input is the caller's storage
])
def test_may_alias_asks_the_schema_then_the_hand_kept_facts(body, alias):
    root, graph = _graph(body)
    assert may_alias(root, _result(graph)) is alias


@pytest.mark.parametrize("body,written", [
    (lambda m, x: x.flip(1).mul_(2.0), ()),  # a new tensor written: no copy (the hand-kept list made one)
    (lambda m, x: F.dropout(x, training=False).add_(1.0), (0,)),  # eval dropout returns x itself
    (lambda m, x: x.type_as(x).add_(1.0), (0,)),
    (lambda m, x: m.leaf(x).add_(1.0), (0,)),  # a view, for all the graph tells
    (lambda m, x: m.pool(x).add_(1.0), ()),
])
def test_written_inputs_follows_may_alias(body, written):
    root, graph = _graph(body)
    assert written_inputs(root, graph) == written


def _dead_after(body):
    root, graph = _graph(body)
    follow_in_place(root, graph)
    remove_dead_values(root, graph)
    return [n.name for n in graph.nodes if n.op not in ("placeholder", "output")]


def _write_into_pool(m, x):
    y = m.conv(x)
    out = y * 2
    m.pool(y).relu_()  # the pool's new tensor, which nothing reads
    return out


def _write_into_slice(m, x):
    y = m.conv(x)
    out = y * 2
    y[:, 0:2].zero_()  # a view of y, which nothing reads after
    return out


def _write_read_through_view(m, x):
    y = m.conv(x)
    v = y.view(-1)
    y.relu_()  # v, read after it, is a view of y: the write shows there
    return v


def test_a_write_into_a_new_tensor_or_its_view_that_nothing_reads_is_dropped():
    """torch.jit's dead code pass drops them (measured: refused_real/pool_write_unread, slice_zero_unread)."""
    assert _dead_after(_write_into_pool) == ["conv", "mul"]
    assert _dead_after(_write_into_slice) == ["conv", "mul"]


def test_a_write_read_after_through_a_view_is_kept():
    assert _dead_after(_write_read_through_view) == ["conv", "view", "relu_"]


def _view_add_read(m, x):
    y = m.conv(x)
    y.view(-1).add_(1)
    return y * 2


def _add_read(m, x):
    y = m.conv(x)
    y.add_(1)
    return y * 2  # reads the write's result (follow_in_place), as torch.jit's trace does


def test_a_write_nndct_runs_out_of_place_into_a_view_read_after_is_refused():
    """measured: refused_real/view_add_read (the real quantizer's outputs are those of the model without the add)."""
    root, graph = _graph(_view_add_read)
    follow_in_place(root, graph)
    with pytest.raises(NotSimulated, match="shares its storage with 'conv', read after it by 'mul': the real "
                                           "quantizer runs this write out of place"):
        refuse_lost_writes(root, graph)


def test_a_write_whose_readers_read_its_result_is_not_refused():
    root, graph = _graph(_add_read)
    follow_in_place(root, graph)
    refuse_lost_writes(root, graph)
    assert [n.args[0].name for n in graph.nodes if n.name == "mul"] == ["add_"]
