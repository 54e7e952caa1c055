"""Slices and picks: ``x[a:b]`` (``nndct_strided_slice``), ``x[i]`` with an int (``nndct_select``: torch
traces ``aten::select``), ``x[t]`` with a tensor (``nndct_index``), one output of an op returning
several (``nndct_tuple_index``), the in-place fill of ``x[idx] = number`` (``aten::fill_``), and the
calls that split a tensor into pieces (chunk, split: each piece taken is an ``nndct_strided_slice``).
nndct warns ``QUANTIZER_TORCH_FLOAT_OP`` for select and index."""
import operator

import torch
import torch.fx

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import INT_MAX, XmodelForm

STRIDED_SLICE = "nndct_strided_slice"
SELECT = "nndct_select"
INDEX = "nndct_index"
TUPLE_INDEX = "nndct_tuple_index"
FILL = "aten::fill_"

# calls that split a tensor into a tuple; each piece taken becomes an nndct_strided_slice node
SPLIT_FUNCTIONS = (torch.chunk, torch.split)
SPLIT_METHODS = ("chunk", "split")


def _is_split(node) -> bool:
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return target in ("chunk", "split")


def _lower_slice(lo, node) -> dict:
    """dims, begin, end (:data:`INT_MAX` for an open end) and strides of ``x[a:b, ...]``, or of one piece
    of chunk/split (:func:`_piece_attrs`).

    Raises:
        XmodelUnsupported: an index that is not a slice."""
    fx_node = node.fx_node
    source = fx_node.args[0]
    shape = list(lo.values[node.inputs[0].fx_node].shape)
    # a slice of a graph input has no base
    base = source.args[0] if isinstance(source, torch.fx.Node) and source.args else None
    if base is not None and isinstance(source, torch.fx.Node) and source in lo.graph.fx_graph.nodes \
            and source.op in ("call_function", "call_method") and _is_split(source):
        return _piece_attrs(lo, node, source, shape)
    index = fx_node.args[1]
    index = index if isinstance(index, tuple) else (index,)
    dims, begin, end, strides = [], [], [], []
    for dim, item in enumerate(index):
        if not isinstance(item, slice):
            raise lo.unsupported(node, "indexing with %r (only slices are written)" % (item,))
        start, stop, step = (lo.value(item.start), lo.value(item.stop), lo.value(item.step))
        dims.append(dim)
        begin.append(0 if start is None else int(start))
        end.append(INT_MAX if stop is None else min(int(stop), INT_MAX))
        strides.append(1 if step is None else int(step))
    return {"dims": dims, "begin": begin, "end": end, "strides": strides}


def _piece_attrs(lo, node, split, shape) -> dict:
    """One piece of chunk/split as nndct's replacement slices it: every dimension sliced, the
    split dimension from the piece's start to its end (the last piece to the dimension's size)."""
    target = split.target if isinstance(split.target, str) else split.target.__name__
    second = lo.value(split.args[1] if len(split.args) > 1 else
                      split.kwargs.get("chunks", split.kwargs.get("split_size_or_sections",
                                                                 split.kwargs.get("split_size"))))
    dim = lo.value(split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0))
    dim = dim + len(shape) if dim < 0 else dim
    size = shape[dim]
    if target == "chunk":
        step = -(-size // second)
        count = -(-size // step) if step else second
        bounds = [(k * step, size if k == count - 1 else (k + 1) * step) for k in range(count)]
    elif isinstance(second, (list, tuple)):
        bounds, start = [], 0
        for s in second:
            bounds.append((start, start + s))
            start += s
    else:
        count = max(1, -(-size // second))
        bounds = [(k * second, size if k == count - 1 else (k + 1) * second) for k in range(count)]
    start, stop = bounds[node.fx_node.args[1]]
    rank = len(shape)
    return {"dims": list(range(rank)), "begin": [start if d == dim else 0 for d in range(rank)],
            "end": [stop if d == dim else INT_MAX for d in range(rank)], "strides": [1] * rank}


def _create_slice(w, node) -> None:
    """XIR ``strided_slice``: nndct's StridedSlice carries all five TensorFlow masks; it never sets the
    last three (``xop_creator.py`` ``strided_slice``)."""
    a = node.attrs
    w.fixed_op(node.name, "strided_slice", {"begin": a["begin"], "end": a["end"], "strides": a["strides"],
                                            "begin_mask": a["begin_mask"], "end_mask": a["end_mask"],
                                            "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0},
               {"input": w.data_inputs(node)})


RECORD = OpRecord(
    family="slicing",
    specs={
        STRIDED_SLICE: OpSpec("layout", False, True, False),
        SELECT: OpSpec("float", False, False, False),
        INDEX: OpSpec("float", False, False, False),
        TUPLE_INDEX: OpSpec("layout", False, False, False),  # carries its own fix pos: the op's is a tuple
    },
    functions={operator.getitem: STRIDED_SLICE, torch.select: SELECT},
    methods={"select": SELECT},
    approximation=Absent("moves no value"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/parse/op_dispatcher.py",
    xmodel={STRIDED_SLICE: XmodelForm(_lower_slice, _create_slice),
            SELECT: Absent("not written yet: the xmodel writer has no XIR form for it"),
            INDEX: Absent("not written yet: the xmodel writer has no XIR form for it"),
            TUPLE_INDEX: Absent("not written yet: the xmodel writer has no XIR form for it")},
)
