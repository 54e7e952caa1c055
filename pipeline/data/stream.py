"""An image folder streamed batch by batch with a ``torch.utils.data.DataLoader``: for folders that
do not fit in memory (``data.source: {type: image_folder, stream: true, ...}``).

The folder, its classes, the file order (sorted, then the seeded shuffle) and the decoding
(Pillow, torchvision's Resize + CenterCrop) are exactly those of ``pipeline.data.image_folder``,
so a streamed run sees the same batches, bit for bit, as one that decodes the folder into memory.
What differs:

- No array of all images: each batch is decoded when it is needed, into a fresh uint8 NHWC
  ``(n, H, W, C)`` tensor that the source owns (the decode allocation, as the in-memory source's
  one big array; the stages view it and the quantizer boundary still makes the one copy).
- The index is two numpy arrays (fixed-width path bytes and int64 labels), not Python lists: a
  forked DataLoader worker reads them without touching per-object reference counts, so no worker
  ends up with its own copy of the index, and memory stays flat as the folder grows.
- ``workers`` processes decode whole batches in parallel; at most ``workers * prefetch`` batches
  are decoded ahead (bounded prefetch). ``workers: 0`` decodes in the calling process.
- Under torchrun each rank's DataLoader holds only its own batches (batch ``i`` on rank
  ``i % world``, the rule of ``pipeline.distributed``): a rank never decodes another's images.
- The image size must be known without decoding everything: ``crop`` or ``resize: [h, w]`` fix it;
  otherwise the first file's size (after an int ``resize``) is taken and any image of another
  size is a DataError naming the file. An unreadable file is a DataError naming it
  (``skip_corrupt`` would change which images make up a batch after the splits were cut, so it
  cannot be combined with ``stream``).
- Decoding is bounded as in memory (``max_pixels``, ``pipeline.data.decode``), checked on each
  file's header in the worker that decodes it; the first failure of a batch (a file over the
  limit, unreadable, of another size) comes back from the worker as a value and is raised in the
  calling process with the message ``workers: 0`` gives (not wrapped in the worker's traceback),
  and the workers are shut down before it propagates, as they are when the caller stops early.
- Run folders under ``root`` are left out as in memory (``pipeline.data.listing``).
- ``fingerprint()`` hashes the index and each file's size and modification time (reading 50,000
  files twice to prove them unchanged would cost as much as the run).
"""
import hashlib
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch

from ..errors import ConfigError, DataError, PipelineError
from .base import Batch, Source
from .decode import (MODES, SIXTEEN_BIT_RULE, check_held, decode_errors, decode_image, output_size, pil, read_size,
                     resized_size)
from .image_folder import parse_options
from .listing import scan_folder

STREAM_KEYS = ("stream", "workers", "prefetch")


def _int_option(spec: Dict[str, Any], key: str, default: int, low: int) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError("data.source.%s: expected an int >= %d, got %r" % (key, low, value))
    return value


