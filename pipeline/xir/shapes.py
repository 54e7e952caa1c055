"""Shape inference of XIR ops, restated from libxir for the xmodel writer (``opdefs`` is its caller).

Every function takes an op (``xgraph.XOp``) whose attributes are already typed and defaulted and whose
inputs carry their output dims and tensor attributes, and returns ``(dims, tensor_attrs)``: the op's
output dims and the tensor attributes (``{"shape_info": ("int32_vec", [...])}`` or ``{}``) that libxir's
shape inference leaves on the output tensor. Where libxir would abort (a failed ``UNI_LOG_CHECK``, a
thrown ``at()``), the function raises ``errors.XGraphError`` naming the op; where libxir's result rests on
undefined behaviour or on a logged-and-ignored error, it raises ``XGraphError`` saying the case is not
supported by this writer.

This module holds the common checks and helpers, the sources and element-wise ops and the
shape-carrying ops; ``shapes_conv`` the convolutions and pools, ``shapes_layout`` the layout ops.

Restated (facts only: names, formulas, checks) from Vitis-AI 3.5, ``src/vai_runtime/xir``:
``src/xir/op/shape_inference.cpp`` (the ``shape_infer_*`` and ``forward_*`` functions),
``src/xir/util/tool_function.cpp`` (``validate_strided_slice``, ``get_float_vec_from_any``) and the
constraints of ``src/xir/op/built_in_ops.cpp`` that run right after shape inference.

What libxir does that matters here:

- a new output tensor starts with no attributes; only ``shape_info`` is ever set on it;
- "all inputs" means every input op, argument by argument in argument-name order (``std::map``), as
  ``XOp.input_list()`` lists them; an op's input count is that list's length (the vertex's in-degree);
- a const's ``data`` is read as its output tensor's data type (float32 here) and each value is
  converted to int32 by truncation toward zero (``read_data_in_attr<int32_t>``).
"""
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import XGraphError

SHAPE_INFO = "shape_info"
Result = Tuple[List[int], Dict[str, Tuple[str, Any]]]


def error(message: str) -> Exception:
    """An ``errors.XGraphError`` with ``message``."""
    return XGraphError(message)


def fail(op: Any, text: str) -> Exception:
    """The error libxir's failed check on ``op`` stands for."""
    return error("op %r (%s): %s" % (op.name, op.type, text))


def unsupported(op: Any, text: str) -> Exception:
    """The error for a case whose libxir result this writer does not reproduce."""
    return fail(op, text + ": not supported by this writer")


def op_input(op: Any, arg: str = "input", index: int = 0) -> Any:
    """Input ``index`` of argument ``arg`` (an op); raises :func:`fail` when there is none."""
    ops = op.inputs.get(arg, [])
    if index >= len(ops):
        raise fail(op, "has no input %s[%d]" % (arg, index))
    return ops[index]


def attr(op: Any, name: str, kind: str) -> Any:
    """Attribute ``name``, which libxir reads as ``kind`` (a missing one or one of another kind aborts)."""
    if op.attrs.get(name, (None,))[0] != kind:
        raise fail(op, "needs attribute %r of kind %s" % (name, kind))
    return op.attrs[name][1]


def vec(op: Any, name: str, size: int) -> List[int]:
    """The ``int32_vec`` attribute ``name`` as a list of ``size`` ints; raises :func:`fail` otherwise."""
    value = attr(op, name, "int32_vec")
    if len(value) != size:
        raise fail(op, "attribute %r must have %d values, got %s" % (name, size, value))
    return list(value)


def shape_info(source: Any) -> Optional[List[int]]:
    """``source``'s ``shape_info`` tensor attribute as a list, None when it has none."""
    entry = source.tensor_attrs.get(SHAPE_INFO)
    return None if entry is None else list(entry[1])


def last_shape_info(op: Any) -> Optional[List[int]]:
    """The ``shape_info`` of the last input (over all arguments) that has one."""
    infos = [shape_info(s) for s in op.input_list() if SHAPE_INFO in s.tensor_attrs]
    return infos[-1] if infos else None


