"""The files one step hands to the next, recorded with their sha256 and checked before use.

A step that writes a file a later step reads (train's ``model/float.pt``; export's xmodel, ONNX files
and example input; compile's compiled xmodel or its plan) records, in its saved result
(``steps/<step>.json``, the ``handed_on`` field), each file's path relative to the run folder, its
sha256 and its size in bytes, taken right after it wrote the file. The step that reads it checks
the file against that record before using it (``verify``, ``read_verified``) and refuses a file that
is missing, empty, truncated, corrupted (one byte flipped) or replaced by another (another model's
xmodel), naming the file, what the record says, what was found and which step to run again. The
calibration keeps the same kind of record in its own folder (``quantizers/calib_commit.py``:
``calib_manifest.json``, written by the drop-in API too); both compare files with ``mismatch``.

``read_verified`` returns the bytes it checked, so whoever copies the file (the deploy bundle)
writes exactly the bytes that matched the record: a file changed after the check is never
vouched for.
"""
import hashlib
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union

from .errors import HandoffError
from .fileio import sha256_file

FIELD = "handed_on"  # the step result's field that holds the record
Digest = Dict[str, Any]  # {"sha256": hex, "bytes": size}


def digest_of(path: str) -> Digest:
    """``{"sha256": hex digest, "bytes": size}`` of the file ``path``."""
    return {"sha256": sha256_file(path), "bytes": os.path.getsize(path)}


def rel(work_dir: str, path: str) -> str:
    """``path`` (absolute, or relative to ``work_dir``) as a '/'-separated path relative to the run folder.

    Raises:
        HandoffError: the path lies outside the run folder (a bug: a step hands on only its own files).
    """
    full = path if os.path.isabs(path) else os.path.join(work_dir, path)
    out = os.path.relpath(os.path.abspath(full), os.path.abspath(work_dir))
    if out == ".." or out.startswith(".." + os.sep) or os.path.isabs(out):
        raise HandoffError("%s lies outside the run folder %s; a step hands on only files inside it (a bug, "
                           "please report it)" % (path, work_dir))
    return out.replace(os.sep, "/")


def record(work_dir: str, paths: Iterable[str]) -> Dict[str, Digest]:
    """The record of ``paths`` (files inside the run folder ``work_dir``): ``{relative path: digest_of}``."""
    return {rel(work_dir, p): digest_of(p if os.path.isabs(p) else os.path.join(work_dir, p)) for p in paths}


def _expected(value: Union[str, Mapping[str, Any]]) -> Tuple[str, Optional[int]]:
    if isinstance(value, str):  # the calibration manifest records the digest alone
        return value, None
    return str(value.get("sha256")), (int(value["bytes"]) if isinstance(value.get("bytes"), int) else None)


def _short(digest: str) -> str:
    return digest


def mismatch(path: str, expected: Union[str, Mapping[str, Any]], data: Optional[bytes] = None) -> Optional[str]:
    """None when the file ``path`` (or ``data``, its bytes already read) matches ``expected`` (a digest
    record or a bare sha256), else what was found instead, in words: missing, empty, N bytes fewer
    (truncated) or more than recorded, or the same size with other bytes."""
    want, size = _expected(expected)
    if data is None:
        if not os.path.isfile(path):
            return "it is missing" if not os.path.lexists(path) else "it is not a regular file"
        found, got = sha256_file(path), os.path.getsize(path)
    else:
        found, got = hashlib.sha256(data).hexdigest(), len(data)
    if found == want:
        return None
    if got == 0:
        return "it is empty (0 bytes)"
    if size is None:
        return "its sha256 is %s (%d bytes)" % (_short(found), got)
    if got < size:
        return "it has %d bytes, %d fewer than written (truncated), sha256 %s" % (got, size - got, _short(found))
    if got > size:
        return "it has %d bytes, %d more than written, sha256 %s" % (got, got - size, _short(found))
    return "it has the same size but other bytes, sha256 %s (corrupted, or another file of that size)" % _short(found)


def _recorded(handed_on: Optional[Mapping[str, Any]], name: str, writer: str, by: str, redo: str) -> Any:
    if not handed_on or name not in handed_on:
        raise HandoffError("%s: the %s step recorded no checksum of %s (a run folder written by an earlier "
                           "version of the pipeline, or a hand-edited steps/%s.json), so %s cannot tell it is the "
                           "file that step wrote; %s" % (by, writer, name, writer, by, redo))
    return handed_on[name]


def _refuse(by: str, name: str, writer: str, expected: Any, found: str, redo: str) -> HandoffError:
    want, size = _expected(expected)
    return HandoffError("%s: %s is not the file the %s step wrote: the record in steps/%s.json says sha256 %s%s, "
                        "but %s. It was removed, changed, truncated or replaced after the %s step wrote it; %s is not used. %s"
                        % (by, name, writer, writer, _short(want), "" if size is None else " (%d bytes)" % size,
                           found, writer, name, redo[0].upper() + redo[1:]))


def verify(work_dir: str, handed_on: Optional[Mapping[str, Any]], name: str, writer: str, by: str,
           redo: str) -> str:
    """Check the run folder's file ``name`` (relative to ``work_dir``, as recorded) against the record
    ``handed_on`` of the step ``writer``; return its absolute path.

    Args:
        by: the step (or part) that is about to read it, for the message.
        redo: what to do, e.g. "run the export step again: --steps export,compile,deploy".

    Raises:
        HandoffError: no record of the file, or the file does not match it (missing, empty, truncated,
            other bytes): names the file, the recorded and the found sha256 and size, and ``redo``.
    """
    expected = _recorded(handed_on, name, writer, by, redo)
    path = os.path.join(work_dir, *name.split("/"))
    found = mismatch(path, expected)
    if found is not None:
        raise _refuse(by, name, writer, expected, found, redo)
    return path


def read_verified(work_dir: str, handed_on: Optional[Mapping[str, Any]], name: str, writer: str, by: str,
                  redo: str) -> bytes:
    """The bytes of the run folder's file ``name``, read once and checked against the record (as
    ``verify``): what the caller then writes elsewhere is exactly what matched. Raises HandoffError."""
    expected = _recorded(handed_on, name, writer, by, redo)
    path = os.path.join(work_dir, *name.split("/"))
    if not os.path.isfile(path):
        raise _refuse(by, name, writer, expected, mismatch(path, expected) or "it cannot be read", redo)
    with open(path, "rb") as f:
        data = f.read()
    found = mismatch(path, expected, data)
    if found is not None:
        raise _refuse(by, name, writer, expected, found, redo)
    return data
