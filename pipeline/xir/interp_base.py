"""What the xmodel interpreter's parts share: the value types, its error, and the layout helpers.

Every value is a float32 tensor of the file's dims (NHWC for a 4-D feature map), often an NHWC view
of the simulation's NCHW memory (``interp``'s module docstring); :func:`nchw`, :func:`model_layout`
and :func:`in_model_layout` run torch calls on that memory. :class:`Run` is one run's state.
"""
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import torch

from ..errors import ExportError
from ..ops.xir_support import TO_NCHW, TO_NHWC, Inputs
from .xgraph import XOp

__all__ = ["TO_NCHW", "TO_NHWC", "Inputs", "FloatOp", "InterpreterError", "op_error", "nchw", "model_layout",
           "in_model_layout", "checked", "Run"]

FloatOp = Callable[[List[torch.Tensor]], torch.Tensor]


class InterpreterError(ExportError):
    """The graph cannot be run as asked: an op type or case the interpreter does not cover, a custom
    op without semantics, inputs that do not fit the data ops. The message names the op."""


def op_error(op: XOp, text: str) -> InterpreterError:
    """An :class:`InterpreterError` naming ``op`` (name and type) and saying ``text``."""
    return InterpreterError("xmodel interpreter: op %r (%s): %s" % (op.name, op.type, text))


# --------------------------------------------------------------------------------------- layout
def nchw(op: XOp, x: torch.Tensor) -> torch.Tensor:
    """A 4-D NHWC value as a contiguous NCHW tensor (no copy when its memory is NCHW already)."""
    if x.dim() != 4:
        raise op_error(op, "expects a 4-D NHWC input, got dims %s" % list(x.shape))
    return x.permute(TO_NCHW).contiguous()


def model_layout(x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, ...]]:
    """``(t, perm)`` with ``x == t.permute(inverse(perm))``: a 4-D value held in NCHW memory as that
    NCHW tensor (``perm`` = (0, 3, 1, 2): dim ``j`` of ``t`` is dim ``perm[j]`` of ``x``), anything
    else as itself."""
    if x.dim() == 4 and not x.is_contiguous() and x.permute(TO_NCHW).is_contiguous():
        return x.permute(TO_NCHW), TO_NCHW
    return x, tuple(range(x.dim()))


def in_model_layout(x: torch.Tensor, axes: Sequence[int],
                    fn: Callable[[torch.Tensor, List[int]], torch.Tensor]) -> torch.Tensor:
    """``fn(t, mapped axes)`` on ``x`` in the simulation's memory layout, the result back in the
    file's layout (``fn`` must keep the rank)."""
    t, perm = model_layout(x)
    y = fn(t, [perm.index(a % x.dim()) for a in axes])
    if perm == tuple(range(x.dim())):
        return y
    return y.permute([perm.index(i) for i in range(len(perm))])


def checked(op: XOp, y: torch.Tensor) -> torch.Tensor:
    """``y`` itself when its dims are ``op``'s; raises :class:`InterpreterError` otherwise."""
    if list(y.shape) != list(op.shape):
        raise op_error(op, "computes dims %s, but the file says %s (a pad_mode or padding case the interpreter "
                           "does not reproduce)" % (list(y.shape), list(op.shape)))
    return y


class Run:
    """One run of a graph: the custom ops' functions and the values computed so far (op name -> tensor)."""

    def __init__(self, float_ops: Mapping[str, FloatOp]) -> None:
        self.float_ops = float_ops
        self.values = {}  # type: Dict[str, torch.Tensor]

    # the layout helpers, for the kernels of the op units (OpRecord.xir_ops), which get the run at call time
    @staticmethod
    def error(op: XOp, text: str) -> InterpreterError:
        """:func:`op_error`."""
        return op_error(op, text)

    @staticmethod
    def nchw(op: XOp, x: torch.Tensor) -> torch.Tensor:
        """:func:`nchw`."""
        return nchw(op, x)

    @staticmethod
    def checked(op: XOp, y: torch.Tensor) -> torch.Tensor:
        """:func:`checked`."""
        return checked(op, y)

    @staticmethod
    def model_layout(x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, ...]]:
        """:func:`model_layout`."""
        return model_layout(x)

    @staticmethod
    def in_model_layout(x: torch.Tensor, axes: Sequence[int],
                        fn: Callable[[torch.Tensor, List[int]], torch.Tensor]) -> torch.Tensor:
        """:func:`in_model_layout`."""
        return in_model_layout(x, axes, fn)
