"""Slices and picks: ``x[a:b]`` (``nndct_strided_slice``), ``x[i]`` with an int (``nndct_select``: torch
traces ``aten::select``), ``x[t]`` with a tensor (``nndct_index``), one output of an op returning
several (``nndct_tuple_index``), the in-place fill of ``x[idx] = number`` (``aten::fill_``), and the
calls that split a tensor into pieces (chunk, split: each piece taken is an ``nndct_strided_slice``).
nndct warns ``QUANTIZER_TORCH_FLOAT_OP`` for select and index."""
import operator
from typing import Any

import numpy as np
import torch
import torch.fx

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec

STRIDED_SLICE = "nndct_strided_slice"
SELECT = "nndct_select"
INDEX = "nndct_index"
TUPLE_INDEX = "nndct_tuple_index"
FILL = "aten::fill_"

# calls that split a tensor into a tuple; each piece taken becomes an nndct_strided_slice node
SPLIT_FUNCTIONS = (torch.chunk, torch.split)
SPLIT_METHODS = ("chunk", "split")


def is_split(node: Any) -> bool:
    """True for an fx node calling chunk or split (a tuple of pieces: each piece taken is a getitem)."""
    return isinstance(node, torch.fx.Node) and (
        (node.op == "call_function" and node.target in SPLIT_FUNCTIONS)
        or (node.op == "call_method" and node.target in SPLIT_METHODS))


def _onnx_getitem(b: Any, node: Any, mod: None) -> str:
    """One piece of a chunk/split (Slice along its dim, bounds from the traced sizes), or a
    tensor indexed by slices (``x[:, :8]``, see ``_onnx_slice``)."""
    base, index = node.args
    if not is_split(base):
        return _onnx_slice(b, node, base, index)
    x = base.args[0]
    size = b.shape(x)
    dim = int(b.static(arg(base, 2, "dim", 0))) % len(size)
    how = b.static(arg(base, 1, "chunks" if base.target in ("chunk", torch.chunk) else "split_size_or_sections"))
    if base.target in ("chunk", torch.chunk):
        step = -(-size[dim] // int(how))
        bounds = [(i, min(i + step, size[dim])) for i in range(0, size[dim], step)]
    elif isinstance(how, int):
        bounds = [(i, min(i + how, size[dim])) for i in range(0, size[dim], how)]
    else:
        starts = np.cumsum([0] + list(how)).tolist()
        bounds = list(zip(starts[:-1], starts[1:]))
    start, end = bounds[int(b.static(index))]
    if dim in b.batch_dims(x):
        raise Unsupported("splitting the batch dimension")
    return b.op("Slice", [b.tensor(x), b.ints(node.name + "/starts", [start]), b.ints(node.name + "/ends", [end]),
                          b.ints(node.name + "/axes", [dim])], node.name)


def _onnx_slice(b: Any, node: Any, x: Any, index: Any) -> str:
    """``x[s0, s1, ...]`` with constant, positive-step slices (dims from the left; an Ellipsis
    stands for the full slices it covers) as one Slice; ``x[i]`` as a Gather; other integers,
    None, tensors and a slice of the batch dimension are refused."""
    index = b.static(index)
    index = index if isinstance(index, tuple) else (index,)
    size = b.shape(x)
    if len(index) == 1 and isinstance(index[0], int) and not isinstance(index[0], bool):
        # x[i]: aten::select of dim 0, a Gather by a scalar index (drops the dimension)
        if 0 in b.batch_dims(x):
            raise Unsupported("selecting along the batch dimension")
        return b.op("Gather", [b.tensor(x), b.index(node.name + "/index", index[0] % size[0])],
                    node.name, axis=0)
    index = tuple(slice(*(b.static(v) for v in (i.start, i.stop, i.step))) if isinstance(i, slice) else i
                  for i in index)  # a bound from the traced sizes (x[:, :H]) is a number here
    if any(i is Ellipsis for i in index):
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(size) - len(index) + 1) + index[at + 1:]
    if not all(isinstance(i, slice) for i in index):
        raise Unsupported("indexing a tensor by %s (only slices: x[:, a:b])" % (index,))
    starts, ends, axes, steps = [], [], [], []
    for dim, piece in enumerate(index):
        if not all(v is None or isinstance(v, int) for v in (piece.start, piece.stop, piece.step)):
            raise Unsupported("a slice bound is not a constant: %s" % (piece,))
        start, stop, step = piece.indices(size[dim])
        if step <= 0:
            raise Unsupported("slice step %d (only positive steps)" % step)
        if (start, stop, step) == (0, size[dim], 1):
            continue
        if dim in b.batch_dims(x):
            raise Unsupported("slicing the batch dimension")
        starts.append(start)
        ends.append(stop)
        axes.append(dim)
        steps.append(step)
    if not axes:  # x[:] and the like
        return b.op("Identity", [b.tensor(x)], node.name)
    return b.op("Slice", [b.tensor(x), b.ints(node.name + "/starts", starts), b.ints(node.name + "/ends", ends),
                          b.ints(node.name + "/axes", axes), b.ints(node.name + "/steps", steps)], node.name)


def _onnx_select(b: Any, node: Any, mod: None) -> str:
    """``torch.select(x, dim, index)`` (``x[:, i]``): a Gather of that one index, then Squeeze of the dim."""
    x = arg(node, 0, "input")
    rank = len(b.shape(x))
    dim, index = (int(b.static(arg(node, i, n))) for i, n in ((1, "dim"), (2, "index")))
    dim %= rank
    if dim in b.batch_dims(x):
        raise Unsupported("selecting from the batch dimension")
    index %= b.shape(x)[dim]
    taken = b.op("Gather", [b.tensor(x), b.ints(node.name + "/index", [index])], node.name + "/gathered", axis=dim)
    return b.op("Squeeze", [taken, b.ints(node.name + "/axes", [dim])], node.name)

def dpu_piece(node: Any, ctx: Any) -> Verdict:
    """chunk / split and the pieces taken from them: channel slices of the producer's map, where
    the producer runs."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of {} is not on DPU.".format(node.op), fixes=[follows(src.name)])
    return Verdict(DPU)


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
    onnx={STRIDED_SLICE: _onnx_getitem, SELECT: _onnx_select,
          INDEX: Absent("no call of the lowered model resolves to it (``x[t]`` is a getitem, whose form refuses "
                        "a tensor index)"),
          TUPLE_INDEX: Absent("no call of the lowered model resolves to it (a piece of a chunk/split is a "
                              "getitem, whose form writes it as a Slice)")},
    dpu_rule={STRIDED_SLICE: DpuRule(("getitem",), dpu_piece), SELECT: Absent("a float operator of the quantizer"),
              INDEX: Absent("a float operator of the quantizer"),
              TUPLE_INDEX: Absent("no call of its own: the capture makes it for an op returning several outputs"),
              # the calls that split a tensor (SPLIT_FUNCTIONS, SPLIT_METHODS): no nndct type; the
              # pieces run where the producer does
              "aten::chunk": DpuRule(("chunk",), dpu_piece), "aten::split": DpuRule(("split",), dpu_piece)},
)
