"""Atomic file writes and checksums.

Every artifact is written under a temporary name in its final folder and renamed into place with
``os.replace`` (atomic on POSIX), so a run killed at any moment never leaves a half-written file
under a final name.
"""
import contextlib
import errno
import hashlib
import json
import os
import re
import tempfile
from typing import Any, Iterator, List, Sequence, Tuple

from .errors import StorageError

# errno values that mean "this folder cannot take the file": disk full, quota, file size limit,
# read-only file system, no permission. Other OSErrors are bugs and propagate as they are.
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
                  errno.EEXIST, errno.ENOTDIR)  # the last two: the folder (or one above it) is a file


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path next to ``path``; on success it is fsynced and renamed to ``path``.

    On an exception the temporary file is removed and ``path`` is untouched.

    Raises:
        StorageError: the folder cannot take the file (disk full, quota, file size limit, read-only
            or forbidden folder): one message naming the file and the folder.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
        os.close(fd)
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        if not os.stat(tmp).st_mode & 0o100:  # mkstemp makes 0600; give the file the usual permissions
            os.chmod(tmp, 0o666 & ~process_umask())
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        raise _storage_error(path, exc)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def _storage_error(path: str, exc: OSError) -> StorageError:
    """The one-line StorageError for a file the folder of ``path`` could not take (``exc``)."""
    name = os.path.basename(path)
    folder = os.path.dirname(os.path.abspath(path))
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return StorageError("cannot write %s in %s: that folder, or one above it, is a file; nothing was written. "
                            "Choose a folder path, then run again" % (name, folder))
    return StorageError("cannot write %s in %s: %s; nothing was left half-written (%s is %s). Free space or "
                        "choose a writable folder, then run again"
                        % (name, folder, exc.strerror or exc, name,
                           "unchanged" if os.path.exists(path) else "not there"))


def not_a_file(path: str) -> str:
    """Why ``path`` cannot be read as a file, for an error message: "is a folder, not a file" or
    "does not exist"."""
    return "is a folder, not a file" if os.path.isdir(path) else "does not exist"


def process_umask() -> int:
    """The process's file mode creation mask (os.umask set and restored)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str, data: bytes, executable: bool = False) -> str:
    """Write ``data`` to ``path`` atomically; returns ``path``. ``executable`` adds the x bits
    (as allowed by the umask), for scripts."""
    return write_files([(path, data)], executable)[0]


def write_files(items: Sequence[Tuple[str, bytes]], executable: bool = False) -> List[str]:
    """Write several files, each atomically as ``write_bytes`` does.

    Each ``(path, data)`` is written through the descriptor ``mkstemp`` opened, under a temporary
    name in its final folder; then each is fsynced (after all the writes, so that one journal
    commit can carry them all and the later fsyncs find little left to do); only when every file
    is on disk are they renamed into place, in the given order. So each file has the guarantees of ``write_bytes`` (never
    half-written under its final name, on disk before it gets it), and the renames keep the order
    of consecutive ``write_bytes`` calls.

    Returns:
        The paths, in order.

    Raises:
        StorageError: a folder cannot take its file (see ``atomic_path``); no temporary file is
            left, no file is renamed (when a rename itself fails, the earlier ones are done, as
            with consecutive ``write_bytes`` calls).
    """
    mode = (0o777 if executable else 0o666) & ~process_umask()
    fds, temps = [], []  # type: List[int], List[Tuple[str, str]]
    path = items[0][0] if items else ""
    try:
        for path, data in items:
            folder = os.path.dirname(os.path.abspath(path))
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
            fds.append(fd)
            temps.append((tmp, path))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)  # mkstemp makes 0600; give the file the usual permissions
        for fd, (_, path) in zip(fds, temps):  # after all the writes: a journal commit can take them together
            os.fsync(fd)
        while fds:
            os.close(fds.pop())
        for tmp, path in temps:
            os.replace(tmp, path)
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        raise _storage_error(path, exc)
    finally:
        for fd in fds:
            os.close(fd)
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.remove(tmp)
    return [p for p, _ in items]


def write_text(path: str, text: str, executable: bool = False) -> str:
    """Write UTF-8 ``text`` to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode("utf-8"), executable)


def json_bytes(obj: Any) -> bytes:
    """The bytes ``write_json`` writes for ``obj``: indented, key-sorted JSON and a newline, UTF-8."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")


def write_json(path: str, obj: Any) -> str:
    """Write ``obj`` as indented, key-sorted JSON (stable bytes for equal content); returns ``path``."""
    return write_bytes(path, json_bytes(obj))


def write_torch(path: str, obj: Any) -> str:
    """``torch.save(obj)`` to ``path`` atomically, with stable bytes.

    The object is serialized in memory first: ``torch.save`` names the records inside its zip
    archive after the file it writes to, so saving straight to a temporary file would put that
    random name into the bytes and two identical runs would differ.
    """
    return write_bytes(path, torch_bytes(obj))


def torch_bytes(obj: Any) -> bytes:
    """``torch.save(obj)``'s bytes, stable for equal objects (see ``write_torch``)."""
    import io

    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


MAX_JSON_DEPTH = 64  # the files the pipeline reads nest at most 5 levels (quant_config, quant_info, manifests)
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a string (skipped whole) or a bracket


class JSONDepthError(ValueError):
    """A JSON text nested deeper than ``MAX_JSON_DEPTH``: a ValueError, as ``json.JSONDecodeError`` is,
    so that every reader's "is not valid JSON" handler catches it with its own advice."""


def parse_json(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, after checking that no array or object nests deeper than ``max_depth``.

    Python's decoder recurses once per level, so a file of 100,000 ``[`` would otherwise end in a
    RecursionError traceback (or, near the limit, in whatever the next deep call does).

    Raises:
        JSONDepthError: the text nests deeper than ``max_depth`` (the message gives the line and
            column where the limit is passed).
        json.JSONDecodeError: the text is not JSON.
    """
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                pos = match.start()
                line = text.count("\n", 0, pos) + 1
                column = pos - (text.rfind("\n", 0, pos) + 1) + 1
                raise JSONDepthError("arrays/objects nested more than %d levels deep (line %d, column %d); the "
                                     "files this pipeline reads nest a few levels, so this one is not one of them"
                                     % (max_depth, line, column))
        elif token in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except RecursionError:  # unreachable below the limit; kept so no traceback can escape
        raise JSONDepthError("nested too deeply for Python's JSON decoder")


def read_json(path: str) -> Any:
    """Read a JSON file, bounded in depth (``parse_json``).

    Raises:
        OSError: the file cannot be opened.
        ValueError: the file is not JSON (``json.JSONDecodeError``), is not UTF-8
            (``UnicodeDecodeError``) or nests deeper than ``MAX_JSON_DEPTH`` (``JSONDepthError``).
    """
    with open(path, "r", encoding="utf-8") as f:
        return parse_json(f.read())


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
