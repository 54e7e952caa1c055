"""The xmodel interpreter's op table: what each XIR op type computes, as torch calls on the
simulation's memory layout (``interp.run`` walks the graph and calls them).

The table ``OPS`` is read off the op records for the types the op units write (each unit's
``OpRecord.xir_ops``: the kernel is in the unit under ``pipeline/ops/``, given the run, the op and its
inputs at call time), and holds here only the kernels of the XIR types no unit writes (the format's
own: ``const``, ``fix``, ``elu``, the reductions, ...). The semantics of both, per type:

Semantics per op type (``OPS``; XIR's definitions, restated where the simulation differs):

- ``data``: the caller's input (see ``interp.run``); ``const``: its ``data`` as float32 of its ``shape``;
- ``fix``: ``fixpoint.fake_quant(x, fix_point, bit_width, "half_up")`` for DPU_ROUND (signed),
  ``"std_round"`` for STD_ROUND, ties to even for PY3_ROUND; unsigned: codes clamped to
  ``[0, 2**bit_width - 1]``;
- ``conv2d``/``depthwise-conv2d``: ``F.conv2d`` on NCHW, weights OHWI -> OIHW (depthwise: the file's
  ``(multiplier, kh, kw, C)`` is torch's ``(C * multiplier, 1, kh, kw)`` with out channel
  ``m * C + c``, nndct's reshape); ``transposed-conv2d``/``transposed-depthwise-conv2d``: the H/W flip
  undone, ``(out/groups, kh, kw, in)`` -> torch's ``(in, out/groups, kh, kw)``, ``F.conv_transpose2d``
  with ``output_padding = pad_top - pad_bottom, pad_left - pad_right``. Attributes: kernel, stride,
  dilation ``[w, h]``; pad ``[left, right, top, bottom]`` (asymmetric: padded explicitly first);
- ``maxpool2d``/``avgpool2d``: ``F.max_pool2d``/``F.avg_pool2d`` (``ceil_mode`` from pad_mode CEIL,
  ``count_include_pad``); ``global``: ``F.adaptive_avg_pool2d(x, 1)`` (the simulation's
  AdaptiveAvgPool2d) / ``F.adaptive_max_pool2d(x, 1)``;
- ``add``/``sub``/``mul``/``div``/``min``/``max``: torch's broadcasting ops, folded left over the
  inputs. A ``mul`` of a ``hard-sigmoid`` op by a 1-element const ``c`` (or its fix) is the writer's
  hsigmoid/hswish pattern, computed as the simulation does: ``torch.mul(torch.clamp(torch.add(x, 3.0),
  0.0, 6.0), float32(c / 6))`` (``c / 6`` in float64: ``2731/16384`` for nndct's
  ``c = 6 * 2731/16384``) with ``x`` the hard-sigmoid's input;
- ``hard-sigmoid`` by itself: XIR's ``relu6(x + 3) / 6`` (``torch.div(torch.clamp(x + 3, 0, 6), 6.0)``);
  ``hard-swish``: ``x * relu6(x + 3) / 6``; ``hard-tanh``: ``clamp(x, -1, 1)``;
- ``relu``, ``relu6``, ``leaky-relu`` (``alpha``), ``elu``, ``celu``, ``selu``,
  ``sigmoid``, ``swish``, ``mish``, ``tanh``, ``exp``, ``neg``, ``gelu`` (``approximate`` ``'none'``
  or ``'tanh'``, quotes included, as nndct writes it; none: erf): torch's functions;
- ``softmax`` (``axis``), ``reduction_mean``/``_sum``/``_product`` (``axis``, ``keep_dims``);
- ``scale``: ``F.batch_norm(x, zeros, ones, scale, bias, False, 0.0, 0.0)`` over ``axis`` (-1: the last);
- ``matmul``: ``F.linear(a, b, bias)`` when only ``transpose_b`` is set and ``b`` is 2-D (the
  simulation's nn.Linear), else ``torch.matmul`` then ``torch.add`` of the bias;
- ``concat`` (``axis``), ``reshape`` and ``squeeze`` (to the op's output dims), ``flatten``,
  ``transpose`` (``order``), ``strided_slice`` (TensorFlow's begin/end/strides and masks, made dense
  as libxir does; negative strides are not run), ``stack``, ``shape``, ``pad`` (CONSTANT);
- ``resize``: ``F.interpolate`` on NCHW; NEAREST (``nearest-exact`` with ``half_pixel_centers``) or
  BILINEAR (``align_corners``), with ``scale_factor = (scale[1], scale[0])`` from the ``scale``
  attribute ``[w, h]``, or the output size when the op has a ``size`` input;
- custom op types (``aten::silu``, ``aten::mean``, ``nndct_clamp``, ...): the file carries only their
  output ``shape``, ``data_type`` and the attributes nndct gives the type. The kernels are the units'
  (``OpRecord.custom_kernels``, read off the records as ``ops.CUSTOM_KERNELS``): one that the file
  determines (``complete``: ``nndct_shape``, ``nndct_expand``, ``nndct_adaptive_avg_pool2d`` in NHWC) runs
  always, and so does a generic element-wise float operator's (``aten_ops.KERNELS``: ``aten::abs``,
  ``aten::log_sigmoid``, ...); otherwise the caller's ``float_ops[op name]`` computes the op, and without one
  the unit's fallback (``aten::silu`` is ``F.silu``, ``aten::mean`` the mean over the dims the output drops);
  a type with neither raises ``interp_base.InterpreterError`` saying what the file lacks
  (``aten_ops.not_computable``).
"""
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

from .. import fixpoint, ops
from ..ops.hard_sigmoid import xir_hard_sigmoid
from ..ops.record import Absent
from ..ops.xir_support import CustomKernel, Kernel, fold, one, unary
from . import aten_ops, opdefs
from .interp_base import Inputs, Run, checked, model_layout, op_error
from .xgraph import XOp


