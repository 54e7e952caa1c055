"""A chain of slices as the real quantizer runs it (pipeline/ops/slicing/chain.py): the slices torch.jit records
for one or more getitems in a row, which nndct's parser merges into one strided slice, held against torch's own
values and against nndct's forward (``deephi_StridedSlice.forward``: the chain's slices on consecutive dims from
its first, the string it evaluates rebuilt here as an index); which chains the capture refuses
(``fx/jit_index.refuse_wrong_slices``) is what the real quantizer was measured to get wrong
(docs/xmodel.md#ops; tests/export/test_robust_refusals.py runs them through the quantizer)."""
import numpy as np
import pytest
import torch

from pipeline.ops.slicing.chain import (OPEN, nndct_file_ranges, nndct_forward_ranges, one_index, torch_ranges,
                                        wrong_chain_reason)

E = Ellipsis
S = slice
SHAPE = (4, 8, 16, 16)
# getitems in a row -> whether the real quantizer takes torch's elements in calibration, test mode and file
# (measured with the real quantizer on a (4, 8, 16, 16) conv output)
CHAINS = [
    (((E, S(0, 4)),), True),
    (((E, S(1, 3), S(0, 4)),), True),
    (((S(None), S(2, 6), E),), True),
    (((S(None), S(2, 6), E, S(1, 3), S(0, 4)),), True),
    (((S(None), E, S(0, 16)),), True),  # the last slice takes all of dims 3 and 1 alike
    (((S(None), E, S(0, 4)),), False),
    (((S(None), S(2, 6), E, S(0, 4)),), False),
    (((S(None), S(2, 6)), (S(None), S(None), S(1, 3))), False),  # IndexError
    (((S(None), S(2, 6)), (S(None), S(1, 3))), False),
    (((S(2, 4),), (S(None), S(1, 3))), False),
    (((S(None), S(2, 6)), (S(None), S(None))), False),  # the file keeps channels 0:6
    (((S(None), S(2, 6)), (E, S(1, 3))), False),
    (((S(None), S(None), S(2, 6)), (S(None), S(1, 3))), False),  # IndexError
    (((S(None), S(None, 6)), (S(None),)), True),  # one strided slice of dims [0, 1, 0], right
    (((S(None), S(2, 6)), (S(None),)), True),  # the same before a select: y[:, 2:6][:, 0]
]


def _traced(chain):
    """(dims, slices) of the aten::slice ops torch.jit records for the getitems of ``chain``, in order."""
    def run(t):
        for index in chain:
            t = t[index]
        return t
    graph = torch.jit.trace(run, (torch.zeros(SHAPE),)).graph
    found = [[i.toIValue() for i in list(n.inputs())[1:]] for n in graph.nodes() if n.kind() == "aten::slice"]
    return [f[0] for f in found], [S(f[1], f[2], f[3]) for f in found]


def _taken(x, ranges):
    return x[np.ix_(*[list(r) for r in ranges])]


@pytest.mark.parametrize("chain", [c for c, _ in CHAINS], ids=str)
def test_the_ranges_are_torch_and_nndct_forward_values(chain):
    x = np.arange(int(np.prod(SHAPE))).reshape(SHAPE)
    want = torch.from_numpy(x)
    for index in chain:
        want = want[index]
    dims, slices = _traced(chain)
    assert np.array_equal(_taken(x, torch_ranges(dims, slices, SHAPE)), want.numpy())
    index = tuple([S(0, OPEN, 1)] * dims[0] + [S(s.start, s.stop, s.step) for s in slices])
    try:
        forward = torch.from_numpy(x)[index].numpy()  # deephi_StridedSlice.forward's eval("input[...]")
    except IndexError:
        forward = None
    ranges = nndct_forward_ranges(dims, slices, SHAPE)
    assert (ranges is None) == (forward is None)
    if forward is not None:
        assert np.array_equal(_taken(x, ranges), forward)


@pytest.mark.parametrize("chain, right", CHAINS, ids=str)
def test_a_chain_is_refused_where_the_real_quantizer_takes_other_elements(chain, right):
    dims, slices = _traced(chain)
    reason = wrong_chain_reason(dims, slices, SHAPE, "x", len(chain))
    assert (reason is None) == right, reason
    if not right:  # the one index it gives takes torch's elements, on consecutive dims from 0
        want = torch_ranges(dims, slices, SHAPE)
        text = reason.split(": ")[-1].split(" for ")[0]
        index = eval("np.s_" + text[1:])  # noqa: S307 -- the index this test's own helper wrote
        index = index if isinstance(index, tuple) else (index,)
        assert torch_ranges(list(range(len(index))), list(index), SHAPE) == want
        assert nndct_forward_ranges(list(range(len(index))), list(index), SHAPE) == want
        assert nndct_file_ranges(list(range(len(index))), list(index), SHAPE) == want


def test_one_index_writes_each_dimension_once():
    assert one_index([range(4), range(2, 6), range(1, 3), range(16)], SHAPE) == ":, 2:6, 1:3"
    assert one_index([range(4), range(0, 8, 2), range(16), range(0, 4)], SHAPE) == ":, 0:7:2, :, 0:4"
