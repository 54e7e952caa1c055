"""The XIR pieces of an op record (:class:`XirOp`: an XIR op type's definition, shape inference and
interpreter kernel) and the vocabulary and pure helpers the units build them from. A support module: it
defines no RECORD. The XIR format's room (``pipeline/xir/``) imports these; they import nothing of it.

Definitions (libxir's ``src/xir/op/built_in_ops.cpp``, Vitis-AI 3.5): an op type's input arguments
(:class:`ArgDef`, with how many inputs each takes), its attributes (:class:`AttrDef`: kind, REQUIRED or
OPTIONAL with a default) and its shape inference, together an :class:`OpDef` (``xir/opdefs.py`` says how
libxir uses it).

Shape inference (``src/xir/op/shape_inference.cpp``): ``shape(op) -> (dims, tensor_attrs)``, given an
``xgraph.XOp`` whose attributes are typed and defaulted and whose inputs carry their dims, tensor
attributes and (consts) data; ``tensor_attrs`` is ``{"shape_info": ("int32_vec", [...])}`` or ``{}``.
Where libxir would abort it raises :class:`XGraphError` naming the op (:func:`fail`); where libxir's
result rests on undefined behaviour, :func:`unsupported`. ``xir/shapes.py``'s docstring says what of
libxir matters (the input order of ``op.input_list()``, a const's data read as int32 by truncation).

Kernels: ``kernel(run, op, ins) -> tensor``, given the interpreter's run (``xir/interp_base.Run``: its
``values``, ``nchw(op, x)``, ``checked(op, y)``, ``error(op, text)``, ``model_layout(x)``,
``in_model_layout(x, axes, fn)``), the op and its input values by argument (float32 tensors in the
file's dims, a 4-D feature map NHWC, often a view of NCHW memory: ``xir/interp.py``).
"""
import math
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F


class XGraphError(ValueError):
    """An op cannot be added as asked (libxir would abort with XIR_MULTI_DEFINED_OP and the like)."""


REQUIRED, OPTIONAL, REPEATED, REQUIRED_AND_REPEATED = "required", "optional", "repeated", "required_and_repeated"

ArgDef = namedtuple("ArgDef", "name occur")
ArgDef.__doc__ = "An input argument: its name and occurrence (REQUIRED, OPTIONAL, REPEATED, REQUIRED_AND_REPEATED)."
AttrDef = namedtuple("AttrDef", "name kind required default")
AttrDef.__doc__ = ("An attribute: its name, kind (a key of schema.KIND_FIELDS), whether it is REQUIRED, and the "
                   "value an OPTIONAL one gets when left out (None for a REQUIRED one).")
OpDef = namedtuple("OpDef", "type args attrs shape")
OpDef.__doc__ = ("An op type's definition: arguments and attributes in the definition's order, and its shape "
                 "inference (op -> (dims, tensor attributes)).")

Result = Tuple[List[int], Dict[str, Tuple[str, Any]]]
Inputs = Dict[str, List[torch.Tensor]]
Kernel = Callable[[Any, Any, Inputs], torch.Tensor]  # (run, op, inputs) -> the op's output


@dataclass(frozen=True)
class XirOp:
    """One XIR op type a unit writes (``OpRecord.xir_ops``): its definition (with its shape inference,
    ``definition.shape``), its interpreter kernel, and the op name the DPU inspector's rules know it by
    (``inspect/xmodel_dpu.py``: ``conv_transpose2d``, ``getitem``, ...), with ``inspected_attrs(op) -> dict``:
    the attributes of the XIR op its rule reads that the inspector does not already give (None: none)."""
    definition: OpDef
    kernel: Kernel
    inspected_as: str
    inspected_attrs: Optional[Callable[[Any], Dict[str, Any]]] = None


CustomFn = Callable[[Any, List[torch.Tensor]], torch.Tensor]  # (op, input values in order) -> the op's output


@dataclass(frozen=True)
class CustomKernel:
    """The interpreter's kernel of a custom op type a unit writes (``OpRecord.custom_kernels``: a type XIR
    does not define, whose file carries only its output ``shape``, ``data_type`` and the attributes nndct's
    ``custom_xop`` gives it).

    Attributes:
        fn: ``fn(op, xs) -> tensor``: the output from the op (its attributes, its output dims ``op.shape``)
            and its input values in argument order (float32 tensors in the file's dims).
        complete: the file says all the op computes (its attributes and inputs determine it: a size read, an
            expand to the output dims, an NHWC pool to the output size), so the interpreter runs ``fn`` before
            any caller's ``float_ops`` and the writer's verification asks the simulation for no call of it;
            False: ``fn`` is the interpreter's fallback where the caller gives no ``float_ops`` entry for the
            op (``aten::mean`` guesses its dims from the output's).
    """
    fn: CustomFn
    complete: bool


def req(name: str, kind: str) -> AttrDef:
    """A REQUIRED attribute."""
    return AttrDef(name, kind, True, None)


def opt(name: str, kind: str, default: Any) -> AttrDef:
    """An OPTIONAL attribute and the value it gets when left out."""
    return AttrDef(name, kind, False, default)


IN = (ArgDef("input", REQUIRED),)
INS = (ArgDef("input", REQUIRED_AND_REPEATED),)
TO_NCHW = (0, 3, 1, 2)
TO_NHWC = (0, 2, 3, 1)
SHAPE_INFO = "shape_info"


