"""Data sources: where images come from, never written and never copied before the quantizer boundary.

``open_source(spec, base_dir)`` looks ``spec["type"]`` up in the literal table ``SOURCES``:

| type   | spec keys                                              | images                                   |
|--------|--------------------------------------------------------|------------------------------------------|
| digits | seed (0)                                               | scikit-learn's 1,797 real 8x8 digits, uint8 NHWC (N, 8, 8, 1), owned by the source |
| npy    | path, labels (a .npy path, optional), layout (NHWC)    | ``np.load(path, mmap_mode="r")``: memory-mapped, read-only |
| npz    | path, images_key (images), labels_key (labels), layout | an uncompressed member is memory-mapped; a compressed one is read into memory |
| array  | images, labels, layout                                 | the caller's numpy array, any strides (read-only, negative strides) |
| tensor | images, labels, layout                                 | the caller's CPU torch tensor, any memory format |
| image_folder | root, resize, crop, mode, extensions, skip_corrupt, ... | ``root/<class>/<image>`` decoded with Pillow into one owned uint8 NHWC array (``pipeline.data.image_folder``) |
| image_folder, stream: true | the same, plus workers (2), prefetch (2) | decoded batch by batch by a DataLoader, never held whole (``pipeline.data.stream``) |

Images are 4-D, ``layout`` NHWC (default) or NCHW, of a dtype torch can view. Labels, when given,
are a 1-D integer array with one entry per image, delivered as np.int64.

A numpy array whose channel axis has a negative stride (``a[..., ::-1]``, the usual BGR->RGB flip,
public case P01) is accepted without a copy: the source's torch view reads the channels in memory
order and ``Source.channel_order`` ([C-1, ..., 0]) tells ``build_stages(specs, source=source)`` to
carry the reversal out at the quantizer boundary. A negative stride on any other axis is a DataError
(torch views cannot flip, and a copy here would be a second copy per batch).
"""
import gzip
import importlib.util
import os
import struct
import weakref
import zipfile
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union

import numpy as np
import torch

from .. import cpu
from ..errors import ConfigError, DataError
from ..config.specs import TENSOR_LAYOUTS, check_keys, lookup
from ..tensors import ArrayLike, as_torch_view, fingerprint_array, storage_ptr


