"""libxir's op definitions, restated for the op types the xmodel writer emits (``xgraph`` is the caller).

An op definition lists an op type's input arguments (with how many inputs each takes), its attributes
(kind, REQUIRED or OPTIONAL with a default) and its shape inference (``shapes``). libxir uses it when an
op is created: the Python wrapper casts each given attribute to the kind its definition declares, the
op gets the defaults of the OPTIONAL attributes left out, a missing REQUIRED attribute or a wrong
argument count aborts, and the output tensor's shape comes from the shape inference. A type XIR does not
define gets a definition made on the fly (one REPEATED argument ``input``, REQUIRED ``shape`` and
``data_type``, the shape of ``data``).

Restated (facts only: names, kinds, occurrences, defaults) from Vitis-AI 3.5, ``src/vai_runtime/xir``:
``src/xir/op/built_in_ops.cpp`` (the definitions), ``src/xir/op/op_imp.cpp`` (``OpImp::set_attrs``,
``op_arg_occur_check``, ``create_output_tensor_``), ``src/xir/util/tool_function.cpp``
(``register_customized_operator_definition``) and ``src/python/wrapper/wrapper.cpp`` (``add_op``,
``AttrHelper::set`` and ``set_hint``: how a Python attribute value becomes an attribute kind).
"""
import numbers
import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .. import ops
from ..ops.xir_support import (INS, OPTIONAL, REPEATED, REQUIRED, REQUIRED_AND_REPEATED, SOURCE_ATTRS, ArgDef,
                               AttrDef, OpDef, custom_def as _custom_def, opt as _opt, req as _req)
from . import shapes, shapes_layout

__all__ = ["REQUIRED", "OPTIONAL", "REPEATED", "REQUIRED_AND_REPEATED", "ArgDef", "AttrDef", "OpDef", "custom_def",
           "get", "typed_attrs", "check_args", "infer_shape"]

TypedAttrs = Dict[str, Tuple[str, Any]]

_IN = (ArgDef("input", REQUIRED),)
_SOURCE = SOURCE_ATTRS
_REDUCE = (_req("axis", "int32_vec"), _req("keep_dims", "bool"))
_ALPHA = (_opt("alpha", "float", 1.0),)

# The XIR format's own definitions: the types no op unit writes (the graph's sources and quantization,
# data, const, fix, which the writer itself makes, and the built-in types files from the real quantizer
# or elsewhere carry). A type a unit writes is defined by that unit (OpRecord.xir_ops); a type is in
# one place, never both (tests/project/test_op_records.py).
_FORMAT_DEFS = {d.type: d for d in [
    # sources
    OpDef("data", (), _SOURCE, shapes.source),
    OpDef("const", (), _SOURCE + (_req("data", "bytes"),), shapes.source),
    # broadcasting binary ops
    OpDef("min", INS, (), shapes.broadcast),
    OpDef("max", INS, (), shapes.broadcast),
    # activations and other element-wise ops
    OpDef("elu", _IN, _ALPHA, shapes.like_input),
    OpDef("celu", _IN, _ALPHA, shapes.like_input),
    OpDef("mish", _IN, (), shapes.like_input),
    OpDef("selu", _IN, (), shapes.like_input),
    OpDef("swish", _IN, (), shapes.like_input),
    OpDef("hard-swish", _IN, (), shapes.like_input),
    OpDef("hard-tanh", _IN, (), shapes.like_input),
    OpDef("exp", _IN, (), shapes.like_input),
    OpDef("l2_normalize", _IN, (_opt("axis", "int32_vec", []), _opt("epsilon", "double", 1e-12)), shapes.like_input),
    OpDef("fix", _IN, (_req("fix_point", "int32"), _req("bit_width", "int32"), _req("round_mode", "string"),
                       _req("if_signed", "bool")), shapes.like_input),
    OpDef("cast", _IN, (_req("data_type", "string"),), shapes.like_input),
    # reductions
    OpDef("reduction_mean", _IN, _REDUCE, shapes.reduction()),
    OpDef("reduction_sum", _IN, _REDUCE, shapes.reduction(sum)),
    OpDef("reduction_product", _IN, _REDUCE, shapes.reduction(lambda info: int(np.prod(info, dtype=np.int64)))),
    OpDef("argmax", _IN, (_req("axis", "int32"),), shapes.argmax),
    # layout
    OpDef("flatten", _IN, (_req("start_axis", "int32"), _req("end_axis", "int32")), shapes_layout.flatten),
    OpDef("squeeze", _IN, (_opt("axis", "int32_vec", []),), shapes_layout.squeeze),
    # shapes as data
    OpDef("shape", _IN, (), shapes.shape),
]}