class StreamingImageFolder(Source):
    """A streamed ``image_folder`` source (see the module docstring), a ``pipeline.data.base.Source``.

    Attributes:
        kind: ``image_folder``; layout: ``NHWC``; channel_order: None; gathers_at_boundary: False
            (each batch is decoded from its own rows).
        root, classes, settings: as ``ImageFolderSource``.
        paths: np.ndarray of fixed-width bytes (N,), the file of each row relative to ``root``.
        labels: np.int64 (N,).
        shape: ``(N, H, W, C)`` of the images as the in-memory source would hold them.
        workers, prefetch: DataLoader worker processes and batches prefetched per worker.
        excluded: the run folders under ``root`` left out (relative paths, sorted).
    """

    kind = "image_folder"
    layout = "NHWC"
    channel_order = None
    gathers_at_boundary = False

    def __init__(self, root: str, classes: Any, paths: np.ndarray, labels: np.ndarray, size: Tuple[int, int],
                 settings: Dict[str, Any], workers: int, prefetch: int, excluded: Optional[List[str]] = None) -> None:
        self.root, self.classes, self.paths, self.labels, self.settings = root, list(classes), paths, labels, settings
        self._shape = (len(paths), size[0], size[1], MODES[settings["mode"]])
        self.workers, self.prefetch, self.excluded = workers, prefetch, list(excluded or [])
        self.color = settings["mode"]  # the channel order of the decoded images (RGB or L), as ImageFolderSource

    @property
    def shape(self) -> Tuple[int, ...]:
        """``(N, H, W, C)`` of the images as the in-memory source would hold them."""
        return self._shape

    def batches(self, rows: Any, batch_size: int, limit: Optional[int] = None, rank: int = 0,
                world: int = 1) -> Iterator[Batch]:
        """Decode this rank's batches of ``rows`` (a split: a slice, or an index array of
        ``pipeline.data.batching.split_rows``), in order.

        Batch ``i`` covers the rows ``i * batch_size ...`` of the part (the last may be shorter;
        for an index array, those rows sorted), at most ``limit`` batches in all ranks together;
        this rank gets those with ``i % world == rank``. Only those rows are decoded.

        Yields:
            ``Batch(view, labels, None, None)``: ``view`` a new uint8 NHWC tensor (n, H, W, C) owned
            by the source, ``labels`` np.int64 (n,) for the same rows.

        Raises:
            DataError: a file that cannot be decoded, is over ``max_pixels`` (``ImageTooLarge``) or has
                another size (naming it), with the same message whatever ``workers`` is; the
                DataLoader's workers are shut down before it propagates (and when the caller stops).
        """
        index = np.arange(*rows.indices(len(self)), dtype=np.int64) if isinstance(rows, slice) else \
            np.asarray(rows, dtype=np.int64)
        groups = [np.sort(index[i:i + batch_size]) for i in range(0, len(index), batch_size)][:limit]
        mine = groups[rank::world]
        dataset = _Batches(self.root, self.paths, mine, self.shape[1:], self.settings)
        extra = {"prefetch_factor": self.prefetch} if self.workers else {}
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, shuffle=False, num_workers=self.workers, **extra)
        it = iter(loader)
        try:
            for batch_rows in mine:
                images = next(it)
                if isinstance(images, PipelineError):
                    raise images  # a worker's DataError, as workers: 0 raises it
                yield Batch(images, self.labels[batch_rows], None, None)
        finally:
            shutdown = getattr(it, "_shutdown_workers", None)  # torch's own cleanup, also run when it is collected
            if shutdown is not None:
                shutdown()
            del it

    def describe(self) -> Dict[str, Any]:
        """For the report: what ``ImageFolderSource.describe`` gives that does not need the pixels."""
        counts = np.bincount(self.labels, minlength=len(self.classes))
        return {"kind": self.kind, "path": self.root, "shape": list(self.shape), "dtype": "uint8",
                "layout": self.layout, "mmap": False, "channel_order": None, "labels": len(self),
                "bytes": int(np.prod(self.shape)), "sha256": None, "streaming": True,
                "workers": self.workers, "prefetch": self.prefetch, "classes": list(self.classes),
                "class_counts": {c: int(n) for c, n in zip(self.classes, counts)}, "settings": dict(self.settings),
                "bit_depth": SIXTEEN_BIT_RULE, "excluded_run_folders": list(self.excluded),
                "note": "streamed: each batch decoded with Pillow when needed (DataLoader, %d workers)" % self.workers}

    def fingerprint(self) -> str:
        """sha256 of the index (paths, labels) and of each file's size and modification time (ns)."""
        h = hashlib.sha256(self.paths.tobytes())
        h.update(self.labels.tobytes())
        for rel in self.paths:
            st = os.stat(os.path.join(self.root, rel.decode("utf-8", "surrogateescape")))
            h.update(b"%d %d;" % (st.st_size, st.st_mtime_ns))
        return h.hexdigest()


