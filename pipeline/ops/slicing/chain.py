"""A chain of slices as the real quantizer runs it, against torch: where the two take other elements, the
capture refuses the chain before calibration (``pipeline/fx/jit_index.py``, ``refuse_wrong_slices``).

torch.jit records one ``aten::slice`` per slice of an index, on the dimension torch's ``applySlicing`` gives
it (an Ellipsis skips the dimensions it stands for, a full ``:`` is recorded too). nndct's parser merges
every run of ``aten::slice`` ops, each reading the one before it and read by nothing else, into one
``nndct_strided_slice`` {dim, start, end, step}, one entry per slice (``OptPass.slice_to_strided_slice``),
also across getitems: ``x[:, 2:6][:, :, 1:3]`` is one strided slice of dims [0, 1, 0, 1, 2]. Then:

- its forward (``pytorch_nndct.nn.modules.prim_ops``, ``deephi_StridedSlice.forward``) indexes the input
  with full slices for the dimensions before the chain's first, then the chain's slices in order, so slice
  ``j`` falls on dimension ``dims[0] + j`` whatever its own: more slices than dimensions raise torch's
  ``IndexError`` ("too many indices") in calibration; dims that are not consecutive and distinct slice
  other dimensions than torch does (``x[:, 2:6, ..., 0:4]``: dims [0, 1, 3], run on [0, 1, 2]), and the
  calibration and test mode compute another tensor, silently;
- its deploy form (``DevGraphOptimizer.update_op_attrs``) keeps one begin, end and stride per dimension:
  the last slice's begin and stride and the smallest end of those on it, so a dimension sliced twice is
  written as neither slice (``x[:, 2:6][:, :]``: channels 0:6 in the file, 2:6 in the calibration).

Every fact here was measured with the real quantizer too (docs/xmodel.md#ops, the indexing row and its table of measured chains)."""
from typing import Any, List, Optional, Sequence, Tuple

from ..refusal import NOT_IN_REAL

# nndct's open end of a slice (``op_dispatcher.strided_slice``: sys.maxsize; torch.jit records the same)
OPEN = 9223372036854775807


def _bounds(item: slice) -> Tuple[int, int, int]:
    """(start, stop, step) of a constant slice, nndct's defaults for None (0, :data:`OPEN`, 1)."""
    return (0 if item.start is None else int(item.start), OPEN if item.stop is None else int(item.stop),
            1 if item.step is None else int(item.step))


def torch_ranges(dims: Sequence[int], slices: Sequence[slice], shape: Sequence[int]) -> List[range]:
    """The indices torch takes along each dimension of a tensor of ``shape`` for the slices ``slices`` on
    ``dims``, one after the other (a dimension sliced twice: the second slice of the first's result)."""
    taken = [range(n) for n in shape]
    for dim, item in zip(dims, slices):
        start, stop, step = _bounds(item)
        taken[dim] = taken[dim][start:stop:step]
    return taken


def nndct_forward_ranges(dims: Sequence[int], slices: Sequence[slice], shape: Sequence[int]) -> Optional[List[range]]:
    """The indices ``deephi_StridedSlice.forward`` takes along each dimension: slice ``j`` on dimension
    ``dims[0] + j``; None where it has more slices than the input dimensions (its ``IndexError``)."""
    if dims[0] + len(slices) > len(shape):
        return None
    taken = [range(n) for n in shape]
    for j, item in enumerate(slices):
        start, stop, step = _bounds(item)
        taken[dims[0] + j] = taken[dims[0] + j][start:stop:step]
    return taken


def nndct_file_ranges(dims: Sequence[int], slices: Sequence[slice], shape: Sequence[int]) -> List[range]:
    """The indices the written ``strided_slice`` takes along each dimension (``update_op_attrs``: per
    dimension the last begin and stride of the slices on it, the smallest end)."""
    begin, end, strides = [0] * len(shape), [OPEN] * len(shape), [1] * len(shape)
    for dim, item in zip(dims, slices):
        start, stop, step = _bounds(item)
        begin[dim], strides[dim] = start, step
        end[dim] = min(end[dim], stop)
    return [range(n)[b:e:s] for n, b, e, s in zip(shape, begin, end, strides)]


