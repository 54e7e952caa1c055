"""Generic float operators the interpreter computes from the type name alone, and what it says of a custom op
it cannot compute.

The real quantizer writes a torch call that has no nndct type of its own (a float operator, kept in float on
the CPU: docs/arithmetic.md#float-operators) as a custom op named after the traced aten kind
(``aten::abs``, ``aten::celu``; ``xop_creator.custom_xop`` in ``nndct_shared/compile``) with its output
``shape`` and ``data_type`` only: none of the call's other arguments. Where the call takes the tensor alone
and acts element by element, the type name says all it computes: ``ELEMENTWISE`` maps the type (and its
in-place spelling ``aten::<name>_``, as torch.jit traces ``x.abs_()``) to torch's function of that name,
the call the simulation makes (bit for bit: the same element-wise function on the same float32 values).
``aten::alpha_dropout`` and ``aten::feature_alpha_dropout`` are the identity: the file is a test-mode
export, where torch's dropouts (``training=False``) return their input.

A call with other arguments (``aten::celu``'s alpha, ``aten::softplus``'s beta and threshold,
``aten::hardshrink``'s lambda, ``aten::glu``'s dim, ``aten::topk``'s k) is not here: the file does not carry
them, so no kernel can be made from it (:func:`not_computable` says so).
"""
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from ..ops.xir_support import CustomKernel

__all__ = ["ELEMENTWISE", "KERNELS", "not_computable"]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


# aten kind -> torch's element-wise function of the tensor alone (the simulation's call for it)
ELEMENTWISE = {
    "abs": torch.abs, "neg": torch.neg, "sign": torch.sign, "square": torch.square,
    "exp": torch.exp, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2, "log10": torch.log10,
    "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "erf": torch.erf, "erfc": torch.erfc,
    "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "frac": torch.frac,
    "log_sigmoid": F.logsigmoid, "selu": F.selu,
    "alpha_dropout": _identity, "feature_alpha_dropout": _identity,
}  # type: Dict[str, Callable[[torch.Tensor], torch.Tensor]]


def _kernel(kind: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> CustomKernel:
    def run(op, xs: List[torch.Tensor]) -> torch.Tensor:
        if len(xs) != 1:
            raise ValueError("aten::%s takes the tensor alone; the op has %d inputs" % (kind, len(xs)))
        return fn(xs[0])
    return CustomKernel(run, True)


# custom op type -> its kernel: complete (the type name determines it), so the interpreter runs it before any
# caller's float_ops and the writer's verification compares it with the simulation's own call
KERNELS = {}  # type: Dict[str, CustomKernel]
for _kind, _fn in ELEMENTWISE.items():
    KERNELS["aten::" + _kind] = KERNELS["aten::" + _kind + "_"] = _kernel(_kind, _fn)


def not_computable(op_name: str, op_type: str, reason: Optional[str]) -> str:
    """The interpreter's message for a custom op it cannot compute from the file: why (``reason``: the unit's,
    ``OpRecord.custom_kernels``' ``Absent``; else the generic float operator's or any custom op's), and what a
    user can do: nothing from the command line (``python -m pipeline xmodel run`` runs the file alone), the
    Python API ``pipeline.xir.interp.run`` with the op's function in ``float_ops``."""
    if reason is None:
        if op_type.startswith("aten::"):
            reason = ("a float operator the quantizer writes as a custom op: the file carries only its output shape "
                      "and data type, not the call's other arguments (%s is not an element-wise function of the "
                      "tensor alone)" % op_type)
        else:
            reason = "a custom op type: the file carries only its output shape and data type, not what it computes"
    elif reason.startswith("the caller's float_ops"):  # the unit's note says who computes it, not what is missing
        reason = "the interpreter has no kernel for it from the file alone (%s)" % reason[len("the caller's "):]
    reason = reason.split(": the caller's float_ops")[0]
    return ("%s. It is not computable from the file: python -m pipeline xmodel run cannot run it. With the Python "
            "API pipeline.xir.interp.run(graph, inputs, float_ops={%r: callable(list of input tensors) -> tensor}) "
            "it runs, given the op's function (the float_ops argument applies to that API only)"
            % (reason, op_name))