class _Batches(torch.utils.data.Dataset):
    """Item ``k``: the decoded rows ``groups[k]`` (an int64 array) as one uint8 NHWC tensor (a worker
    decodes a whole batch), or the batch's first ``PipelineError`` (a DataError naming the file) as a
    value: an exception raised in a worker reaches the caller wrapped in the worker's traceback."""

    def __init__(self, root: str, paths: np.ndarray, groups: List[np.ndarray], image_shape: Tuple[int, ...],
                 settings: Dict[str, Any]) -> None:
        self.root, self.paths, self.groups, self.image_shape, self.settings = root, paths, groups, image_shape, settings

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, k: int) -> Any:
        try:
            return self._decode(self.groups[k])
        except PipelineError as exc:
            return exc

    def _decode(self, rows: np.ndarray) -> torch.Tensor:
        s = self.settings
        out = np.empty((len(rows),) + tuple(self.image_shape), dtype=np.uint8)
        errors = decode_errors(pil())
        limit = s["max_pixels"]
        crop = None if s["crop"] is None else tuple(s["crop"])
        resize = tuple(s["resize"]) if isinstance(s["resize"], list) else s["resize"]
        for j, row in enumerate(rows.tolist()):
            path = os.path.join(self.root, self.paths[row].decode("utf-8", "surrogateescape"))
            try:
                pixels = decode_image(path, s["mode"], resize, crop, limit)
            except errors as exc:
                raise DataError("image file %s cannot be decoded (%s: %s); a streamed folder cannot skip files: remove "
                                "or replace it" % (path, type(exc).__name__, exc))
            if pixels.shape != out.shape[1:]:
                raise DataError("image %s decodes to %s (HxWxC) but the stream's images are %s (the first file's size); "
                                "set data.source.crop or resize: [height, width] so that every image has one size"
                                % (path, "x".join(map(str, pixels.shape)), "x".join(map(str, out.shape[1:]))))
            out[j] = pixels
        return torch.from_numpy(out)


def open_streaming_image_folder(spec: Dict[str, Any], base_dir: str) -> StreamingImageFolder:
    """``data.source: {type: image_folder, stream: true, workers: 2, prefetch: 2, ...}``: the folder
    indexed (no pixel decoded; one header read when neither crop nor resize [h, w] fixes the size).

    Raises:
        ConfigError: bad options (as the in-memory source), ``skip_corrupt`` with ``stream``,
            ``workers`` < 0 or ``prefetch`` < 1.
        DataError: what ``scan_folder`` raises; the first file unreadable or, when its size sets the
            stream's, over ``max_pixels`` (``ImageTooLarge``).
    """
    workers = _int_option(spec, "workers", 2, 0)
    prefetch = _int_option(spec, "prefetch", 2, 1)
    opts = parse_options({k: v for k, v in spec.items() if k not in STREAM_KEYS}, base_dir)
    if opts["skip_corrupt"]:
        raise ConfigError("data.source: skip_corrupt cannot be combined with stream: true (a skipped file would shift "
                          "every later batch after the splits were cut); fix the files or decode the folder in memory")
    root, resize, crop = opts["root"], opts["resize"], opts["crop"]
    classes, files, excluded = scan_folder(root, opts["extensions"], opts["limit_per_class"])
    if opts["shuffle"]:
        files = [files[i] for i in np.random.default_rng(opts["seed"]).permutation(len(files))]
    if crop is not None or isinstance(resize, tuple):
        size = output_size((1, 1), resize, crop) if crop is None else crop
    else:
        first = os.path.join(root, files[0][0])
        try:
            header = read_size(first, opts["max_pixels"])
        except decode_errors(pil()) as exc:
            raise DataError("image file %s cannot be read (%s: %s); remove or replace it" % (first, type(exc).__name__, exc))
        check_held(first, header, resize, opts["mode"], opts["max_pixels"])
        size = resized_size(header, resize)
    paths = np.array([rel.encode("utf-8", "surrogateescape") for rel, _ in files], dtype=np.bytes_)
    labels = np.array([label for _, label in files], dtype=np.int64)
    settings = {"resize": list(resize) if isinstance(resize, tuple) else resize,
                "crop": None if crop is None else list(crop), "mode": opts["mode"],
                "extensions": list(opts["extensions"]), "skip_corrupt": False, "limit_per_class": opts["limit_per_class"],
                "shuffle": opts["shuffle"], "seed": opts["seed"], "max_pixels": opts["max_pixels"], "stream": True}
    return StreamingImageFolder(root, classes, paths, labels, (int(size[0]), int(size[1])), settings, workers, prefetch,
                                excluded)