# every definition: the format's own and the units' (read off the records)
_DEFS = dict(_FORMAT_DEFS)
_DEFS.update({type_: piece.definition for type_, piece in ops.XIR_OPS.items()})

# XIR 3.5's other built-in op types: defined there, so never custom, but not written here
_OTHER_BUILT_INS = frozenset("""
    data-fix const-fix random_standard_normal conv1d conv3d transposed-conv3d depthwise-conv3d
    transposed-depthwise-conv3d conv2d-fix depthwise-conv2d-fix transposed-conv2d-fix
    transposed-depthwise-conv2d-fix conv3d-fix depthwise-conv3d-fix transposed-conv3d-fix
    transposed-depthwise-conv3d-fix maxpool1d pool-fix hard-sigmoid-fix fix2float float2fix threshold
    reduction_max-fix argmax-fix identity upload download placeholder reshape-fix upsample-fix
    downsample-fix inner-product concat-fix reorg reorg-fix pixel-shuffle-fix hard-softmax pad-fix
    batchnorm instancenorm groupnorm strided_slice-fix priorbox gstiling tile-fix eltwise-fix
    depthwise-fix correlation2d_elemwise correlation2d_elemwise-fix correlation1d_elemwise
    correlation1d_elemwise-fix cost_volume cost_volume-fix""".split())


def custom_def(type_: str) -> OpDef:
    """The definition libxir makes for an op type it does not define (``aten::silu``, ``nndct_clamp``)."""
    return _custom_def(type_)


def get(type_: str) -> OpDef:
    """The definition of ``type_``: XIR's built-in one, or the custom one for a type XIR does not define.

    Raises:
        XGraphError: ``type_`` is a built-in type this writer does not cover.
    """
    if type_ in _DEFS:
        return _DEFS[type_]
    if type_ in _OTHER_BUILT_INS:
        raise shapes.error("op type %r is defined by XIR but not supported by this writer" % type_)
    return custom_def(type_)


# --- attributes --------------------------------------------------------------------------------------

def _is_int32(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and -2 ** 31 <= value < 2 ** 31


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real)


_SCALAR_CASTS = {  # kind -> (what pybind11 accepts for it, the value it stores)
    "bool": (_is_real, bool),
    "int32": (_is_int32, int),
    "float": (_is_real, lambda v: float(np.float32(v))),
    "double": (_is_real, float),
    "string": (lambda v: isinstance(v, str), str),
}


def _cast(kind: str, value: Any) -> Optional[Any]:
    """``value`` as ``set_hint`` stores it for an attribute declared ``kind``; None when it cannot."""
    if kind == "bytes":
        return value if isinstance(value, bytes) else None
    if kind.endswith("_vec"):
        if not isinstance(value, (list, tuple)):
            return None
        items = [_cast(kind[:-len("_vec")], v) for v in value]
        return None if any(i is None for i in items) else items
    accepts, convert = _SCALAR_CASTS[kind]
    return convert(value) if accepts(value) else None


_PYTHON_KINDS = ((bool, "bool"), (int, "int32"), (float, "double"), (str, "string"), (bytes, "bytes"))
_PYTHON_VEC_KINDS = ((int, "int32_vec"), (float, "double_vec"), (str, "string_vec"))


def _python_kind(value: Any) -> Optional[Tuple[str, Any]]:
    """``(kind, value)`` as ``AttrHelper::set`` stores an attribute its definition does not declare;
    None when it cannot. bool is tested before int; inside a list a bool counts as an int (pybind11's
    int check), so a list of bools becomes an int32_vec."""
    for type_, kind in _PYTHON_KINDS:
        if isinstance(value, type_):
            return (kind, type_(value)) if kind != "int32" or _is_int32(value) else None
    if isinstance(value, list) and value:
        for type_, kind in _PYTHON_VEC_KINDS:
            if all(isinstance(v, type_) for v in value):
                return (kind, [type_(v) for v in value]) if kind != "int32_vec" or all(map(_is_int32, value)) else None
    return None


