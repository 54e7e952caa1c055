"""The ``Source`` protocol every data source implements, the ``Batch`` it yields, and the keys of
each ``data.source`` type (``SOURCE_FIELDS``).

Two kinds implement ``Source``: the in-memory sources (``pipeline.data.memory.ArraySource``: digits,
npy, npz, array, tensor, and the image folder decoded whole, ``pipeline.data.image_folder``) and the
image folder streamed batch by batch (``pipeline.data.stream``). Whoever reads batches asks the
source for them (``batches``) and never needs to know which kind it holds.
"""
from typing import Any, Dict, Iterator, List, Literal, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch

from ..specs import TENSOR_LAYOUTS, check_keys
from .decode import MAX_PIXELS

# The keys of each data.source type: key -> (type, default; ... when required). The config's JSON
# Schema and its key check are generated from this table (pipeline/config/spec_models.py); the openers
# (pipeline.data.sources) check the keys against it and the values themselves.
_LAYOUT = Literal[TENSOR_LAYOUTS]  # type: ignore
_COLOR = Optional[Literal["RGB", "BGR", "L"]]
_SIZE = Optional[Union[int, List[int]]]
_NAMES = Optional[Union[str, List[str]]]  # class_names: a list, or a text file with one name per line
SOURCE_FIELDS = {
    "digits": {"seed": (int, 0)},
    "npy": {"path": (str, ...), "labels": (Optional[str], None), "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None),
            "class_names": (_NAMES, None)},
    "npz": {"path": (str, ...), "images_key": (str, "images"), "labels_key": (str, "labels"),
            "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None), "class_names": (_NAMES, None)},
    "array": {"images": (Any, ...), "labels": (Any, None), "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None),
              "class_names": (_NAMES, None)},
    "tensor": {"images": (Any, ...), "labels": (Any, None), "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None),
               "class_names": (_NAMES, None)},
    "image_folder": {"root": (str, ...), "resize": (_SIZE, None), "crop": (_SIZE, None),
                     "mode": (Literal["RGB", "L"], "RGB"), "extensions": (Optional[Union[str, List[str]]], None),
                     "skip_corrupt": (bool, False), "limit_per_class": (Optional[int], None),
                     "shuffle": (bool, True), "seed": (int, 0), "max_pixels": (int, MAX_PIXELS),
                     "stream": (bool, False), "workers": (int, 2), "prefetch": (int, 2)},
}  # type: Dict[str, Dict[str, Tuple[Any, Any]]]


def check_source_keys(spec: Dict[str, Any], kind: str) -> None:
    """ConfigError for a key of ``spec`` that ``SOURCE_FIELDS[kind]`` lacks, or a missing required one."""
    fields = SOURCE_FIELDS[kind]
    check_keys(spec, fields, [k for k, (_, default) in fields.items() if default is ...], "data.source")


class Batch(NamedTuple):
    """One batch as a source yields it, before the stages.

    Fields:
        view: a torch tensor in the source's layout and dtype: a view of the source's images (never
            a copy) or, for a streamed source, the batch's freshly decoded images (n, H, W, C) uint8.
            When ``rows`` is given, the view is the WHOLE source and the batch is its ``rows``.
        labels: np.int64 (n,) labels of the batch's samples, or None.
        rows: None, or the sorted np.int64 row indices of ``view`` that make up the batch: the quantizer
            boundary gathers them in its one copy.
        channel_order: None, or the channel order the source defers to the boundary (channel ``c``
            of the images is channel ``channel_order[c]`` of ``view``); the stages refuse such a batch
            unless they were built for that source (``build_stages(specs, source=source)``).
    """

    view: torch.Tensor
    labels: Optional[np.ndarray]
    rows: Optional[np.ndarray]
    channel_order: Optional[List[int]]


class Source:
    """Images (and labels) the pipeline reads but never writes: the protocol of every data source.

    Attributes:
        kind: the ``SOURCES`` name (``digits``, ``npy``, ``npz``, ``array``, ``tensor``, ``image_folder``).
        shape: ``(N, ...)`` of the images, 4-D in ``layout``, as ints.
        layout: ``NHWC`` or ``NCHW`` (logical axis order of the images).
        labels: np.int64 array of shape (N,), or None.
        color: the channel order of the images as stored: ``RGB``, ``BGR``, ``L`` (one gray channel),
            or None when the source does not say.
        classes: the class names, label ``i`` is ``classes[i]`` (an image folder's class folders, the
            digits "0" to "9", an array source's ``class_names``), or None when the source names none
            (``pipeline.data.class_names``).
        channel_order: None, or ``[C-1, ..., 0]`` when the source defers a channel flip to the
            quantizer boundary (it travels with each ``Batch``).
        gathers_at_boundary: True when, for an index-array part, ``batches`` yields the whole
            source's view plus each batch's rows (the boundary gathers them): the stages then see
            the whole source and must keep its batch dimension. False when each batch holds only its
            own samples.
    """

    kind = ""
    layout = "NHWC"
    labels = None  # type: Optional[np.ndarray]
    color = None  # type: Optional[str]
    classes = None  # type: Optional[List[str]]
    channel_order = None  # type: Optional[List[int]]
    gathers_at_boundary = False

    @property
    def shape(self) -> Tuple[int, ...]:
        raise NotImplementedError

    def __len__(self) -> int:
        return int(self.shape[0])

    def batches(self, rows: Any, batch_size: int, limit: Optional[int] = None, rank: int = 0,
                world: int = 1) -> Iterator[Batch]:
        """This rank's batches of ``rows`` (a part of ``pipeline.data.batching``: a slice with step 1,
        or a sorted np.int64 index array), in order.

        Batch ``i`` covers the part's samples ``i * batch_size ...`` (the last may be shorter), at most
        ``limit`` batches in all ranks together; this rank gets those with ``i % world == rank``
        (``pipeline.distributed``) and reads no other.

        Raises:
            ConfigError: a bad batch size or limit. DataError: a part outside the source, or data
                that cannot be read (naming the file).
        """
        raise NotImplementedError

    def fingerprint(self) -> str:
        """A sha256 hex digest that changes when the source's data changes (the run compares it
        before and after, ``run.verify_source_unchanged``)."""
        raise NotImplementedError

    def describe(self) -> Dict[str, Any]:
        """For the report: kind, path, shape, dtype, layout, labels, ... (JSON-ready)."""
        raise NotImplementedError
