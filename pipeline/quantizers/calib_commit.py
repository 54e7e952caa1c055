"""A calibration is committed as one unit: ``calib_manifest.json``, written first as "writing" and last
with every file's sha256.

A calibration is several files (``quant_info.json``, ``bias_corr.pth``, ``calib_fingerprint.json``),
each renamed into place on its own. A process killed between two renames would leave, say, a new
bias table beside old fix positions; test mode would run on that mix and match neither calibration.
So whoever writes a calibration (the runner's calib step, the drop-in ``export_quant_config``):

0. ``with exclusive(out_dir):`` holds an exclusive lock on the folder for the whole export, so two
   processes exporting into one folder at once (two drop-in scripts) take turns instead of
   interleaving their files;
1. ``begin(out_dir)``: the manifest says ``"state": "writing"`` (it replaces the old manifest
   first, so from here on the folder holds no committed calibration);
2. writes the files (each atomically, ``pipeline.fileio``);
3. ``commit(out_dir, paths, digests)``: the manifest says ``"state": "complete"`` with each file's
   sha256, taken from the bytes this process wrote (``digests``), not read back from the folder: a
   file another writer replaced meanwhile (one that does not take the lock, or a folder where locks
   do not work) then no longer matches, and ``check_committed`` refuses the mix instead of
   vouching for it. Only files this process did not write itself (the real quantizer's, in the
   nndct backend) are hashed from the folder, under the lock.

Readers (the drop-in's test mode) hold the shared lock while they check and load, so they never
read a folder an export is halfway through.

The lock is ``fcntl.flock`` on the folder itself (no lock file is left in it). Where flock is not
available (Windows) or the file system refuses it (some network mounts), the export goes on without
the lock and warns once; the written-bytes digests still make a mix refused rather than accepted.

``check_committed`` (test mode, the test, export and deploy steps) refuses a folder whose manifest says
"writing" (an interrupted calibration), lists a file that is missing or whose bytes changed (a mix
of two calibrations; the files are compared as every hand-off between steps is, ``pipeline.handoff``),
and then compares the calibration fingerprint
(``pipeline.quantizers.fingerprint``). A folder without a manifest was not written by this package
(the real quantizer's ``quant_info.json``): the drop-in API accepts it, the runner does not.
"""
import contextlib
import datetime
import errno
import hashlib
import os
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional

from ..errors import QuantizationError
from ..fileio import read_json, sha256_file, write_json
from ..handoff import mismatch
from .fingerprint import FILE_NAME as FINGERPRINT_FILE
from .fingerprint import check_fingerprint, read_fingerprint

MANIFEST_FILE = "calib_manifest.json"

try:
    import fcntl
except ImportError:  # Windows: no flock; see the module docstring
    fcntl = None  # type: ignore

_UNLOCKABLE = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF)
_warned_unlocked = False