def typed_attrs(definition: OpDef, op_name: str, attrs: Dict[str, Any]) -> TypedAttrs:
    """The attributes libxir stores for an op created with ``attrs`` (name -> Python value).

    A declared attribute is cast to its declared kind (an int given for a float becomes a float32-rounded
    float); an undeclared one takes the kind of its Python type; every OPTIONAL attribute left out gets
    its default.

    Returns:
        name -> ``(kind, value)``, values as plain Python values (lists for vectors, ``bytes``).

    Raises:
        XGraphError: a value that cannot be stored (as pybind11 would refuse it), or a REQUIRED
            attribute missing.
    """
    declared = {a.name: a for a in definition.attrs}
    out = {}  # type: TypedAttrs
    for name, value in attrs.items():
        if name in declared:
            typed = _cast(declared[name].kind, value)
            entry = None if typed is None else (declared[name].kind, typed)
        else:
            entry = _python_kind(value)
        if entry is None:
            raise shapes.error("op %r (%s): attribute %r: cannot store %r%s" % (
                op_name, definition.type, name, value,
                " as %s" % declared[name].kind if name in declared else ""))
        out[name] = entry
    for attr in definition.attrs:
        if attr.name not in out:
            if attr.required:
                raise shapes.error("op %r (%s): required attribute %r is not set"
                                   % (op_name, definition.type, attr.name))
            out[attr.name] = (attr.kind, list(attr.default) if isinstance(attr.default, list) else attr.default)
    return out


# --- arguments and shapes ----------------------------------------------------------------------------

_OCCURS = {
    REQUIRED: lambda n: n == 1,
    OPTIONAL: lambda n: n < 2,
    REPEATED: lambda n: True,
    REQUIRED_AND_REPEATED: lambda n: n > 0,
}


def check_args(definition: OpDef, op_name: str, inputs: Dict[str, List[Any]]) -> None:
    """Check the input ops per argument against the definition (``op_arg_occur_check``).

    Raises:
        XGraphError: an argument takes a count of inputs its occurrence forbids (REQUIRED: exactly 1,
            OPTIONAL: at most 1, REQUIRED_AND_REPEATED: at least 1), or the definition has no such argument.
    """
    for arg in definition.args:
        count = len(inputs.get(arg.name, []))
        if not _OCCURS[arg.occur](count):
            raise shapes.error("op %r (%s): argument %r is %s but has %d inputs" % (
                op_name, definition.type, arg.name, arg.occur.upper(), count))
    known = {arg.name for arg in definition.args}
    for name in inputs:
        if name not in known:
            raise shapes.error("op %r (%s): the type has no argument %r (it has: %s)" % (
                op_name, definition.type, name, ", ".join(sorted(known)) or "none"))


_FLOAT32 = re.compile(r"(FLOAT|float)0*32")  # how xir::DataType parses a float32 type name


def infer_shape(definition: OpDef, op: Any) -> Tuple[List[int], TypedAttrs]:
    """The output tensor's dims and tensor attributes, as libxir's shape inference leaves them.

    ``op`` (an ``xgraph.XOp``) has typed attributes and inputs that carry their own shapes, tensor
    attributes and (for consts) data.

    Raises:
        XGraphError: libxir would abort, or the output would not be a float32 tensor (the only data
            type this writer writes), or the case is one this writer does not reproduce.
    """
    if op.type == "cast" or not op.inputs.get("input"):  # the output takes its data type from data_type
        data_type = op.attr("data_type")
        if not isinstance(data_type, str):
            raise shapes.fail(op, "has no input and no data_type to take its output data type from")
        if not _FLOAT32.fullmatch(data_type):
            raise shapes.unsupported(op, "output data type %r (only float32 is written)" % (data_type,))
    dims, tensor_attrs = definition.shape(op)
    if any(d < 0 for d in dims):
        raise shapes.fail(op, "inferred a negative dim: %s" % dims)
    return [int(d) for d in dims], tensor_attrs