# --- shape inference helpers ------------------------------------------------------------------------

def error(message: str) -> Exception:
    """An :class:`XGraphError` with ``message``."""
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
    """``source``'s ``data`` attribute as libxir reads it into int32 values (float32 truncated toward zero)."""
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


def source(op: Any) -> Result:
    """``data``, ``const`` and custom op types: the ``shape`` attribute, non-empty and positive."""
    dims = attr(op, "shape", "int32_vec")
    if not dims or any(d <= 0 for d in dims):
        raise fail(op, "attribute shape %s must be non-empty and positive" % (dims,))
    return list(dims), {}


SOURCE_ATTRS = (req("shape", "int32_vec"), req("data_type", "string"))


def custom_def(type_: str) -> OpDef:
    """The definition libxir makes for an op type it does not define (``aten::silu``, ``nndct_clamp``): one
    REPEATED argument ``input``, REQUIRED ``shape`` and ``data_type``, the shape of ``data``
    (``tool_function.cpp``, ``register_customized_operator_definition``). A unit that writes such a type
    and runs it itself (an :class:`XirOp` for it: a custom op the file holds in NHWC, which the model's
    NCHW call cannot run) gives this definition, so the type stays custom for the format."""
    return OpDef(type_, (ArgDef("input", REPEATED),), SOURCE_ATTRS, source)


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


_WINDOW = {  # output size from n = in + pad_lo + pad_hi, span = (kernel - 1) * dilation + 1, stride s
    "FLOOR": lambda n, span, s: (n - span + s) // s,
    "CEIL": lambda n, span, s: -((span - n - s) // s),
    "SAME": lambda n, span, s: -(-n // s),
    "VALID": lambda n, span, s: -((span - 1 - n) // s),
}


def window_size(op: Any, n: int, kernel: int, stride: int, dilation: int) -> int:
    """``cal_out_1d``: the output length of a window over ``n`` (the padded input length) under the op's
    ``pad_mode``."""
    mode = attr(op, "pad_mode", "string")
    if mode not in _WINDOW:
        raise fail(op, "pad_mode %r is none of FLOOR, CEIL, SAME, VALID" % mode)
    if stride <= 0:
        raise unsupported(op, "stride %d" % stride)
    return _WINDOW[mode](n, (kernel - 1) * dilation + 1, stride)


def nhwc_dims(op: Any) -> List[int]:
    """``input[0]``'s dims, which must be 4-d (NHWC)."""
    dims = list(op_input(op).shape)
    if len(dims) != 4:
        raise unsupported(op, "input %s is not 4-d (NHWC)" % dims)
    return dims


def window_dims(op: Any, dims: List[int], kernel: List[int], stride: List[int], dilation: List[int]) -> List[int]:
    """``cal_out``: [oh, ow]; ``pad`` is [left, right, top, bottom], kernel/stride/dilation are [w, h]."""
    mode = attr(op, "pad_mode", "string")
    if mode not in _WINDOW:
        raise fail(op, "pad_mode %r is none of FLOOR, CEIL, SAME, VALID" % mode)
    if 0 in stride:
        raise unsupported(op, "stride 0")
    pad = vec(op, "pad", 4)
    h = _WINDOW[mode](dims[1] + pad[2] + pad[3], (kernel[1] - 1) * dilation[1] + 1, stride[1])
    w = _WINDOW[mode](dims[2] + pad[0] + pad[1], (kernel[0] - 1) * dilation[0] + 1, stride[0])
    return [h, w]


# --- kernel helpers ---------------------------------------------------------------------------------

def one(ins: Inputs, arg: str = "input") -> torch.Tensor:
    """The first input of argument ``arg``."""
    return ins[arg][0]


def optional(ins: Inputs, arg: str) -> Optional[torch.Tensor]:
    """The input of an OPTIONAL argument, None when the op has none."""
    return ins[arg][0] if ins.get(arg) else None


def window(op: Any) -> Tuple[Tuple[int, int], Tuple[int, int], Tuple[int, int], List[int]]:
    """(kernel, stride, dilation) as torch's (h, w) pairs, and pad [left, right, top, bottom]."""
    kw, kh = op.attr("kernel")
    sw, sh = op.attr("stride")
    dw, dh = op.attr("dilation", [1, 1])
    return (kh, kw), (sh, sw), (dh, dw), list(op.attr("pad", [0, 0, 0, 0]))


def padded(x: torch.Tensor, pad: List[int], value: float = 0.0) -> Tuple[torch.Tensor, Tuple[int, int]]:
    """``x`` and torch's symmetric ``padding``; an asymmetric pad is applied explicitly first."""
    left, right, top, bottom = pad
    if left == right and top == bottom:
        return x, (top, left)
    return F.pad(x, (left, right, top, bottom), value=value), (0, 0)


def unary(fn: Callable[..., torch.Tensor], *attrs: str) -> Kernel:
    """The kernel ``fn(input, *attributes attrs)``."""
    def apply(run: Any, op: Any, ins: Inputs) -> torch.Tensor:
        return fn(one(ins), *[op.attr(a) for a in attrs])
    return apply


def fold(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Kernel:
    """The kernel ``fn`` folded left over the inputs (torch's broadcasting binary ops)."""
    def apply(run: Any, op: Any, ins: Inputs) -> torch.Tensor:
        xs = ins["input"]
        out = xs[0]
        for other in xs[1:]:
            out = fn(out, other)
        return out
    return apply
