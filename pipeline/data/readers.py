"""The safe readers of .npy and .npz files: every header is checked before numpy maps or reads a
byte (numpy's magic string, a numeric dtype, the full data length, the memory a compressed member
needs), and pickles are refused (``allow_pickle=False``).

- ``resolve_file(base_dir, path, where, expected)``: a config path made absolute and checked (a file
  inside a run folder is refused: ``refuse_run_folder``).
- ``npy_header(f, name)``: ``(shape, fortran_order, dtype)`` of a .npy header.
- ``check_npy_file(path, where)``, ``load_npy(path, mmap, where)``: a .npy file checked, then
  memory-mapped read-only or read.
- ``npz_member_memmap(path, info)``, ``npz_member(path, key)``: a member of a .npz memory-mapped
  (stored uncompressed) or read into memory (compressed).
"""
import os
import struct
import zipfile
from typing import Any, Optional, Tuple

import numpy as np

from .. import cpu
from ..errors import ConfigError, DataError
from ..runmark import MARK_FILE, run_folder_of

NPY_MAGIC = b"\x93NUMPY"  # numpy.lib.format: every .npy file written by numpy.save starts with it
ZIP_MAGIC = b"PK\x03\x04"  # a .npz is a zip archive of .npy members
PICKLE_REFUSED = ("pickled data and object arrays are refused on purpose: loading them can run code from the "
                  "file (np.load(allow_pickle=False))")
IMAGE_FOLDER_HINT = "for a folder of image files use type: image_folder (root: <folder>)"


def resolve_file(base_dir: str, path: Any, where: str, expected: str = "a file") -> str:
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
    refuse_run_folder(full, where)
    return full


def refuse_run_folder(path: str, where: str) -> None:
    """Sources never read inside a run folder (``pipeline.runmark``): ConfigError naming ``where``,
    ``path`` and the run folder when ``path`` (a source's file or folder) lies at or below a folder
    holding the mark."""
    run = run_folder_of(path)
    if run is not None:
        raise ConfigError("%s: %s lies inside the run folder %s (it holds %s, the pipeline's mark): a run folder's "
                          "files are the pipeline's outputs, never data, and the next run into it replaces them. "
                          "Move or copy the data out of it" % (where, path, run, MARK_FILE))


def npy_header(f: Any, name: str) -> Tuple[Tuple[int, ...], bool, np.dtype]:
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


def check_npy_file(path: str, where: str) -> None:
    """Check that ``path`` is a complete .npy array of numbers before numpy maps or reads it.

    Raises:
        ConfigError: the file is a .npz archive (the config should say type: npz).
        DataError: see ``npy_header``; or the file is shorter than its header says (truncated).
    """
    with open(path, "rb") as f:
        if f.read(len(ZIP_MAGIC)) == ZIP_MAGIC:
            raise ConfigError("%s: %s is a .npz archive (a zip of arrays), not a .npy array; for images use "
                              "type: npz (with images_key/labels_key), for labels save a .npy with numpy.save"
                              % (where, path))
        f.seek(0)
        shape, _, dtype = npy_header(f, "%s: %s" % (where, path))
        offset = f.tell()
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    have = os.path.getsize(path) - offset
    if have < need:
        raise DataError("%s: %s is truncated: its header says shape %s dtype %s (%d bytes of data), but only %d "
                        "bytes follow; copy or write the file again" % (where, path, tuple(shape), dtype, need, have))


def load_npy(path: str, mmap: bool, where: str) -> np.ndarray:
    """The .npy array at ``path`` (checked by ``check_npy_file``), memory-mapped read-only when ``mmap``."""
    check_npy_file(path, where)
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError("cannot read %s as a .npy array: %s" % (path, exc))


def npz_member_memmap(path: str, info: zipfile.ZipInfo) -> Optional[np.ndarray]:
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
        shape, fortran, dtype = npy_header(f, name)
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


def npz_member(path: str, key: str) -> np.ndarray:
    """Member ``key`` of the .npz at ``path`` read into memory, after its header is checked
    (``npy_header``: no object arrays) and the size it declares against what the member holds and
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
            shape, _, dtype = npy_header(f, "%s member %s.npy" % (path, key))
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
                        % (path, key, tuple(shape), dtype, format_bytes(data), format_bytes(available)))
    try:
        with np.load(path, allow_pickle=False) as npz:
            return npz[key]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:  # numpy: "EOF: reading array data"
        raise DataError("%s member %s.npy cannot be read (%s); write the file again with numpy.savez"
                        % (path, key, exc))


def format_bytes(n: int) -> str:
    """``n`` bytes as "123456789 bytes (117.7 MiB)" (KiB, MiB or GiB, whichever gives 1 to 1023)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%d bytes (%.1f %s)" % (n, n / float(1 << shift), unit)
    return "%d bytes" % n
