"""The in-memory sources: images that lie in one array, read where they lie (a memory map, the
caller's array or tensor, the source's own decoded array), never written and never copied before
the quantizer boundary.

Images are 4-D, ``layout`` NHWC (default) or NCHW, of a dtype torch can view. Labels, when given,
are a 1-D integer array with one entry per image, delivered as np.int64.

A numpy array whose channel axis has a negative stride (``a[..., ::-1]``, the usual BGR->RGB flip,
public case P01) is accepted without a copy: the source's torch view reads the channels in memory
order and ``ArraySource.channel_order`` ([C-1, ..., 0]) travels with each batch (``Batch.channel_order``)
and tells ``build_stages(specs, source=source)`` to carry the reversal out at the quantizer boundary.
A negative stride on any other axis is a DataError (torch views cannot flip, and a copy here would be
a second copy per batch).
"""
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from ..errors import ConfigError, DataError
from ..specs import TENSOR_LAYOUTS
from ..tensors import ArrayLike, as_torch_view, fingerprint_array
from .base import Batch, Source
from .batching import iter_batches, iter_row_batches

HASH_LIMIT_BYTES = 256 << 20  # describe() hashes sources up to this size (about 0.5 s)
COLORS = {"RGB": 3, "BGR": 3, "L": 1}  # data.source.color -> channels


