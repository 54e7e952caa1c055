"""Slices and picks: ``x[a:b]`` (``nndct_strided_slice``), ``x[i]`` with an int (``nndct_select``: torch
traces ``aten::select``), ``x[t]`` with a tensor (``nndct_index``), the in-place fill of ``x[idx] = number``
(``aten::fill_``), and the calls that split a tensor into pieces (chunk, split: each piece taken is an ``nndct_strided_slice``).
nndct warns ``QUANTIZER_TORCH_FLOAT_OP`` for select and index."""
import math
import operator
from typing import Any, List, Optional

import numpy as np
import torch
import torch.fx

from ..dpu_support import DPU, Verdict, cpu_verdict, follows
from ..onnx_form import Unsupported, arg
from ..record import Absent, DpuRule, OpRecord, OpSpec
from ..sim_support import TORCH
from ..xir_support import (IN, CustomKernel, OpDef, XirOp, attr, fail, last_shape_info, one, op_input, req, unsupported,
                          with_info)
from ..xmodel_support import INT_MAX, XmodelForm, custom, mixed_index_reason, no_attrs

STRIDED_SLICE = "nndct_strided_slice"
SELECT = "nndct_select"
INDEX = "nndct_index"
FILL = "aten::fill_"
# fx node meta of a getitem whose leading full slices torch.jit does not record (``x[:, 0, 3:4]``: after
# ``aten::select(x, 1, 0)`` one ``aten::slice`` of dim 1, which capture writes ``[:, 3:4]``): the dims of its
# last items, one per traced ``aten::slice`` (``pipeline/fx/jit_index.py``)
SLICE_DIMS = "jit_slice_dims"

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


def _lower_slice(lo, node) -> dict:
    """dims, begin, end (:data:`INT_MAX` for an open end) and strides of ``x[a:b, ...]``, or of one piece
    of chunk/split (:func:`_piece_attrs`).

    Raises:
        XmodelUnsupported: an index that is not a slice."""
    fx_node = node.fx_node
    source = fx_node.args[0]
    shape = list(lo.values[node.inputs[0].fx_node].shape)
    if is_split(source) and source in lo.graph.fx_graph.nodes:  # a piece of chunk/split
        return _piece_attrs(lo, node, source, shape)
    index = fx_node.args[1]
    index = index if isinstance(index, tuple) else (index,)
    dims, begin, end, strides = [], [], [], []
    for dim, item in _slice_dims(index, len(shape), fx_node.meta.get(SLICE_DIMS)):
        if not isinstance(item, slice):
            raise lo.unsupported(node, mixed_index_reason(index, item, len(shape)))
        start, stop, step = (lo.value(item.start), lo.value(item.stop), lo.value(item.step))
        dims.append(dim)
        begin.append(0 if start is None else int(start))
        end.append(INT_MAX if stop is None else min(int(stop), INT_MAX))
        strides.append(1 if step is None else int(step))
    return {"dims": dims, "begin": begin, "end": end, "strides": strides}


def _slice_dims(index: tuple, rank: int, traced: Optional[List[int]] = None) -> list:
    """``(dim, item)`` for each item of ``index`` but an Ellipsis, ``dim`` the input dimension it indexes: an
    Ellipsis skips the dimensions it stands for, so the items after it index the last ones (torch's
    ``applySlicing``: one ``aten::slice`` per slice, on those dimensions). ``traced``: the getitem's
    :data:`SLICE_DIMS`, the dimensions of its last items where full slices lead it (only those are
    traced)."""
    if traced is not None:
        return list(zip(traced, index[len(index) - len(traced):]))
    if Ellipsis not in index:
        return list(enumerate(index))
    at = index.index(Ellipsis)
    after = index[at + 1:]
    return list(enumerate(index[:at])) + [(rank - len(after) + i, item) for i, item in enumerate(after)]


def _lower_select(lo, node) -> dict:
    """``dim`` and ``index`` as torch.jit records ``aten::select`` (``x[:, i]``, ``x[..., i]``: the dim
    ``pipeline/fx/jit_index.py`` gives, never negative; ``torch.select(x, -1, i)``: as written), which
    nndct's ``TorchSelect`` keeps as its attributes (``op_dispatcher.py`` ``select``). A lone ``x[i]`` (a
    getitem, which torch.jit records as ``aten::select(x, 0, i)``) selects from dimension 0, the batch
    dimension included: the real quantizer writes ``y[0]`` as ``nndct_select`` {dim 0, index 0}."""
    a = lo.call_args(node)
    if node.fx_node.target is operator.getitem:  # bound as (input, dim): the int is the index
        return {"dim": 0, "index": int(a["dim"])}
    return {"dim": int(a["dim"]), "index": int(a["index"])}