# The keys of each data.source type: key -> (type, default; ... when required). The config's JSON
# Schema and its key check are generated from this table (pipeline/config/spec_models.py); the openers
# below check the keys against it and the values themselves.
_LAYOUT = Literal[TENSOR_LAYOUTS]  # type: ignore
_COLOR = Optional[Literal["RGB", "BGR", "L"]]
_SIZE = Optional[Union[int, List[int]]]
SOURCE_FIELDS = {
    "digits": {"seed": (int, 0)},
    "npy": {"path": (str, ...), "labels": (Optional[str], None), "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None)},
    "npz": {"path": (str, ...), "images_key": (str, "images"), "labels_key": (str, "labels"),
            "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None)},
    "array": {"images": (Any, ...), "labels": (Any, None), "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None)},
    "tensor": {"images": (Any, ...), "labels": (Any, None), "layout": (_LAYOUT, "NHWC"), "color": (_COLOR, None)},
    "image_folder": {"root": (str, ...), "resize": (_SIZE, None), "crop": (_SIZE, None),
                     "mode": (Literal["RGB", "L"], "RGB"), "extensions": (Optional[Union[str, List[str]]], None),
                     "skip_corrupt": (bool, False), "limit_per_class": (Optional[int], None),
                     "shuffle": (bool, True), "seed": (int, 0),
                     "stream": (bool, False), "workers": (int, 2), "prefetch": (int, 2)},
}  # type: Dict[str, Dict[str, Tuple[Any, Any]]]


def check_source_keys(spec: Dict[str, Any], kind: str) -> None:
    """ConfigError for a key of ``spec`` that ``SOURCE_FIELDS[kind]`` lacks, or a missing required one."""
    fields = SOURCE_FIELDS[kind]
    check_keys(spec, fields, [k for k, (_, default) in fields.items() if default is ...], "data.source")
HASH_LIMIT_BYTES = 256 << 20  # describe() hashes sources up to this size (about 0.5 s)

# storage address -> Source, for sources that defer a channel flip; lets Compose refuse their batches
# when it was built without them (a silent RGB/BGR swap otherwise). Entries vanish with the source.
_FLIPPED = weakref.WeakValueDictionary()  # type: weakref.WeakValueDictionary


class Source:
    """Images (and labels) the pipeline reads but never writes.

    Attributes:
        kind: the ``SOURCES`` name (``digits``, ``npy``, ``npz``, ``array``, ``tensor``).
        images: the caller's (or, for digits, the source's own) numpy array or torch tensor, 4-D,
            in ``layout``; never written (prove it with ``pipeline.tensors.fingerprint_array``).
        labels: np.int64 array of shape (N,), or None.
        layout: ``NHWC`` or ``NCHW`` (logical axis order of ``images``).
        tensor: a torch view of ``images`` with non-negative strides (no copy); batches are slices of it.
        channel_order: None, or ``[C-1, ..., 0]`` when ``images`` has a negative channel stride:
            channel ``c`` of the images is channel ``channel_order[c]`` of ``tensor``.
        path: the file read, or None. mmap: True when ``images`` is a memory map of that file.
        color: the channel order of ``images`` as stored: ``RGB``, ``BGR``, ``L`` (one gray channel),
            or None when the source does not say (spec key ``color`` of npy, npz, array, tensor).

    Raises:
        DataError: images not 4-D, empty, of an unsupported dtype, not on the CPU, flipped on a
            non-channel axis; labels not 1-D integers of length N.
    """

    def __init__(self, kind: str, images: ArrayLike, labels: Optional[np.ndarray] = None, layout: str = "NHWC",
                 path: Optional[str] = None, mmap: bool = False, note: str = "", color: Optional[str] = None) -> None:
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
            _FLIPPED[storage_ptr(self.tensor)] = self
        self.labels = _check_labels(kind, labels, images.shape[0])
        self.color = _check_color(color, int(images.shape[channel_axis]))

    def __len__(self) -> int:
        return int(self.images.shape[0])

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


def flipped_source_of(tensor: torch.Tensor) -> Optional[Source]:
    """The open source with a deferred channel flip whose storage ``tensor`` lies on, or None."""
    return _FLIPPED.get(storage_ptr(tensor)) if _FLIPPED else None


COLORS = {"RGB": 3, "BGR": 3, "L": 1}  # data.source.color -> channels


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


NPY_MAGIC = b"\x93NUMPY"  # numpy.lib.format: every .npy file written by numpy.save starts with it
ZIP_MAGIC = b"PK\x03\x04"  # a .npz is a zip archive of .npy members
PICKLE_REFUSED = ("pickled data and object arrays are refused on purpose: loading them can run code from the "
                  "file (np.load(allow_pickle=False))")
IMAGE_FOLDER_HINT = "for a folder of image files use type: image_folder (root: <folder>)"


def _resolve(base_dir: str, path: Any, where: str, expected: str = "a file") -> str:
    """``path`` made absolute against ``base_dir``; ConfigError naming ``where`` and what was
    ``expected`` when it is not a path, does not exist, or is a directory."""
    if not isinstance(path, str) or not path:
        raise ConfigError("%s: expected a file path, got %r" % (where, path))
    full = path if os.path.isabs(path) else os.path.normpath(os.path.join(base_dir, path))
    if os.path.isdir(full):
        hint = "; " + IMAGE_FOLDER_HINT.replace("<folder>", full) if where == "data.source.path" else ""
        raise ConfigError("%s: %s is a directory; %s is expected%s" % (where, full, expected, hint))
    if not os.path.isfile(full):
        raise ConfigError("%s: file %s does not exist" % (where, full))
    return full


def _npy_header(f: Any, name: str) -> Tuple[Tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` from the .npy header at the position of the binary file
    object ``f``, which is left at the first data byte. ``name`` names the file in errors.

    Raises:
        DataError: the bytes are not a .npy array written by numpy.save (a pickle, text, an empty
            file, a damaged header), or the array holds Python objects (refused on purpose).
    """
    start = f.read(len(NPY_MAGIC))
    if start != NPY_MAGIC:
        seen = "it is empty" if not start else "it starts with %r" % start
        raise DataError("%s is not a .npy array written by numpy.save (%s); %s. Write the array with "
                        "numpy.save(path, array)" % (name, seen, PICKLE_REFUSED))
    try:
        f.seek(f.tell() - len(NPY_MAGIC))
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version in ((2, 0), (3, 0)):  # 3.0 differs from 2.0 only in the text encoding of field names
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError("format version %d.%d, which this numpy does not read" % version)
    except ValueError as exc:
        raise DataError("%s: its .npy header cannot be read (%s); write the file again with numpy.save"
                        % (name, exc))
    if dtype.hasobject:
        raise DataError("%s holds an array of Python objects (dtype %s), not numbers; %s. Save a numeric "
                        "array (for example uint8 images)" % (name, dtype, PICKLE_REFUSED))
    return shape, fortran, dtype


def _check_npy_file(path: str, where: str) -> None:
    """Check that ``path`` is a complete .npy array of numbers before numpy maps or reads it.

    Raises:
        ConfigError: the file is a .npz archive (the config should say type: npz).
        DataError: see ``_npy_header``; or the file is shorter than its header says (truncated).
    """
    with open(path, "rb") as f:
        if f.read(len(ZIP_MAGIC)) == ZIP_MAGIC:
            raise ConfigError("%s: %s is a .npz archive (a zip of arrays), not a .npy array; for images use "
                              "type: npz (with images_key/labels_key), for labels save a .npy with numpy.save"
                              % (where, path))
        f.seek(0)
        shape, _, dtype = _npy_header(f, "%s: %s" % (where, path))
        offset = f.tell()
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    have = os.path.getsize(path) - offset
    if have < need:
        raise DataError("%s: %s is truncated: its header says shape %s dtype %s (%d bytes of data), but only %d "
                        "bytes follow; copy or write the file again" % (where, path, tuple(shape), dtype, need, have))


def _load_npy(path: str, mmap: bool, where: str) -> np.ndarray:
    """The .npy array at ``path`` (checked by ``_check_npy_file``), memory-mapped read-only when ``mmap``."""
    _check_npy_file(path, where)
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError("cannot read %s as a .npy array: %s" % (path, exc))


# ----------------------------------------------------------------------------- openers

def open_digits(spec: Dict[str, Any], base_dir: str) -> Source:
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
    return Source("digits", images, target[order], "NHWC",
                  note="sklearn.datasets.load_digits, shuffled with seed %d" % seed, color="L")


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


def open_npy(spec: Dict[str, Any], base_dir: str) -> Source:
    """A .npy image array, memory-mapped read-only (``np.load(mmap_mode="r")``: no copy, pages are read
    as batches touch them), and optional labels from another .npy. Both files are checked first
    (``_check_npy_file``): numpy's magic string, a numeric dtype and the full data length."""
    check_source_keys(spec, "npy")
    path = _resolve(base_dir, spec["path"], "data.source.path", "a .npy file written by numpy.save")
    labels = spec.get("labels")
    if labels is not None:
        where = "data.source.labels"
        labels = _load_npy(_resolve(base_dir, labels, where, "a .npy file written by numpy.save"), False, where)
    images = _load_npy(path, True, "data.source.path")
    return Source("npy", images, labels, spec.get("layout", "NHWC"), path=path, mmap=True, color=spec.get("color"))


def _npz_member_memmap(path: str, info: zipfile.ZipInfo) -> Optional[np.ndarray]:
    """Memory-map an uncompressed .npy member of a .npz (``np.savez`` stores members uncompressed),
    or return None when it is compressed.

    The member's .npy header is checked against the member's real extent before anything is
    mapped: the data the header promises must lie inside the member (its stored size, equal to its
    uncompressed size for a stored member) and inside the file. A member shorter than its header
    says would otherwise be mapped on into the next member or the zip directory (numpy.load refuses
    such a member with "EOF: reading array data").

    Raises:
        DataError: a member that is not a numeric .npy array, a damaged local header, or a member
            whose data is shorter than its header says (the message gives both sizes).
    """
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    name = "%s member %s" % (path, info.filename)
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)  # ZIP local file header: signature ... name length, extra length
        if local[:4] != b"PK\x03\x04":
            raise DataError("%s: its zip entry header is damaged (no local header signature at offset %d); write "
                            "the file again with numpy.savez" % (name, info.header_offset))
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        f.seek(start)
        shape, fortran, dtype = _npy_header(f, name)
        offset = f.tell()
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    member_end = start + info.file_size
    if info.compress_size != info.file_size or offset + need > member_end or member_end > file_size:
        have = max(0, min(member_end, file_size) - offset)
        raise DataError("%s is shorter than its .npy header says: shape %s dtype %s needs %d bytes of data, but the "
                        "member holds %d (stored size %d, uncompressed size %d, file %d bytes); reading it would run "
                        "into the next member. numpy.load refuses it too: write the file again with numpy.savez"
                        % (name, tuple(shape), dtype, need, have, info.compress_size, info.file_size, file_size))
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def _npz_member(path: str, key: str) -> np.ndarray:
    """Member ``key`` of the .npz at ``path`` read into memory, after its header is checked
    (``_npy_header``: no object arrays) and the size it declares against what the member holds and
    against the memory available (``cpu.available_memory_bytes``): numpy allocates what the header
    declares before it reads a byte.

    Raises:
        DataError: the header is not a numeric .npy header; it declares more bytes than the member
            holds (truncated or damaged); the data would not fit in the available memory (the
            message names the member, its size and the memory available); numpy cannot read it.
    """
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(key + ".npy")
        with zf.open(info) as f:
            shape, _, dtype = _npy_header(f, "%s member %s.npy" % (path, key))
            data = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            declared = data + f.tell()
    # numpy allocates what the header declares before it reads: check it against what the member holds
    if declared > info.file_size:
        raise DataError("%s member %s.npy: its header declares %s %s (%d bytes) but the member holds %d bytes; the "
                        "file is truncated or damaged: write it again with numpy.savez"
                        % (path, key, tuple(shape), dtype, declared, info.file_size))
    available = cpu.available_memory_bytes()
    if available is not None and data > available:
        raise DataError("%s member %s.npy: its %s %s data (%s) would be read into memory, but only %s is available; "
                        "store it uncompressed (numpy.savez, memory-mapped, never read whole), or free memory"
                        % (path, key, tuple(shape), dtype, _bytes(data), _bytes(available)))
    try:
        with np.load(path, allow_pickle=False) as npz:
            return npz[key]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:  # numpy: "EOF: reading array data"
        raise DataError("%s member %s.npy cannot be read (%s); write the file again with numpy.savez"
                        % (path, key, exc))


def _bytes(n: int) -> str:
    """``n`` bytes as "123456789 bytes (117.7 MiB)" (KiB, MiB or GiB, whichever gives 1 to 1023)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%d bytes (%.1f %s)" % (n, n / float(1 << shift), unit)
    return "%d bytes" % n


def open_npz(spec: Dict[str, Any], base_dir: str) -> Source:
    """Images (and labels) from a .npz: member ``images_key`` (default ``images``) is memory-mapped
    when stored uncompressed (``np.savez``); a compressed member (``np.savez_compressed``) is read
    into memory, and ``describe()`` says so. ``labels_key`` (default ``labels``) is optional: a
    missing default member means no labels."""
    check_source_keys(spec, "npz")
    path = _resolve(base_dir, spec["path"], "data.source.path", "a .npz file written by numpy.savez")
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
    images = _npz_member_memmap(path, members[images_key])
    note = ""
    if images is None:
        images = _npz_member(path, images_key)
        note = "member %r is compressed: read into memory, not memory-mapped" % images_key
    labels = _npz_member(path, labels_key) if labels_key in members else None
    return Source("npz", images, labels, spec.get("layout", "NHWC"), path=path, mmap=not note, note=note,
                  color=spec.get("color"))


def open_array(spec: Dict[str, Any], base_dir: str) -> Source:
    """The caller's in-memory numpy array (``spec["images"]``), any strides: read-only arrays, memory
    maps and a negative-stride channel axis included. Never copied, never written."""
    check_source_keys(spec, "array")
    if not isinstance(spec["images"], np.ndarray):
        raise ConfigError("data.source.images: type 'array' takes a numpy array, got %s (use type 'tensor' for "
                          "torch tensors)" % type(spec["images"]).__name__)
    return Source("array", spec["images"], spec.get("labels"), spec.get("layout", "NHWC"), color=spec.get("color"))


def open_tensor(spec: Dict[str, Any], base_dir: str) -> Source:
    """The caller's CPU torch tensor (``spec["images"]``), any memory format (contiguous,
    channels_last, strided views). Never copied, never written."""
    check_source_keys(spec, "tensor")
    if not isinstance(spec["images"], torch.Tensor):
        raise ConfigError("data.source.images: type 'tensor' takes a torch.Tensor, got %s (use type 'array' for "
                          "numpy arrays)" % type(spec["images"]).__name__)
    return Source("tensor", spec["images"], spec.get("labels"), spec.get("layout", "NHWC"), color=spec.get("color"))


def open_image_folder(spec: Dict[str, Any], base_dir: str) -> Any:
    """``root/<class>/<image>`` decoded into one owned uint8 NHWC array: see
    ``pipeline.data.image_folder.open_image_folder``; with ``stream: true`` (and optional
    ``workers``, ``prefetch``) streamed batch by batch instead: ``pipeline.data.stream``. Imported on
    use (that module subclasses ``Source``, and Pillow loads only when an image folder is opened)."""
    stream = spec.get("stream", False)
    if not isinstance(stream, bool):
        raise ConfigError("data.source.stream: expected true or false, got %r" % (stream,))
    if stream:
        from .stream import open_streaming_image_folder
        return open_streaming_image_folder(spec, base_dir)
    if "workers" in spec or "prefetch" in spec:
        raise ConfigError("data.source: workers and prefetch configure the streamed image folder; add stream: true "
                          "or remove them")
    from .image_folder import open_image_folder as open_folder
    return open_folder({k: v for k, v in spec.items() if k != "stream"}, base_dir)


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
            array of Python objects (pickles are refused on purpose), a truncated file (see also ``Source``).
    """
    if not isinstance(spec, dict):
        raise ConfigError("data.source: expected a mapping such as {type: digits}, got %r" % (spec,))
    return lookup(SOURCES, spec.get("type"), "data.source")(spec, base_dir)