@contextlib.contextmanager
def exclusive(out_dir: str, shared: bool = False) -> Iterator[None]:
    """Hold a lock on the folder ``out_dir`` (``fcntl.flock`` on the folder itself) for the block.

    Exclusive (the default) for a writer, created first when missing: a second export into the same
    folder waits until this one has committed. ``shared=True`` for a reader (the folder must exist;
    a missing one is left to the reader's own checks): it waits while an export runs, and readers do
    not wait for each other.

    Where the lock cannot be taken (no ``fcntl`` on this platform, a file system without flock, a
    folder this process may not open), it warns once and the block runs unlocked.

    Raises:
        StorageError: a writer's ``out_dir`` cannot be created (a file is in the way, no permission).
    """
    global _warned_unlocked
    if not shared:
        from ..fileio import STORAGE_ERRNOS, _storage_error
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            raise _storage_error(os.path.join(out_dir, MANIFEST_FILE), exc)
    fd = None
    reason = None  # type: Optional[str]
    if fcntl is None:
        reason = "this platform has no fcntl.flock"
    elif os.path.isdir(out_dir):
        try:
            fd = os.open(out_dir, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError as exc:
            if fd is not None:
                os.close(fd)
                fd = None
            if exc.errno not in _UNLOCKABLE + (errno.EACCES, errno.EPERM):
                raise
            reason = "flock on %s failed (%s)" % (out_dir, exc.strerror)
    if reason is not None and not _warned_unlocked:
        _warned_unlocked = True
        warnings.warn("calibration folders are not locked: %s. Two processes exporting a calibration into one "
                      "folder at the same time are then not kept apart (a mix they leave is refused when it is "
                      "read, not prevented): give each process its own output_dir" % reason)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data`` (what ``commit`` records for a file written from these bytes)."""
    return hashlib.sha256(data).hexdigest()


def begin(out_dir: str) -> str:
    """Mark ``out_dir`` as holding a calibration being written (creates the folder); returns the path."""
    os.makedirs(out_dir, exist_ok=True)
    return write_json(os.path.join(out_dir, MANIFEST_FILE),
                      {"state": "writing", "pid": os.getpid(),
                       "started": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()})


def commit(out_dir: str, paths: Iterable[str], digests: Optional[Dict[str, str]] = None) -> str:
    """Record the calibration in ``out_dir`` as complete: the name and sha256 of each file of ``paths``
    (all inside ``out_dir``). Returns the manifest path.

    Args:
        digests: ``{path: sha256}`` of the bytes this process wrote to those paths (``sha256_bytes``);
            recorded as they are, so a file replaced since the write is refused by ``check_committed``.
            A path of ``paths`` without a digest (a file another program wrote, e.g. the real
            quantizer's) is hashed from the folder: call this under ``exclusive(out_dir)``.

    Raises:
        QuantizationError: a path lies outside ``out_dir`` (a bug).
    """
    written = dict((os.path.abspath(k), v) for k, v in (digests or {}).items())
    files = {}  # type: Dict[str, str]
    for path in paths:
        if os.path.dirname(os.path.abspath(path)) != os.path.abspath(out_dir):
            raise QuantizationError("calibration file %s lies outside %s; this is a bug, please report it"
                                    % (path, out_dir))
        digest = written.get(os.path.abspath(path))
        files[os.path.basename(path)] = digest if digest is not None else sha256_file(path)
    return write_json(os.path.join(out_dir, MANIFEST_FILE), {"state": "complete", "files": files})


def read_manifest(out_dir: str) -> Optional[Dict[str, Any]]:
    """The manifest of ``out_dir``, or None when there is none (a calibration not written by this package)."""
    path = os.path.join(out_dir, MANIFEST_FILE)
    if not os.path.isfile(path):
        return None
    try:
        manifest = read_json(path)
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        raise QuantizationError("%s is damaged (not a JSON object); run the calibration again" % path)
    return manifest


def check_committed(out_dir: str, expected: Optional[Dict[str, Any]] = None, ignore: Iterable[str] = (),
                    require: bool = True, redo: str = "run the calibration again",
                    warn_only: Iterable[str] = ()) -> bool:
    """Refuse an interrupted or mixed calibration in ``out_dir`` and one made for something else.

    Args:
        out_dir: the calibration folder.
        expected: the fingerprint of what is about to use the calibration (``make_fingerprint``),
            compared with the stored one when the calibration has one; None: not compared.
        ignore: fingerprint fields not compared. Stored fields ``expected`` does not have (the
            runner's ``config.*`` keys, seen from the drop-in API) are not compared either.
        require: refuse a folder without a manifest (the runner); otherwise such a folder (the real
            quantizer's output) is accepted and False is returned.
        redo: what to do, for the messages (e.g. "run the calib step again").
        warn_only: fingerprint fields whose difference warns (UserWarning naming them) instead of
            refusing: the drop-in API's ``weights_hash``, as the real quantizer tests any weights.

    Returns:
        True for a committed calibration of this package, False for a folder without a manifest.

    Raises:
        QuantizationError: no manifest (with ``require``), an interrupted calibration, a file missing
            or changed since the commit. FingerprintMismatchError: the fingerprint differs (every
            differing field named).
    """
    manifest = read_manifest(out_dir)
    if manifest is None:
        if require:
            raise QuantizationError("%s has no %s: it holds no complete calibration made by this pipeline; %s"
                                    % (out_dir, MANIFEST_FILE, redo))
        return False
    if manifest.get("state") != "complete":
        raise QuantizationError("the calibration in %s was interrupted while its files were written (pid %s, started "
                                "%s): the folder may mix an old and a new calibration, so it is not used; %s"
                                % (out_dir, manifest.get("pid"), manifest.get("started"), redo))
    problems, found_instead = [], []  # type: List[str], List[str]
    for name, digest in sorted((manifest.get("files") or {}).items()):
        found = mismatch(os.path.join(out_dir, name), digest)  # the hand-off check every step uses
        if found == "it is missing":
            problems.append("%s is missing" % name)
        elif found is not None:
            problems.append("%s is not the file the calibration wrote" % name)
            found_instead.append("%s: %s" % (name, found))
    if problems:
        raise QuantizationError("the calibration in %s is not the one committed in %s (%s): files from another "
                                "calibration or edits were mixed in, so it is not used%s; %s"
                                % (out_dir, MANIFEST_FILE, "; ".join(problems),
                                   " (%s)" % "; ".join(found_instead) if found_instead else "", redo))
    if expected is not None and FINGERPRINT_FILE in (manifest.get("files") or {}):
        stored = read_fingerprint(out_dir)
        skip = set(ignore) | (set(stored) - set(expected))
        soft = sorted(k for k in set(warn_only) - skip if stored.get(k) != expected.get(k))
        if soft:
            warnings.warn("the calibration in %s was made for other %s (the fix positions and bias corrections "
                          "describe those); %s for these" % (out_dir, ", ".join(soft), redo))
        check_fingerprint(out_dir, expected, ignore=skip | set(warn_only), redo=redo)
    return True
