"""Layout stages: reshape/view, permute, the named NHWC<->NCHW moves, transpose, squeeze, unsqueeze.

Every stage returns a view (``Tensor.view``, ``permute``, ``transpose``, ``squeeze``, ``unsqueeze``):
the same storage with new shape and strides. Dimension 0 is the batch and stays in place. A reshape
that strides cannot express as a view (e.g. merging H and W after a permute) is a StageError, never a
silent copy (``Tensor.reshape`` would copy).
"""
import dataclasses
from typing import List, Optional, Tuple

import torch

from ..errors import StageError
from ..specs import TENSOR_LAYOUTS
from .base import Shape, Stage, check_int, check_ints, check_layout, normalize_dim


@dataclasses.dataclass(frozen=True)
class Reshape(Stage):
    """View each sample as ``shape`` (the batch dimension is kept): ``x.view(N, *shape)``.

    Args:
        shape: per-sample shape, ints >= 1 and at most one -1 (inferred).

    Input any ``(N, ...)``; output ``(N, *shape)``, a view. StageError when the element count differs
    or the strides do not allow a view (put the reshape before the permute, or reshape the source).
    """

    shape: Tuple[int, ...]
    name = "reshape"

    def check(self) -> None:
        shape = check_ints(self.name, "shape", self.shape, minimum=-1)
        if 0 in shape or shape.count(-1) > 1:
            raise StageError("%s: parameter 'shape' takes ints >= 1 and at most one -1, got %s"
                             % (self.name, list(shape)))
        object.__setattr__(self, "shape", shape)

    def output_shape(self, shape: Shape) -> Shape:
        per_sample = 1
        for n in shape[1:]:
            per_sample *= n
        known = 1
        for n in self.shape:
            if n != -1:
                known *= n
        if -1 in self.shape:
            if known == 0 or per_sample % known:
                raise StageError("%s: cannot view %d elements per sample as %s"
                                 % (self.name, per_sample, list(self.shape)))
            out = tuple(per_sample // known if n == -1 else n for n in self.shape)
        else:
            if known != per_sample:
                raise StageError("%s: a sample of shape %s has %d elements, shape %s needs %d"
                                 % (self.name, tuple(shape[1:]), per_sample, list(self.shape), known))
            out = self.shape
        return (shape[0],) + out

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.view((x.shape[0],) + self.shape)

    def out_ndim(self, ndim: int) -> int:
        return len(self.shape) + 1

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        return [0] + [None] * (ndim - 1)


@dataclasses.dataclass(frozen=True)
class Permute(Stage):
    """``x.permute(*dims)``: a view with reordered axes. ``dims`` is a permutation of ``range(ndim)``
    with ``dims[0] == 0`` (the batch stays first). Example: NHWC -> NCHW is ``[0, 3, 1, 2]``."""

    dims: Tuple[int, ...]
    name = "permute"

    def check(self) -> None:
        dims = check_ints(self.name, "dims", self.dims, minimum=0)
        if sorted(dims) != list(range(len(dims))) or dims[0] != 0:
            raise StageError("%s: parameter 'dims' must be a permutation of 0..%d starting with 0 (the batch), got %s"
                             % (self.name, len(dims) - 1, list(dims)))
        object.__setattr__(self, "dims", dims)

    def output_shape(self, shape: Shape) -> Shape:
        if len(shape) != len(self.dims):
            raise StageError("%s: dims %s need a %d-D input, got shape %s"
                             % (self.name, list(self.dims), len(self.dims), tuple(shape)))
        return tuple(shape[d] for d in self.dims)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*self.dims)

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        if ndim != len(self.dims):
            raise StageError("%s: dims %s need a %d-D input, got %d-D"
                             % (self.name, list(self.dims), len(self.dims), ndim))
        return [self.dims.index(a) for a in range(ndim)]


# (src, dst) -> the permute that moves src's axes into dst's order
_LAYOUT_DIMS = {(src, dst): tuple(src.index(c) for c in dst) for src in TENSOR_LAYOUTS for dst in TENSOR_LAYOUTS}