_REDUCTIONS = {"reduction_mean": torch.mean, "reduction_sum": torch.sum, "reduction_product": None}


def _reduction(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x, axes, keep = one(ins), list(op.attr("axis")), bool(op.attr("keep_dims"))
    fn = _REDUCTIONS[op.type]
    if fn is None:  # product: one axis at a time
        def fn(t: torch.Tensor, dim: List[int], keepdim: bool) -> torch.Tensor:
            for d in sorted(dim, reverse=True):
                t = torch.prod(t, d, keepdim)
            return t
    t, perm = model_layout(x)
    mapped = [perm.index(a % x.dim()) for a in axes]
    y = fn(t, mapped, keepdim=True)
    if perm != tuple(range(x.dim())):
        y = y.permute([perm.index(i) for i in range(len(perm))])
    return y.reshape(op.shape) if not keep or y.dim() != x.dim() else y


def _fix(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    x = one(ins)
    point, width, mode, signed = (op.attr(k) for k in ("fix_point", "bit_width", "round_mode", "if_signed"))
    if signed and mode in ("DPU_ROUND", "STD_ROUND"):
        return fixpoint.fake_quant(x, point, width, "half_up" if mode == "DPU_ROUND" else "std_round")
    v = x * 2.0 ** point
    if mode == "DPU_ROUND":
        codes = fixpoint.round_half_up(v)
    elif mode == "STD_ROUND":
        codes = fixpoint.round_std(v)
    elif mode == "PY3_ROUND":
        codes = torch.round(v)
    else:
        raise op_error(op, "round_mode %r is none of DPU_ROUND, STD_ROUND, PY3_ROUND" % mode)
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    return codes.clamp_(lo, hi).mul_(2.0 ** -point)


# custom op type -> why its unit has no kernel for it (OpRecord.custom_kernels' Absent)
_ABSENT = {x: k.reason for r in ops.RECORDS for x, k in r.custom_kernels.items() if isinstance(k, Absent)}


def custom_kernel(op_type: str) -> Optional[CustomKernel]:
    """The interpreter's kernel of a custom op type: its unit's (``ops.CUSTOM_KERNELS``), else a generic float
    operator's that the type name determines (``aten_ops.KERNELS``: ``aten::abs``), else None."""
    kernel = ops.CUSTOM_KERNELS.get(op_type)
    return kernel if kernel is not None else aten_ops.KERNELS.get(op_type)


def determined(op_type: str) -> bool:
    """A custom type whose file says all it computes (:func:`custom_kernel` with ``complete``): the interpreter
    runs its kernel before any caller's ``float_ops``."""
    kernel = custom_kernel(op_type)
    return kernel is not None and kernel.complete


def custom_op(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    """A custom op (a type XIR does not define): the kernel of the unit that writes the type and runs it as an
    XIR op of its own (``OpRecord.xir_ops``: a custom op the file holds in NHWC, ``nndct_instance_norm``), or its
    unit's custom kernel where the file says all the op computes (``ops.CUSTOM_KERNELS``, ``complete``), else
    the caller's ``float_ops[op.name]``, else its unit's fallback kernel."""
    unit = ops.XIR_OPS.get(op.type)
    if unit is not None:
        return checked(op, unit.kernel(run, op, ins).float())
    xs = [x for arg in sorted(ins) for x in ins[arg]]
    kernel = custom_kernel(op.type)
    if kernel is not None and kernel.complete:
        y = kernel.fn(op, xs)
    elif op.name in run.float_ops:
        y = run.float_ops[op.name](xs)
    elif kernel is not None:
        y = kernel.fn(op, xs)
    else:
        raise op_error(op, aten_ops.not_computable(op.name, op.type, _ABSENT.get(op.type)))
    if not isinstance(y, torch.Tensor):
        raise op_error(op, "float_ops gave %s, not a tensor" % type(y).__name__)
    return checked(op, y.float())


def _const(run: "Run", op: XOp, ins: Inputs) -> torch.Tensor:
    return torch.from_numpy(op.data())


# The XIR format's own kernels: the types no op unit writes. A type a unit writes is run by that unit's
# kernel (OpRecord.xir_ops); a type is in one place, never both (tests/project/test_op_records.py).
_FORMAT_OPS = {
    "const": _const,
    "fix": _fix,
    "min": fold(torch.minimum), "max": fold(torch.maximum),
    "elu": unary(F.elu, "alpha"), "celu": unary(F.celu, "alpha"), "selu": unary(F.selu),
    "swish": unary(F.silu), "mish": unary(F.mish),
    "exp": unary(torch.exp),
    "hard-swish": unary(lambda x: torch.mul(x, xir_hard_sigmoid(x))),
    "hard-tanh": unary(lambda x: torch.clamp(x, -1.0, 1.0)),
    "reduction_mean": _reduction, "reduction_sum": _reduction, "reduction_product": _reduction,
    "squeeze": lambda run, op, ins: one(ins).reshape(op.shape),
    "flatten": lambda run, op, ins: one(ins).reshape(op.shape),
    "shape": lambda run, op, ins: torch.tensor(list(one(ins).shape), dtype=torch.float32),
}  # type: Dict[str, Kernel]

# every kernel: the format's own and the units' (read off the records)
OPS = dict(_FORMAT_OPS)  # type: Dict[str, Kernel]
OPS.update({type_: piece.kernel for type_, piece in ops.XIR_OPS.items()})


def is_custom(op_type: str) -> bool:
    """True for an op type XIR does not define (its definition is made on the fly)."""
    return opdefs.get(op_type) == opdefs.custom_def(op_type)