def _create_select(w, node) -> None:
    """The custom op ``nndct_select`` {dim, index} (``TorchSelect`` is a ``CustomOp``: ``custom_xop``), on the
    input in the model's layout (a custom op passes no layout: the layout pass puts a sink transpose before
    it, docs/xmodel.md#layout)."""
    w.custom(node, {"dim": node.attrs["dim"], "index": node.attrs["index"]})


def select_kernel(op, xs):
    """The interpreter's kernel of the custom op ``nndct_select``: ``torch.select(x, dim, index)`` on its one
    input, which the file holds in the model's layout (a sink transpose before it); ``(op, list of input
    tensors) -> tensor``, the form of ``xir/interp_ops.py``'s built-in custom kernels.

    Raises:
        IndexError: ``dim`` or ``index`` out of the input's range (torch's own error)."""
    return torch.select(xs[0], int(op.attr("dim")), int(op.attr("index")))


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


def _rewrite_slice(node, order) -> None:
    """begin, end and strides moved with the layout ``order`` (a dim not sliced: None, stride 1), and the
    begin and end masks set from them (``attr_transform.py``)."""
    order = list(order)
    for key in ("begin", "end", "strides"):
        old = node.attrs[key]
        new = [1 if key == "strides" else None] * len(old)
        for dim, value in enumerate(old):
            new[order.index(dim)] = value
        node.attrs[key] = new
    node.attrs["begin_mask"] = sum(1 << d for d, v in enumerate(node.attrs["begin"]) if v == 0)
    node.attrs["end_mask"] = sum(1 << d for d, v in enumerate(node.attrs["end"])
                                 if isinstance(v, int) and v >= INT_MAX)


def _create_slice(w, node) -> None:
    """XIR ``strided_slice``: nndct's StridedSlice carries all five TensorFlow masks; it never sets the
    last three (``xop_creator.py`` ``strided_slice``)."""
    a = node.attrs
    w.fixed_op(node.name, "strided_slice", {"begin": a["begin"], "end": a["end"], "strides": a["strides"],
                                            "begin_mask": a["begin_mask"], "end_mask": a["end_mask"],
                                            "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0},
               {"input": w.data_inputs(node)})


def strided_dense(op, dims):
    """``validate_strided_slice``: TensorFlow's sparse slice spec (begin, end, strides and the five
    masks) made dense over the input's dims, with begin and end clamped into them. Returns the dense
    begin, end, strides and the output dims."""
    n = len(dims)
    begin, end, strides = (list(attr(op, key, "int32_vec")) for key in ("begin", "end", "strides"))
    if not len(begin) == len(end) == len(strides) == n:
        raise unsupported(op, "begin, end and strides need one value per input dim")
    masks = {key: attr(op, key, "int32") if key in op.attrs else 0
             for key in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
    ellipsis, new_axis = masks["ellipsis_mask"], masks["new_axis_mask"]
    if ellipsis & (ellipsis - 1):
        raise unsupported(op, "more than one ellipsis")
    seen, extra = False, 0
    for i in range(n):
        extra += seen and bool(new_axis >> i & 1)
        seen = seen or bool(ellipsis >> i & 1)
    sparse = n if seen else n + 1
    ellipsis = ellipsis if seen else ellipsis | 1 << n
    d_begin, d_end, d_strides = [0] * n, [0] * n, [0] * n
    begin_mask = end_mask = shrink_mask = 0
    gather = []  # dense index, -1 for a shrunk dim, -2 for a new axis
    full = 0
    for i in range(sparse):
        if ellipsis >> i & 1:
            while full < min(n - (sparse - i) + 1 + extra, n):
                d_strides[full] = 1
                begin_mask, end_mask = begin_mask | 1 << full, end_mask | 1 << full
                gather.append(full)
                full += 1
        elif new_axis >> i & 1:
            gather.append(-2)
        else:
            if full == n:
                raise unsupported(op, "the slice spec indexes more dims than input %s has" % dims)
            d_begin[full], d_end[full], d_strides[full] = begin[i], end[i], strides[i]
            begin_mask |= (masks["begin_mask"] >> i & 1) << full
            end_mask |= (masks["end_mask"] >> i & 1) << full
            shrink_mask |= (masks["shrink_axis_mask"] >> i & 1) << full
            gather.append(-1 if masks["shrink_axis_mask"] >> i & 1 else full)
            full += 1
    sizes = [_slice_size(op, i, dims[i], d_begin, d_end, d_strides[i], begin_mask, end_mask, shrink_mask)
             for i in range(n)]
    return d_begin, d_end, d_strides, [sizes[g] if g >= 0 else 1 for g in gather if g != -1]


def _slice_size(op, i, dim, begin, end, stride, begin_mask, end_mask, shrink_mask):
    """Dim ``i`` of a strided slice; canonicalizes ``begin[i]`` and ``end[i]`` in place."""
    if stride == 0:
        raise fail(op, "strides[%d] is zero" % i)
    if shrink_mask >> i & 1:
        b = begin[i] + dim if begin[i] < 0 else begin[i]
        if stride < 0 or not 0 <= b < dim:
            raise unsupported(op, "shrunk dim %d at %d of %d, stride %d" % (i, begin[i], dim, stride))
        begin[i], end[i] = b, b + 1
    else:
        low, high = (0, dim) if stride > 0 else (-1, dim - 1)
        for values, masked, which in ((begin, begin_mask >> i & 1, 0), (end, end_mask >> i & 1, 1)):
            x = values[i] + dim if values[i] < 0 else values[i]
            values[i] = ((low, high)[which if stride > 0 else 1 - which] if masked
                         else min(max(x, low), high))
    length = end[i] - begin[i]
    return 0 if length == 0 or (length < 0) != (stride < 0) else -(-abs(length) // abs(stride))


def _shape_strided_slice(op):
    """The slice's dims ([1] when every dim is shrunk); an input ``shape_info`` is sliced along
    (``forward_strided_slice``, reproduced with its flat-index arithmetic)."""
    dims = list(op_input(op).shape)
    begin, end, strides, out = strided_dense(op, dims)
    info = last_shape_info(op)
    if not info:
        return out or [1], {}
    count = math.prod(dims)
    if len(info) < count:
        raise unsupported(op, "shape_info %s shorter than input %s" % (info, dims))
    steps = [1]  # libxir's flat-index divisors: [prod(dims), prod(dims[1:]), ..., dims[-1], 1]
    if len(dims) > 1:
        for d in reversed(dims):
            steps.insert(0, steps[0] * d)
    kept = []
    for i in range(count):
        x, keep = i, True
        for j in range(len(dims)):
            q = x // steps[j]
            if q < begin[j] or q >= end[j] or abs(x - begin[j]) % strides[j]:
                keep = False
                break
            x %= steps[j]
        if keep:
            kept.append(info[i])
    return with_info(out or [1], kept)


def _run_strided_slice(run, op, ins):
    """TensorFlow's begin/end/strides and masks made dense as libxir does (:func:`strided_dense`);
    negative strides are not run."""
    x = one(ins)
    begin, end, strides, _ = strided_dense(op, list(x.shape))  # libxir's dense form
    if any(s < 0 for s in strides):
        raise run.error(op, "negative strides %s are not run" % (strides,))
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))].reshape(op.shape)


