"""Channel stages: select_channels, expand_channels, channel_order, bgr_to_rgb, rgb_to_bgr.

Views where torch can express them: a selection whose indices form a progression with step >= 1
(``[0]``, ``[0, 1]``, ``[0, 2]``) is a slice; ``expand_channels`` broadcasts one channel to several
with stride 0 (``Tensor.expand``). A reorder (BGR<->RGB, any permutation) or a selection out of
order needs a negative or irregular stride, which torch views cannot have, so those stages are
*gathers*: declared here, composed by ``Compose`` into ``boundary_channel_order``, and carried out
by the quantizer boundary inside its single pass (calling such a stage directly is a StageError).

Every stage here works on a 4-D batch whose channel axis is given by ``layout`` (NCHW: axis 1,
NHWC: axis 3).
"""
import dataclasses
from typing import List, Optional, Tuple

import torch

from ..errors import StageError
from .base import Shape, Stage, check_int, check_ints, check_layout, require_ndim


class _ChannelGather(Stage):
    """Common part of the gathering stages (not registered). Subclasses define ``layout`` and
    ``_index`` (the channels read, in output order) and may be views (``is_view``)."""

    gathers_channels = True

    def channel_axis(self) -> int:
        """The channel axis of the 4-D batch: 1 for NCHW, 3 for NHWC."""
        return self.layout.index("C")

    def _index(self) -> Tuple[int, ...]:
        raise NotImplementedError

    def _check_channels(self, channels: int) -> None:
        """Raise StageError when the input's channel count does not suit the stage."""
        bad = [c for c in self._index() if c >= channels]
        if bad:
            raise StageError("%s: channels %s do not exist in an input with %d channels" % (self.name, bad, channels))

    def gather_index(self, channels: Optional[int]) -> Tuple[int, ...]:
        """The input channel read by each output channel, checked against ``channels`` when known."""
        if channels is not None:
            self._check_channels(channels)
        return self._index()

    def is_view(self) -> bool:
        """True when the gather is a slice (a view); False when the boundary must carry it out."""
        return False

    def output_shape(self, shape: Shape) -> Shape:
        require_ndim(self.name, shape, 4, self.layout)
        axis = self.channel_axis()
        out = list(shape)
        out[axis] = len(self.gather_index(shape[axis]))
        return tuple(out)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        raise StageError("%s: channel order %s cannot be a torch view; it is carried out inside the quantizer "
                         "boundary's pass: run the stage through Compose (build_stages) and hand "
                         "compose.boundary_channel_order to QuantizerBoundary" % (self.name, list(self._index())))


@dataclasses.dataclass(frozen=True)
class SelectChannels(_ChannelGather):
    """Keep ``channels`` (in that order). A view when they form a progression with step >= 1
    (``x[:, a:b:step]`` on the channel axis); otherwise gathered at the boundary."""

    channels: Tuple[int, ...]
    layout: str = "NCHW"
    name = "select_channels"

    def check(self) -> None:
        object.__setattr__(self, "channels", check_ints(self.name, "channels", self.channels, minimum=0))
        check_layout(self.name, "layout", self.layout)

    def _index(self) -> Tuple[int, ...]:
        return self.channels

    def is_view(self) -> bool:
        c = self.channels
        return len(c) == 1 or (c[1] > c[0] and all(b - a == c[1] - c[0] for a, b in zip(c, c[1:])))

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        if not self.is_view():
            return super().apply(x)
        c = self.channels
        step = c[1] - c[0] if len(c) > 1 else 1
        index = [slice(None)] * x.dim()
        index[self.channel_axis()] = slice(c[0], c[-1] + 1, step)
        return x[tuple(index)]


@dataclasses.dataclass(frozen=True)
class ExpandChannels(Stage):
    """Broadcast a 1-channel batch to ``channels`` channels with stride 0 (``Tensor.expand``), e.g. a
    grayscale image for a model trained on RGB. A view: all channels read the same memory."""

    channels: int = 3
    layout: str = "NCHW"
    name = "expand_channels"

    def check(self) -> None:
        check_int(self.name, "channels", self.channels, 2)
        check_layout(self.name, "layout", self.layout)

    def output_shape(self, shape: Shape) -> Shape:
        require_ndim(self.name, shape, 4, self.layout)
        axis = self.channel_axis()
        if shape[axis] != 1:
            raise StageError("%s: needs 1 channel on axis %d (%s), got %d"
                             % (self.name, axis, self.layout, shape[axis]))
        out = list(shape)
        out[axis] = self.channels
        return tuple(out)

    def channel_axis(self) -> int:
        return self.layout.index("C")

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        sizes = [-1] * x.dim()
        sizes[self.channel_axis()] = self.channels
        return x.expand(*sizes)

    def axis_map(self, ndim: int) -> List[Optional[int]]:
        return [None if a == self.channel_axis() else a for a in range(ndim)]


@dataclasses.dataclass(frozen=True)
class ChannelOrder(_ChannelGather):
    """Reorder all channels: output channel ``c`` is input channel ``order[c]``. ``order`` is a
    permutation of ``0..C-1`` other than the identity. Carried out at the boundary."""

    order: Tuple[int, ...]
    layout: str = "NCHW"
    name = "channel_order"

    def check(self) -> None:
        order = check_ints(self.name, "order", self.order, minimum=0)
        if sorted(order) != list(range(len(order))):
            raise StageError("%s: parameter 'order' must be a permutation of 0..%d, got %s"
                             % (self.name, len(order) - 1, list(order)))
        if list(order) == sorted(order):
            raise StageError("%s: order %s is the identity; remove the stage" % (self.name, list(order)))
        object.__setattr__(self, "order", order)
        check_layout(self.name, "layout", self.layout)

    def _index(self) -> Tuple[int, ...]:
        return self.order

    def _check_channels(self, channels: int) -> None:
        if channels != len(self.order):
            raise StageError("%s: order %s reorders %d channels, the input has %d"
                             % (self.name, list(self.order), len(self.order), channels))


@dataclasses.dataclass(frozen=True)
class BgrToRgb(_ChannelGather):
    """BGR -> RGB on a 3-channel batch (channel order ``[2, 1, 0]``), carried out at the boundary.
    OpenCV decodes images as BGR; models trained with PIL/torchvision expect RGB."""

    layout: str = "NCHW"
    name = "bgr_to_rgb"

    def check(self) -> None:
        check_layout(self.name, "layout", self.layout)

    def _index(self) -> Tuple[int, ...]:
        return (2, 1, 0)

    def _check_channels(self, channels: int) -> None:
        if channels != 3:
            raise StageError("%s: needs 3 channels, the input has %d" % (self.name, channels))


@dataclasses.dataclass(frozen=True)
class RgbToBgr(BgrToRgb):
    """RGB -> BGR on a 3-channel batch (the same reversal ``[2, 1, 0]``), carried out at the boundary."""

    name = "rgb_to_bgr"
