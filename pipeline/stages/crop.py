"""Cropping stages: crop, center_crop, narrow, batch_slice. Each is a slice of its input, i.e. a
view with the same strides and a new storage offset; nothing is copied, nothing is padded (a box
that does not fit is a StageError, since padding would need new memory)."""
import dataclasses
from typing import List, Optional, Tuple

import torch

from ..errors import StageError
from .base import Shape, Stage, check_int, check_layout, normalize_dim, require_ndim


def _hw_axes(layout: str) -> Tuple[int, int]:
    return (2, 3) if layout == "NCHW" else (1, 2)


def _crop_view(x: torch.Tensor, layout: str, top: int, left: int, height: int, width: int) -> torch.Tensor:
    h, w = _hw_axes(layout)
    return x.narrow(h, top, height).narrow(w, left, width)


def _crop_axis_map(layout: str, ndim: int) -> List[Optional[int]]:
    return [None if a in _hw_axes(layout) else a for a in range(ndim)]


def _crop_shape(stage: str, shape: Shape, layout: str, top: int, left: int, height: int, width: int) -> Shape:
    require_ndim(stage, shape, 4, layout)
    h, w = _hw_axes(layout)
    if top + height > shape[h] or left + width > shape[w]:
        raise StageError("%s: box (top %d, left %d, height %d, width %d) exceeds the input's %dx%d (H x W, %s)"
                         % (stage, top, left, height, width, shape[h], shape[w], layout))
    out = list(shape)
    out[h], out[w] = height, width
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Crop(Stage):
    """Rows ``top:top+height`` and columns ``left:left+width`` of a 4-D batch (``layout`` says
    where H and W are: NCHW -> axes 2, 3; NHWC -> axes 1, 2). A view."""

    top: int
    left: int
    height: int
    width: int
    layout: str = "NCHW"
    name = "crop"

    def check(self) -> None:
        check_int(self.name, "top", self.top, 0)
        check_int(self.name, "left", self.left, 0)
        check_int(self.name, "height", self.height, 1)
        check_int(self.name, "width", self.width, 1)
        check_layout(self.name, "layout", self.layout)

    def output_shape(self, shape: Shape) -> Shape:
        return _crop_shape(self.name, shape, self.layout, self.top, self.left, self.height, self.width)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return _crop_view(x, self.layout, self.top, self.left, self.height, self.width)

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        return _crop_axis_map(self.layout, ndim)


@dataclasses.dataclass(frozen=True)
class CenterCrop(Stage):
    """The central ``height x width`` box of a 4-D batch, a view. Offsets follow torchvision's
    ``center_crop``: ``top = int(round((H - height) / 2.0))`` (Python rounding), same for ``left``
    (torchvision ``transforms/functional.py``), so crops match a torchvision training pipeline."""

    height: int
    width: int
    layout: str = "NCHW"
    name = "center_crop"

    def check(self) -> None:
        check_int(self.name, "height", self.height, 1)
        check_int(self.name, "width", self.width, 1)
        check_layout(self.name, "layout", self.layout)

    def _box(self, shape: Shape) -> Tuple[int, int]:
        require_ndim(self.name, shape, 4, self.layout)
        h, w = _hw_axes(self.layout)
        return int(round((shape[h] - self.height) / 2.0)), int(round((shape[w] - self.width) / 2.0))

    def output_shape(self, shape: Shape) -> Shape:
        top, left = self._box(shape)
        if top < 0 or left < 0:
            raise StageError("%s: %dx%d is larger than the input's %dx%d (H x W, %s); padding would need a copy"
                             % (self.name, self.height, self.width, shape[_hw_axes(self.layout)[0]],
                                shape[_hw_axes(self.layout)[1]], self.layout))
        return _crop_shape(self.name, shape, self.layout, top, left, self.height, self.width)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        top, left = self._box(tuple(x.shape))
        return _crop_view(x, self.layout, top, left, self.height, self.width)

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        return _crop_axis_map(self.layout, ndim)


@dataclasses.dataclass(frozen=True)
class Narrow(Stage):
    """``x.narrow(dim, start, length)``: elements ``start:start+length`` along ``dim`` (not the batch
    axis; negative dims count from the end). A view."""

    dim: int
    start: int
    length: int
    name = "narrow"

    def check(self) -> None:
        check_int(self.name, "dim", self.dim)
        check_int(self.name, "start", self.start, 0)
        check_int(self.name, "length", self.length, 1)
        if self.dim == 0:
            raise StageError("%s: dim 0 is the batch dimension; use batch_slice to select samples" % self.name)

    def output_shape(self, shape: Shape) -> Shape:
        d = normalize_dim(self.name, "dim", self.dim, len(shape))
        if self.start + self.length > shape[d]:
            raise StageError("%s: start %d + length %d exceeds axis %d of size %d"
                             % (self.name, self.start, self.length, d, shape[d]))
        out = list(shape)
        out[d] = self.length
        return tuple(out)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x.narrow(normalize_dim(self.name, "dim", self.dim, x.dim()), self.start, self.length)

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        d = normalize_dim(self.name, "dim", self.dim, ndim)
        return [None if a == d else a for a in range(ndim)]


@dataclasses.dataclass(frozen=True)
class BatchSlice(Stage):
    """Samples ``start:stop:step`` of the batch (``x[start:stop:step]``), a view. ``stop`` None means
    to the end; a batch that ends up empty is a StageError."""

    start: int = 0
    stop: Optional[int] = None
    step: int = 1
    name = "batch_slice"

    def check(self) -> None:
        check_int(self.name, "start", self.start, 0)
        check_int(self.name, "step", self.step, 1)
        if self.stop is not None:
            check_int(self.name, "stop", self.stop, 0)
            if self.stop <= self.start:
                raise StageError("%s: stop %d must be greater than start %d" % (self.name, self.stop, self.start))

    def output_shape(self, shape: Shape) -> Shape:
        if not shape:
            raise StageError("%s: needs at least a 1-D batch" % self.name)
        n = len(range(*slice(self.start, self.stop, self.step).indices(shape[0])))
        if n == 0:
            raise StageError("%s: samples %d:%s:%d of a batch of %d leave nothing"
                             % (self.name, self.start, self.stop, self.step, shape[0]))
        return (n,) + tuple(shape[1:])

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.start:self.stop:self.step]

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        return [None] + list(range(1, ndim))