def constant(slices: Sequence[Any]) -> bool:
    """True when every bound of ``slices`` is an int or None (a bound read from a size is an fx node)."""
    return all(v is None or type(v) is int for s in slices for v in (s.start, s.stop, s.step))


def _shape(taken: Sequence[range]) -> Tuple[int, ...]:
    return tuple(len(r) for r in taken)


def one_index(taken: Sequence[range], shape: Sequence[int]) -> str:
    """``taken`` (one range per dimension of ``shape``) as one index of slices, ``start:stop`` (``:step`` where
    not 1) or ``:`` for a whole dimension, without the whole ones after the last that cuts (``:, 2:6, 1:3``)."""
    parts = []
    for r, n in zip(taken, shape):
        if r == range(n):
            parts.append(":")
            continue
        stop = r[-1] + 1 if len(r) else r.start
        parts.append("%d:%d" % (r.start, stop) + ("" if r.step == 1 else ":%d" % r.step))
    while len(parts) > 1 and parts[-1] == ":":
        parts.pop()
    return ", ".join(parts)


def wrong_chain_reason(dims: Sequence[int], slices: Sequence[slice], shape: Optional[Sequence[int]],
                       written: str, getitems: int, instead: Optional[str] = None,
                       after: Optional[str] = None) -> Optional[str]:
    """Why the real quantizer gets the chain of ``slices`` on ``dims`` (traced, in order, on a tensor of
    ``shape``; None: not known) wrong, with the workaround; None where its calibration, test mode and file all
    take torch's elements. ``written``: the chain as the model writes it (``x[:, 2:6][:, :, 1:3]``);
    ``getitems``: how many getitems make it (one: a chain split by an Ellipsis); ``instead``: the workaround
    index (``x[...] for <written>``; by default the one index of the chain's elements on ``shape``);
    ``after``: what the other shape does downstream, said where the real quantizer's tensor has another
    shape than torch's."""
    dims = list(dims)
    if dims == list(range(dims[0], dims[0] + len(dims))):
        return None  # consecutive and distinct: both forms are torch's
    merged = ("%s (slices of dims %s, which nndct's parser merges into one strided slice: "
              "OptPass.slice_to_strided_slice)" % (written, dims))
    rank = None if shape is None else len(shape)
    if rank is not None and dims[0] + len(dims) > rank:
        effect = ("%d slices from dimension %d of a tensor of %d dimensions: its calibration fails (IndexError: "
                  "too many indices)" % (len(dims), dims[0], rank))
    elif shape is None or not constant(slices):
        effect = ("it runs them on dims %s, a tensor of other values" % list(range(dims[0], dims[0] + len(dims))))
    else:
        want, run = torch_ranges(dims, slices, shape), nndct_forward_ranges(dims, slices, shape)
        if run != want:
            effect = ("it runs them on dims %s: its calibration and test mode compute another tensor, silently "
                      "(%s for torch's %s on the example)"
                      % (list(range(dims[0], dims[0] + len(dims))),
                         "shape %s" % (_shape(run),) if _shape(run) != _shape(want) else "other elements",
                         _shape(want)))
            if after and _shape(run) != _shape(want):
                effect += "; %s" % after
        elif nndct_file_ranges(dims, slices, shape) != want:
            effect = ("its xmodel keeps one begin and stride per dimension, the last slice's "
                      "(DevGraphOptimizer.update_op_attrs), so its file computes another tensor than its "
                      "calibration")
        else:
            return None
    if instead is None and shape is not None and constant(slices):
        instead = "x[%s] for %s" % (one_index(torch_ranges(dims, slices, shape), shape), written)
    elif instead is None:
        instead = "x[:, a:b, c:d], each dimension once, none skipped"
    how = ("Write the dimensions the Ellipsis stands for as full slices" if getitems == 1
           else "Index once, each dimension once")
    return ("%s is %s: its strided slice's forward slices consecutive dimensions from the chain's first "
            "(deephi_StridedSlice.forward): %s. %s: %s, which is written and gives the same values"
            % (merged, NOT_IN_REAL, effect, how, instead))
