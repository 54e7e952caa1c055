"""The stage contract: ``Stage`` and the checks of its YAML parameters.

A stage is a small frozen dataclass whose fields are its YAML parameters, checked when it is built.
``stage(x)`` returns a **view** of ``x`` (same storage, new shape/strides; never ``contiguous()``,
``clone()``, ``copy_()`` or an in-place op) and ``stage.output_shape(shape)`` is pure, so a config is
checked before any data is read. Dimension 0 is always the batch and no stage moves it.

Channel gathers that a torch view cannot express (BGR<->RGB, any other order, a non-progression
channel selection) are *deferred* (``gathers_channels``): the stage is an identity view, and
``pipeline.stages.gathers`` composes their channel indices into the order the quantizer boundary
applies inside its single pass. ``pipeline.stages.compose.Compose`` runs the stages and enforces
the contract on every batch.
"""
import dataclasses
from typing import Any, List, Optional, Tuple

import torch

from ..errors import StageError
from ..specs import TENSOR_LAYOUTS


Shape = Tuple[int, ...]


# ----------------------------------------------------------------------------- parameter checks

def check_int(stage: str, name: str, value: Any, minimum: Optional[int] = None) -> int:
    """``value`` as an int (bools refused), at least ``minimum``; StageError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise StageError("%s: parameter %r must be an int, got %r" % (stage, name, value))
    if minimum is not None and value < minimum:
        raise StageError("%s: parameter %r must be >= %d, got %d" % (stage, name, minimum, value))
    return value


def check_ints(stage: str, name: str, value: Any, minimum: Optional[int] = None) -> Tuple[int, ...]:
    """A non-empty list/tuple of ints as a tuple; StageError naming the parameter."""
    if not isinstance(value, (list, tuple)) or not value:
        raise StageError("%s: parameter %r must be a non-empty list of ints, got %r" % (stage, name, value))
    return tuple(check_int(stage, "%s[%d]" % (name, i), v, minimum) for i, v in enumerate(value))


def check_layout(stage: str, name: str, value: Any) -> str:
    """One of ``NCHW``/``NHWC``; StageError otherwise."""
    if value not in TENSOR_LAYOUTS:
        raise StageError("%s: parameter %r must be one of %s, got %r" % (stage, name, ", ".join(TENSOR_LAYOUTS), value))
    return value


def normalize_dim(stage: str, name: str, dim: int, ndim: int) -> int:
    """``dim`` in ``[-ndim, ndim)`` made non-negative; it may not be the batch dimension 0."""
    if not -ndim <= dim < ndim:
        raise StageError("%s: %s=%d is out of range for a %d-D input (valid: %d..%d)"
                         % (stage, name, dim, ndim, -ndim, ndim - 1))
    dim = dim % ndim
    if dim == 0:
        raise StageError("%s: %s=%d is the batch dimension; stages never move or slice it "
                         "(use batch_slice to select samples)" % (stage, name, dim))
    return dim


def require_ndim(stage: str, shape: Shape, ndim: int, layout: str) -> None:
    if len(shape) != ndim:
        raise StageError("%s: expects a %d-D %s batch, got shape %s" % (stage, ndim, layout, tuple(shape)))


# ----------------------------------------------------------------------------- the contract

@dataclasses.dataclass(frozen=True)
class Stage:
    """Base of every stage. Subclasses are frozen dataclasses whose fields are their YAML parameters.

    Subclasses implement ``check()`` (parameters, at construction: raise StageError), ``output_shape``
    and ``apply``; those that add or remove axes override ``out_ndim``, and those that move, merge or
    slice axes override ``axis_map``. ``name`` is the YAML ``type:``.
    """

    name = "stage"
    gathers_channels = False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Validate the parameters; raise StageError naming the bad one."""

    def output_shape(self, shape: Shape) -> Shape:
        """The output shape for an input of ``shape`` (pure). Raises StageError when it does not fit."""
        raise NotImplementedError

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """Return a view of ``x`` (same storage). Never copies and never writes."""
        raise NotImplementedError

    def out_ndim(self, ndim: int) -> int:
        """Number of dimensions of the output for a ``ndim``-D input."""
        return ndim

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        """For each input axis, its position in the output, or None when the stage changes what lies
        along it (slices it, merges it, expands it). Default: every axis kept in place."""
        return list(range(ndim))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.apply(x)