@dataclasses.dataclass(frozen=True)
class Layout(Stage):
    """The named layout move ``src -> dst`` on a 4-D batch, as a permute view.

    ``{type: layout, src: NHWC, dst: NCHW}`` is ``permute(0, 3, 1, 2)``; ``NCHW -> NHWC`` is
    ``permute(0, 2, 3, 1)``. The output is a view with the source's memory order (not contiguous).
    """

    src: str
    dst: str
    name = "layout"

    def check(self) -> None:
        check_layout(self.name, "src", self.src)
        check_layout(self.name, "dst", self.dst)
        if self.src == self.dst:
            raise StageError("%s: src and dst are both %s; remove the stage or give the other layout"
                             % (self.name, self.src))

    @property
    def dims(self) -> Tuple[int, ...]:
        return _LAYOUT_DIMS[(self.src, self.dst)]

    def output_shape(self, shape: Shape) -> Shape:
        if len(shape) != 4:
            raise StageError("%s: %s -> %s needs a 4-D batch, got shape %s"
                             % (self.name, self.src, self.dst, tuple(shape)))
        return tuple(shape[d] for d in self.dims)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*self.dims)

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        if ndim != 4:
            raise StageError("%s: %s -> %s needs a 4-D batch, got %d-D" % (self.name, self.src, self.dst, ndim))
        return [self.dims.index(a) for a in range(4)]


@dataclasses.dataclass(frozen=True)
class Transpose(Stage):
    """``x.transpose(dim0, dim1)``: a view with two axes swapped (neither may be the batch axis 0;
    negative dims count from the end)."""

    dim0: int
    dim1: int
    name = "transpose"

    def check(self) -> None:
        check_int(self.name, "dim0", self.dim0)
        check_int(self.name, "dim1", self.dim1)
        if self.dim0 == 0 or self.dim1 == 0:
            raise StageError("%s: dim 0 is the batch dimension; stages never move it" % self.name)
        if self.dim0 == self.dim1:
            raise StageError("%s: dim0 and dim1 are both %d; give two different axes" % (self.name, self.dim0))

    def _dims(self, ndim: int) -> Tuple[int, int]:
        a = normalize_dim(self.name, "dim0", self.dim0, ndim)
        b = normalize_dim(self.name, "dim1", self.dim1, ndim)
        if a == b:
            raise StageError("%s: dim0 and dim1 name the same axis %d of a %d-D input" % (self.name, a, ndim))
        return a, b

    def output_shape(self, shape: Shape) -> Shape:
        a, b = self._dims(len(shape))
        out = list(shape)
        out[a], out[b] = out[b], out[a]
        return tuple(out)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(*self._dims(x.dim()))

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        a, b = self._dims(ndim)
        out = list(range(ndim))  # type: List[Optional[int]]
        out[a], out[b] = b, a
        return out


@dataclasses.dataclass(frozen=True)
class Squeeze(Stage):
    """``x.squeeze(dim)``: a view without axis ``dim``, whose size must be 1 (StageError otherwise:
    torch would silently keep it). Not the batch axis."""

    dim: int
    name = "squeeze"

    def check(self) -> None:
        check_int(self.name, "dim", self.dim)
        if self.dim == 0:
            raise StageError("%s: dim 0 is the batch dimension; stages never remove it" % self.name)

    def output_shape(self, shape: Shape) -> Shape:
        d = normalize_dim(self.name, "dim", self.dim, len(shape))
        if shape[d] != 1:
            raise StageError("%s: axis %d has size %d, not 1" % (self.name, d, shape[d]))
        return tuple(shape[:d]) + tuple(shape[d + 1:])

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(normalize_dim(self.name, "dim", self.dim, x.dim()))

    def out_ndim(self, ndim: int) -> int:
        return ndim - 1

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        d = normalize_dim(self.name, "dim", self.dim, ndim)
        return [a if a < d else (None if a == d else a - 1) for a in range(ndim)]


@dataclasses.dataclass(frozen=True)
class Unsqueeze(Stage):
    """``x.unsqueeze(dim)``: a view with a new axis of size 1 at ``dim`` (in ``[-(ndim+1), ndim]``,
    not 0: the batch stays first)."""

    dim: int
    name = "unsqueeze"

    def check(self) -> None:
        check_int(self.name, "dim", self.dim)
        if self.dim == 0:
            raise StageError("%s: dim 0 would put the new axis before the batch dimension" % self.name)

    def _dim(self, ndim: int) -> int:
        return normalize_dim(self.name, "dim", self.dim, ndim + 1)

    def output_shape(self, shape: Shape) -> Shape:
        d = self._dim(len(shape))
        return tuple(shape[:d]) + (1,) + tuple(shape[d:])

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(self._dim(x.dim()))

    def out_ndim(self, ndim: int) -> int:
        return ndim + 1

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        d = self._dim(ndim)
        return [a if a < d else a + 1 for a in range(ndim)]