RECORD = OpRecord(
    family="slicing",
    specs={
        # group_up: joins the group of a parent it alone reads (nndct_shared/quantization/commander.py
        # SoftFuseStrideSlice; measured: refused_real/dead_split, the one piece of a split that is read)
        STRIDED_SLICE: OpSpec("layout", False, True, True),
        SELECT: OpSpec("float", False, False, False),
        INDEX: OpSpec("float", False, False, False),
    },
    functions={operator.getitem: STRIDED_SLICE, torch.select: SELECT},
    methods={"select": SELECT},
    signatures={SELECT: (("input", "dim", "index"), {})},
    approximation=Absent("moves no value"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/parse/op_dispatcher.py",
    onnx={STRIDED_SLICE: _onnx_getitem, SELECT: _onnx_select,
          INDEX: Absent("no call of the lowered model resolves to it (``x[t]`` is a getitem, whose form refuses "
                        "a tensor index)")},
    dpu_rule={STRIDED_SLICE: DpuRule(("getitem",), dpu_piece), SELECT: Absent("a float operator of the quantizer"),
              INDEX: Absent("a float operator of the quantizer"),
              # the calls that split a tensor (SPLIT_FUNCTIONS, SPLIT_METHODS): no nndct type; the
              # pieces run where the producer does
              "aten::chunk": DpuRule(("chunk",), dpu_piece), "aten::split": DpuRule(("split",), dpu_piece)},
    xmodel={STRIDED_SLICE: XmodelForm(_lower_slice, _create_slice, layout_rewrite=_rewrite_slice),
            SELECT: XmodelForm(_lower_select, _create_select),
            # the custom op on the table's float const and the index (nndct's custom_xop)
            INDEX: XmodelForm(no_attrs, custom, param_operands=True)},
    xir_ops={"strided_slice": XirOp(OpDef("strided_slice", IN, (req("begin", "int32_vec"), req("end", "int32_vec"),
                                                              req("strides", "int32_vec")), _shape_strided_slice),
                                    _run_strided_slice, "getitem")},
    # nndct_index: x[t], the rows of the table picked by the index (int64 values held as float32 in the run;
    # tests/data/refused_real/index_gather); nndct_select: the fallback where the caller gives no float_ops
    custom_kernels={INDEX: CustomKernel(lambda op, xs: xs[0][xs[1].to(torch.int64)], True),
                    SELECT: CustomKernel(select_kernel, False)},
    traced={STRIDED_SLICE: ("slice",), SELECT: ("select",), INDEX: ("index",)},
    refusals={},
    sim=dict.fromkeys((STRIDED_SLICE, SELECT, INDEX), TORCH),
)