def with_info(dims: Sequence[int], info: Optional[Sequence[int]]) -> Result:
    """The result ``(dims, tensor attributes)``: ``shape_info`` set to ``info`` unless it is None."""
    return list(dims), ({} if info is None else {SHAPE_INFO: ("int32_vec", [int(v) for v in info])})


def const_ints(op: Any, source: Any) -> List[int]:
    """``source``'s ``data`` attribute as libxir reads it into int32 values (see the module docstring)."""
    if source.attrs.get("data", (None,))[0] != "bytes":
        raise fail(op, "input %r has no data to read" % source.name)
    count = math.prod(source.shape)
    raw = source.attrs["data"][1]
    if len(raw) < 4 * count:
        raise unsupported(op, "input %r holds %d bytes for %d float32 values" % (source.name, len(raw), count))
    values = np.frombuffer(raw, dtype="<f4", count=count).astype(np.float64)
    if not np.all(np.abs(values) < 2.0 ** 31):
        raise unsupported(op, "input %r has values outside int32" % source.name)
    return [int(v) for v in values]


def cdiv(a: int, b: int) -> int:
    """C++ integer division (truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def broadcast_dims(a: Sequence[int], b: Sequence[int]) -> Optional[List[int]]:
    """``size_broadcast``: numpy-style broadcast of two shapes, None when they do not match."""
    long_, short = (list(a), list(b)) if len(a) > len(b) else (list(b), list(a))
    if long_ == short or not short:
        return long_
    out = list(long_)
    for k in range(1, len(short) + 1):
        x, y = long_[-k], short[-k]
        if x == 1:
            out[-k] = y
        elif y != 1 and x != y:
            return None
    return out


# --- sources and element-wise ops ------------------------------------------------------------------

def source(op: Any) -> Result:
    """``data``, ``const`` and custom op types: the ``shape`` attribute, non-empty and positive."""
    dims = attr(op, "shape", "int32_vec")
    if not dims or any(d <= 0 for d in dims):
        raise fail(op, "attribute shape %s must be non-empty and positive" % (dims,))
    return list(dims), {}


def like_input(op: Any) -> Result:
    """``shape_infer_remain``: the dims of ``input[0]``; ``shape_info`` of the last input that has one."""
    return with_info(op_input(op).shape, last_shape_info(op))


def broadcast(op: Any) -> Result:
    """add, sub, min, max (and the first step of mul, div): the inputs' shapes broadcast together."""
    ins = op.input_list()
    if len(ins) < 2:
        raise fail(op, "needs at least 2 inputs, got %d" % len(ins))
    dims = list(ins[0].shape)
    for other in ins[1:]:
        merged = broadcast_dims(dims, other.shape)
        if merged is None:
            raise fail(op, "input shapes %s and %s do not broadcast" % (dims, list(other.shape)))
        dims = merged
    return dims, {}


def mul(op: Any) -> Result:
    """Broadcast; when ``input[0]`` has ``shape_info``, the element-wise product of it and the data of
    the last const input (an empty ``shape_info`` when their lengths differ)."""
    dims, _ = broadcast(op)
    info = shape_info(op_input(op))
    if info is None:
        return dims, {}
    factors = []  # type: List[int]
    for src in op.input_list():
        if "data" in src.attrs:
            factors = const_ints(op, src)
    return with_info(dims, [a * b for a, b in zip(info, factors)] if len(info) == len(factors) else [])


def div(op: Any) -> Result:
    """Broadcast; when ``input[0]`` has ``shape_info``, it divided (C++ integer division) by the data of
    ``input[1]``, one value for all or one per entry."""
    dims, _ = broadcast(op)
    info = shape_info(op_input(op))
    if info is None:
        return dims, {}
    base = const_ints(op, op_input(op, "input", 1))
    if len(base) == 1:
        base = base * len(info)
    elif len(base) != len(info):
        raise fail(op, "shape_info %s and divisor %s differ in length" % (info, base))
    if 0 in base:
        raise unsupported(op, "shape_info divided by zero")
    return with_info(dims, [cdiv(a, b) for a, b in zip(info, base)])


