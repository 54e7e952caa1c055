"""Data sources: where images come from, never written and never copied before the quantizer boundary.

``open_source(spec, base_dir)`` looks ``spec["type"]`` up in the literal table ``SOURCES``; each
type's keys are in ``pipeline.data.base.SOURCE_FIELDS``, and every source implements the
``pipeline.data.base.Source`` protocol:

| type   | spec keys                                              | images                                   |
|--------|--------------------------------------------------------|------------------------------------------|
| digits | seed (0)                                               | scikit-learn's 1,797 real 8x8 digits, uint8 NHWC (N, 8, 8, 1), owned by the source; classes "0".."9" |
| npy    | path, labels (a .npy path, optional), layout (NHWC)    | ``np.load(path, mmap_mode="r")``: memory-mapped, read-only |
| npz    | path, images_key (images), labels_key (labels), layout | an uncompressed member is memory-mapped; a compressed one is read into memory |
| array  | images, labels, layout                                 | the caller's numpy array, any strides (read-only, negative strides) |
| tensor | images, labels, layout                                 | the caller's CPU torch tensor, any memory format |
| image_folder | root, resize, crop, mode, extensions, skip_corrupt, ... | ``root/<class>/<image>`` decoded with Pillow into one owned uint8 NHWC array (``pipeline.data.image_folder``) |
| image_folder, stream: true | the same, plus workers (2), prefetch (2) | decoded batch by batch by a DataLoader, never held whole (``pipeline.data.stream``) |

The first five (and the decoded image folder) are ``pipeline.data.memory.ArraySource``: images 4-D,
``layout`` NHWC (default) or NCHW, of a dtype torch can view, labels a 1-D integer array with one
entry per image delivered as np.int64, a negative-stride channel axis accepted without a copy
(``channel_order``, carried out at the quantizer boundary). The .npy and .npz files are read by
``pipeline.data.readers``, which checks every header before numpy maps or reads a byte. Each of
them takes ``class_names`` (a list, or a text file with one name per line: ``pipeline.data.class_names``).
"""
import gzip
import importlib.util
import os
import zipfile
from typing import Any, Callable, Dict, Tuple

import numpy as np
import torch

from ..errors import ConfigError, DataError
from ..specs import lookup
from .base import Source, check_source_keys
from .class_names import DIGITS, source_class_names
from .image_folder import open_image_folder as open_decoded_folder
from .memory import ArraySource
from .readers import NPY_MAGIC, load_npy, npz_member, npz_member_memmap, resolve_file
from .stream import open_streaming_image_folder


# ----------------------------------------------------------------------------- openers

def open_digits(spec: Dict[str, Any], base_dir: str) -> ArraySource:
    """scikit-learn's digits (``sklearn.datasets.load_digits``: 1,797 real 8x8 handwritten digits
    shipped with scikit-learn, no download), pixel values 0..16 scaled to uint8 0..255
    (``round(v * 255 / 16)``), as an owned read-only uint8 NHWC array (1797, 8, 8, 1), shuffled once
    with ``seed`` (default 0), so that a ``contiguous`` split is a random sample too. Labels 0..9, np.int64."""
    check_source_keys(spec, "digits")
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("data.source.seed: expected an int, got %r" % (seed,))
    pixels, target = _sklearn_digits()
    order = np.random.default_rng(seed).permutation(len(target))
    images = np.rint(pixels[order] * (255.0 / 16.0)).astype(np.uint8)[..., None]
    images.flags.writeable = False
    return ArraySource("digits", images, target[order], "NHWC",
                  note="sklearn.datasets.load_digits, shuffled with seed %d" % seed, color="L", classes=DIGITS)


def _sklearn_digits() -> Tuple[np.ndarray, np.ndarray]:
    """``(images, target)`` as ``sklearn.datasets.load_digits()`` returns them (float64 (1797, 8, 8)
    values 0..16, int64 labels), read from the ``datasets/data/digits.csv.gz`` scikit-learn ships the
    way its ``load_gzip_compressed_csv_data`` reads it (``np.loadtxt``, comma-separated, the label
    last), without importing scikit-learn (a second of import time); through ``load_digits`` when
    the file is not where scikit-learn keeps it."""
    spec = importlib.util.find_spec("sklearn")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    path = os.path.join(folders[0], "datasets", "data", "digits.csv.gz") if folders else ""
    if os.path.isfile(path):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = np.loadtxt(f, delimiter=",")
        return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits
    digits = load_digits()
    return digits.images, digits.target.astype(np.int64)


def open_npy(spec: Dict[str, Any], base_dir: str) -> ArraySource:
    """A .npy image array, memory-mapped read-only (``np.load(mmap_mode="r")``: no copy, pages are read
    as batches touch them), and optional labels from another .npy. Both files are checked first
    (``pipeline.data.readers.check_npy_file``): numpy's magic string, a numeric dtype and the full data length."""
    check_source_keys(spec, "npy")
    path = resolve_file(base_dir, spec["path"], "data.source.path", "a .npy file written by numpy.save")
    labels = spec.get("labels")
    if labels is not None:
        where = "data.source.labels"
        labels = load_npy(resolve_file(base_dir, labels, where, "a .npy file written by numpy.save"), False, where)
    images = load_npy(path, True, "data.source.path")
    source = ArraySource("npy", images, labels, spec.get("layout", "NHWC"), path=path, mmap=True, color=spec.get("color"))
    source.classes = source_class_names(spec, base_dir, source.labels)
    return source


