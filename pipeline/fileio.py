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
import tempfile
from typing import Any, Iterator

from .errors import StorageError

# errno values that mean "this folder cannot take the file": disk full, quota, file size limit,
# read-only file system, no permission. Other OSErrors are bugs and propagate as they are.
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)


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
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        raise StorageError("cannot write %s in %s: %s; nothing was left half-written (%s is %s). Free space or "
                           "choose a writable folder, then run again"
                           % (os.path.basename(path), folder, exc.strerror or exc, os.path.basename(path),
                              "unchanged" if os.path.exists(path) else "not there"))
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str, data: bytes, executable: bool = False) -> str:
    """Write ``data`` to ``path`` atomically; returns ``path``. ``executable`` adds the x bits
    (as allowed by the umask), for scripts."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
        if executable:
            os.chmod(tmp, 0o777 & ~_umask())
    return path


def write_text(path: str, text: str, executable: bool = False) -> str:
    """Write UTF-8 ``text`` to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode("utf-8"), executable)


def write_json(path: str, obj: Any) -> str:
    """Write ``obj`` as indented, key-sorted JSON (stable bytes for equal content); returns ``path``."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_torch(path: str, obj: Any) -> str:
    """``torch.save(obj)`` to ``path`` atomically, with stable bytes.

    The object is serialized in memory first: ``torch.save`` names the records inside its zip
    archive after the file it writes to, so saving straight to a temporary file would put that
    random name into the bytes and two identical runs would differ.
    """
    import io

    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    return write_bytes(path, buf.getvalue())


def read_json(path: str) -> Any:
    """Read a JSON file."""
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