# --- shape-carrying ops ----------------------------------------------------------------------------

def shape(op: Any) -> Result:
    """[rank of the input], with the input's dims as ``shape_info``."""
    dims = list(op_input(op).shape)
    return with_info([len(dims)], dims)


def stack(op: Any) -> Result:
    """``input[0]``'s dims with the input count inserted at ``axis``; ``shape_info``: the inputs'
    ``shape_info`` or const data, concatenated in input order."""
    dims, axis = list(op_input(op).shape), attr(op, "axis", "int32")
    if not 0 <= axis <= len(dims):
        raise unsupported(op, "axis %d for input %s" % (axis, dims))
    info = []  # type: List[int]
    for src in op.input_list():
        own = shape_info(src)
        info += own if own is not None else const_ints(op, src)
    return with_info(dims[:axis] + [len(op.input_list())] + dims[axis:], info)


def matmul(op: Any) -> Result:
    """Batched matmul of exactly two inputs ([..., a, b] x [..., b, c] -> [..., a, c], batch dims
    broadcast, each input's last two dims swapped when transposed); a bias must be [c]."""
    ins = op.inputs.get("input", [])
    if len(ins) != 2:
        raise fail(op, "needs exactly 2 inputs, got %d" % len(ins))
    a, b = list(ins[0].shape), list(ins[1].shape)
    if len(a) < 2 or len(b) < 2:
        raise fail(op, "inputs %s and %s must be at least 2-d" % (a, b))
    if attr(op, "transpose_a", "bool"):
        a[-2], a[-1] = a[-1], a[-2]
    if attr(op, "transpose_b", "bool"):
        b[-2], b[-1] = b[-1], b[-2]
    for bias in op.inputs.get("bias", []):
        if list(bias.shape) != [b[-1]]:
            raise fail(op, "bias shape %s does not match [%d]" % (list(bias.shape), b[-1]))
    batch = broadcast_dims(a[:-2], b[:-2])
    if batch is None or a[-1] != b[-2]:
        raise fail(op, "input shapes %s and %s do not multiply" % (a, b))
    return batch + [a[-2], b[-1]], {}


def argmax(op: Any) -> Result:
    """The input's dims with ``axis`` set to 1."""
    dims, axis = list(op_input(op).shape), attr(op, "axis", "int32")
    axis = axis + len(dims) if axis < 0 else axis
    if not 0 <= axis < len(dims):
        raise unsupported(op, "axis %d of input %s" % (axis, dims))
    dims[axis] = 1
    return dims, {}


def _reduced(op: Any) -> List[int]:
    dims, axes = list(op_input(op).shape), attr(op, "axis", "int32_vec")
    if any(not -len(dims) <= a < len(dims) for a in axes):
        raise fail(op, "axis %s out of range for input %s" % (axes, dims))
    marked = {a % len(dims) for a in axes}
    keep = attr(op, "keep_dims", "bool")
    return [1 if i in marked else d for i, d in enumerate(dims) if keep or i not in marked]


def reduction(fold: Optional[Callable[[List[int]], int]] = None) -> Callable[[Any], Result]:
    """Shape inference of a reduction: the ``axis`` dims removed (kept as 1 with ``keep_dims``); with
    ``fold``, an input ``shape_info`` becomes ``[fold(shape_info)]`` (axis must be one dim or start at 0)."""
    def infer(op: Any) -> Result:
        dims, info = _reduced(op), shape_info(op_input(op))
        if fold is None or info is None:
            return dims, {}
        axes = attr(op, "axis", "int32_vec")
        if not axes or len(axes) != 1 and axes[0] != 0:
            raise fail(op, "axis %s cannot fold shape_info %s" % (axes, info))
        return with_info(dims, [fold(info)])
    return infer