def open_npz(spec: Dict[str, Any], base_dir: str) -> ArraySource:
    """Images (and labels) from a .npz: member ``images_key`` (default ``images``) is memory-mapped
    when stored uncompressed (``np.savez``); a compressed member (``np.savez_compressed``) is read
    into memory, and ``describe()`` says so. ``labels_key`` (default ``labels``) is optional: a
    missing default member means no labels."""
    check_source_keys(spec, "npz")
    path = resolve_file(base_dir, spec["path"], "data.source.path", "a .npz file written by numpy.savez")
    images_key = spec.get("images_key", "images")
    labels_key = spec.get("labels_key", "labels")
    try:
        with zipfile.ZipFile(path) as zf:
            members = {name[:-4]: zf.getinfo(name) for name in zf.namelist() if name.endswith(".npy")}
    except (zipfile.BadZipFile, OSError) as exc:
        with open(path, "rb") as f:
            npy = f.read(len(NPY_MAGIC)) == NPY_MAGIC
        if npy:
            raise ConfigError("data.source.path: %s is a .npy array, not a .npz archive; use type: npy" % path)
        raise DataError("%s is not a .npz archive written by numpy.savez or numpy.savez_compressed (%s)"
                        % (path, exc))
    if images_key not in members:
        raise ConfigError("data.source.images_key: %s has no member %r; members: %s"
                          % (path, images_key, ", ".join(sorted(members))))
    if "labels_key" in spec and labels_key not in members:
        raise ConfigError("data.source.labels_key: %s has no member %r; members: %s"
                          % (path, labels_key, ", ".join(sorted(members))))
    images = npz_member_memmap(path, members[images_key])
    note = ""
    if images is None:
        images = npz_member(path, images_key)
        note = "member %r is compressed: read into memory, not memory-mapped" % images_key
    labels = npz_member(path, labels_key) if labels_key in members else None
    source = ArraySource("npz", images, labels, spec.get("layout", "NHWC"), path=path, mmap=not note, note=note,
                         color=spec.get("color"))
    source.classes = source_class_names(spec, base_dir, source.labels)
    return source


def open_array(spec: Dict[str, Any], base_dir: str) -> ArraySource:
    """The caller's in-memory numpy array (``spec["images"]``), any strides: read-only arrays, memory
    maps and a negative-stride channel axis included. Never copied, never written."""
    check_source_keys(spec, "array")
    if not isinstance(spec["images"], np.ndarray):
        raise ConfigError("data.source.images: type 'array' takes a numpy array, got %s (use type 'tensor' for "
                          "torch tensors)" % type(spec["images"]).__name__)
    source = ArraySource("array", spec["images"], spec.get("labels"), spec.get("layout", "NHWC"), color=spec.get("color"))
    source.classes = source_class_names(spec, base_dir, source.labels)
    return source


def open_tensor(spec: Dict[str, Any], base_dir: str) -> ArraySource:
    """The caller's CPU torch tensor (``spec["images"]``), any memory format (contiguous,
    channels_last, strided views). Never copied, never written."""
    check_source_keys(spec, "tensor")
    if not isinstance(spec["images"], torch.Tensor):
        raise ConfigError("data.source.images: type 'tensor' takes a torch.Tensor, got %s (use type 'array' for "
                          "numpy arrays)" % type(spec["images"]).__name__)
    source = ArraySource("tensor", spec["images"], spec.get("labels"), spec.get("layout", "NHWC"), color=spec.get("color"))
    source.classes = source_class_names(spec, base_dir, source.labels)
    return source


def open_image_folder(spec: Dict[str, Any], base_dir: str) -> Source:
    """``root/<class>/<image>`` decoded into one owned uint8 NHWC array: see
    ``pipeline.data.image_folder.open_image_folder``; with ``stream: true`` (and optional
    ``workers``, ``prefetch``) streamed batch by batch instead: ``pipeline.data.stream``. Pillow loads
    only when an image folder is opened.

    Raises:
        ConfigError: ``stream`` not a bool; ``workers`` or ``prefetch`` without ``stream: true``; what
            the two openers raise.
    """
    stream = spec.get("stream", False)
    if not isinstance(stream, bool):
        raise ConfigError("data.source.stream: expected true or false, got %r" % (stream,))
    if stream:
        return open_streaming_image_folder(spec, base_dir)
    if "workers" in spec or "prefetch" in spec:
        raise ConfigError("data.source: workers and prefetch configure the streamed image folder; add stream: true "
                          "or remove them")
    return open_decoded_folder({k: v for k, v in spec.items() if k != "stream"}, base_dir)


SOURCES = {
    "digits": open_digits,
    "npy": open_npy,
    "npz": open_npz,
    "array": open_array,
    "tensor": open_tensor,
    "image_folder": open_image_folder,
}  # type: Dict[str, Callable[[Dict[str, Any], str], Source]]


def open_source(spec: Dict[str, Any], base_dir: str) -> Source:
    """Open the source described by ``spec`` (``{type: ..., ...}``, see the table above); relative
    paths resolve against ``base_dir`` (the YAML file's folder).

    Raises:
        ConfigError: unknown type or key (naming the valid ones and the closest match), missing file,
            a directory where a file is expected (naming type image_folder for a folder of images), a
            .npz given as type npy or a .npy as type npz.
        DataError: unreadable or unusable data: a file that is not a .npy written by numpy.save, an
            array of Python objects (pickles are refused on purpose), a truncated file (see also
            ``pipeline.data.memory.ArraySource``).
    """
    if not isinstance(spec, dict):
        raise ConfigError("data.source: expected a mapping such as {type: digits}, got %r" % (spec,))
    return lookup(SOURCES, spec.get("type"), "data.source")(spec, base_dir)
