"""Shape inference of XIR ops, restated from libxir for the xmodel writer (``opdefs`` is its caller).

Every function takes an op (``xgraph.XOp``) whose attributes are already typed and defaulted and whose
inputs carry their output dims and tensor attributes, and returns ``(dims, tensor_attrs)``: the op's
output dims and the tensor attributes (``{"shape_info": ("int32_vec", [...])}`` or ``{}``) that libxir's
shape inference leaves on the output tensor. Where libxir would abort (a failed ``UNI_LOG_CHECK``, a
thrown ``at()``), the function raises ``errors.XGraphError`` naming the op; where libxir's result rests on
undefined behaviour or on a logged-and-ignored error, it raises ``XGraphError`` saying the case is not
supported by this writer.

This module holds the shape inference of the XIR types no op unit writes (the XIR format's own:
sources, shape, argmax, reductions; ``shapes_layout`` flatten, squeeze). The shape
inference of a type a unit writes is in that unit (``OpRecord.xir_ops``, ``pipeline/ops/``), and the
common checks and helpers are in ``pipeline/ops/xir_support.py`` (imported here under their old names).

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
from typing import Any, Callable, List, Optional

# the common checks and helpers: with the vocabulary the op units build their XIR pieces from
from ..ops.xir_support import (SHAPE_INFO, Result, attr, broadcast, broadcast_dims, cdiv, const_ints, error, fail,
                               last_shape_info, like_input, op_input, shape_info, source, unsupported, vec, with_info)

__all__ = ["SHAPE_INFO", "Result", "attr", "broadcast", "broadcast_dims", "cdiv", "const_ints", "error", "fail",
           "last_shape_info", "like_input", "op_input", "shape_info", "unsupported", "vec", "with_info",
           "source", "shape", "argmax", "reduction"]


# --- sources: ``source`` (data, const and custom op types) is xir_support's, with ``custom_def`` -------------

# --- shape-carrying ops ----------------------------------------------------------------------------

def shape(op: Any) -> Result:
    """[rank of the input], with the input's dims as ``shape_info``."""
    dims = list(op_input(op).shape)
    return with_info([len(dims)], dims)


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