class ArraySource(Source):
    """A ``Source`` whose images lie in one numpy array or torch tensor.

    Attributes (besides ``Source``'s):
        images: the caller's (or, for digits and the image folder, the source's own) numpy array or
            torch tensor, 4-D, in ``layout``; never written (prove it with ``fingerprint()``).
        tensor: a torch view of ``images`` with non-negative strides (no copy); batches are views of it.
        channel_order: None, or ``[C-1, ..., 0]`` when ``images`` has a negative channel stride:
            channel ``c`` of the images is channel ``channel_order[c]`` of ``tensor``.
        path: the file read, or None. mmap: True when ``images`` is a memory map of that file.
        color: spec key ``color`` of npy, npz, array, tensor (checked against the channel count).
        classes: the class names (``Source.classes``), or None.
        gathers_at_boundary: True (an index-array part gives the whole ``tensor`` plus the rows).

    Raises:
        ConfigError: a layout other than NHWC/NCHW, a color that is not RGB/BGR/L or does not fit
            the channel count.
        DataError: images not 4-D, empty, of an unsupported dtype, not on the CPU, flipped on a
            non-channel axis; labels not 1-D integers of length N.
    """

    gathers_at_boundary = True

    def __init__(self, kind: str, images: ArrayLike, labels: Optional[np.ndarray] = None, layout: str = "NHWC",
                 path: Optional[str] = None, mmap: bool = False, note: str = "", color: Optional[str] = None,
                 classes: Optional[List[str]] = None) -> None:
        if layout not in TENSOR_LAYOUTS:
            raise ConfigError("source %s: layout must be one of %s, got %r" % (kind, ", ".join(TENSOR_LAYOUTS), layout))
        if isinstance(images, torch.Tensor):
            if images.device.type != "cpu":
                raise DataError("source %s: the tensor is on %s; pass images.cpu()" % (kind, images.device))
            images = images.detach()
        elif not isinstance(images, np.ndarray):
            raise DataError("source %s: images must be a numpy array or a torch tensor, got %s"
                            % (kind, type(images).__name__))
        if images.ndim != 4 or images.shape[0] == 0:
            raise DataError("source %s: expected a non-empty 4-D %s image array, got shape %s; save grayscale "
                            "images as (N, H, W, 1)" % (kind, layout, tuple(images.shape)))
        self.kind, self.images, self.layout, self.path, self.mmap, self.note = kind, images, layout, path, mmap, note
        self.tensor, flips = as_torch_view(images)
        channel_axis = layout.index("C")
        other = [a for a in flips if a != channel_axis]
        if other:
            raise DataError("source %s: axis %s of the %s images has a negative stride (a flip such as a[:, ::-1]); "
                            "only the channel axis can be flipped without a copy. Flip the data when you write "
                            "it, or pass np.ascontiguousarray(images) to make that copy explicit"
                            % (kind, other, layout))
        self.channel_order = None  # type: Optional[List[int]]
        if channel_axis in flips:
            self.channel_order = list(range(images.shape[channel_axis] - 1, -1, -1))
        self.labels = _check_labels(kind, labels, images.shape[0])
        self.color = _check_color(color, int(images.shape[channel_axis]))
        self.classes = None if classes is None else list(classes)  # checked by the opener (data.class_names)

    @property
    def shape(self) -> Tuple[int, ...]:
        """``(N, ...)`` of ``images`` as ints."""
        return tuple(int(n) for n in self.images.shape)

    def batches(self, rows: Any, batch_size: int, limit: Optional[int] = None, rank: int = 0,
                world: int = 1) -> Iterator[Batch]:
        """This rank's batches of ``rows`` (see ``Source.batches``), nothing copied.

        For a slice, each ``Batch.view`` is a view of that batch's samples of ``tensor``
        (``pipeline.data.batching.iter_batches``). For an index array, each ``Batch.view`` is the
        whole ``tensor`` and ``Batch.rows`` the batch's sorted rows, which the quantizer boundary
        gathers in its one copy (``iter_row_batches``). ``Batch.labels``: np.int64 views or gathers of
        ``labels``; ``Batch.channel_order``: this source's. The other ranks' batches are skipped.

        Raises:
            ConfigError: a bad batch size or limit; DataError: a slice outside the source or with a step.
        """
        if isinstance(rows, slice):
            it = (Batch(view, labels, None, self.channel_order)
                  for view, labels in iter_batches(self, rows, batch_size, limit))
        else:
            it = (Batch(self.tensor, labels, batch_rows, self.channel_order)
                  for batch_rows, labels in iter_row_batches(self, rows, batch_size, limit))
        return (batch for i, batch in enumerate(it) if i % world == rank) if world > 1 else it

    def fingerprint(self) -> str:
        """sha256 of the image bytes in logical order (``pipeline.tensors.fingerprint_array``)."""
        return fingerprint_array(self.images)

    def describe(self) -> Dict[str, Any]:
        """For the report: kind, path, shape, dtype, layout, mmap, channel_order, labels, note, and
        ``sha256`` of the image bytes in logical order (``fingerprint_array``) when the images hold
        at most 256 MiB (else None)."""
        nbytes = int(self.tensor.numel() * self.tensor.element_size())
        return {
            "kind": self.kind, "path": self.path, "shape": [int(n) for n in self.images.shape],
            "dtype": str(self.images.dtype).replace("torch.", ""), "layout": self.layout, "mmap": self.mmap,
            "channel_order": self.channel_order, "labels": None if self.labels is None else int(len(self.labels)),
            "bytes": nbytes, "sha256": fingerprint_array(self.images) if nbytes <= HASH_LIMIT_BYTES else None,
            "note": self.note, "color": self.color,
        }


def _check_color(color: Any, channels: int) -> Optional[str]:
    if color is None:
        return None
    if color not in COLORS:
        raise ConfigError("data.source.color: expected one of %s (the channel order of the stored images), got %r"
                          % (", ".join(COLORS), color))
    if COLORS[color] != channels:
        raise ConfigError("data.source.color: %s means %d channel(s), but the images have %d"
                          % (color, COLORS[color], channels))
    return color


def _check_labels(kind: str, labels: Any, n: int) -> Optional[np.ndarray]:
    if labels is None:
        return None
    labels = np.asarray(labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else labels)
    if labels.ndim != 1 or labels.shape[0] != n or labels.dtype.kind not in "iub":
        raise DataError("source %s: labels must be a 1-D integer array with one entry per image (%d), got shape %s "
                        "dtype %s" % (kind, n, labels.shape, labels.dtype))
    return labels.astype(np.int64, copy=False)

