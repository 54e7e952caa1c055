"""The run folder: its paths, its lock, each step's saved results and their invalidation.

Layout (``work_dir``)::

    .pipeline-run               the mark: this folder was created (or found empty) by the pipeline
    config.resolved.yaml        the validated config, input paths made absolute
    model/float.pt              train: the float state_dict (or the configured model.weights)
    quantize_result/            calib: quant_info.json (+ bias_corr.pth), calib_fingerprint.json
    qat/                        qat (quantizer.qat.enabled): quant_info.json (shipped), test/quant_info.json
                                (raw), deployable.pth (trained weights), qat_record.json, loss.png
    export/                     export: the backend's formats (e.g. <Model>_int*.onnx, <Model>_int.xmodel)
    compile/                    compile: compiled xmodel and log, or compile.sh + compile_plan.md
    deploy/                     deploy: the deploy bundle and its manifest
    steps/<step>.json           each step's results (pipeline.steps: one dataclass per step), paths in it
                                relative to the run folder
    steps/<step>.files.json     the files the step wrote in its folder (what invalidation removes)
    source.json                 the source: kind, shape, layout, splits, sha256 before and after the run
    status.json                 running (pid, step) from the start; ok, failed or interrupted at the end
                                (pipeline.runner.status: a killed run reads as interrupted)
    report.json, report.md      rewritten at each step's start and after every invocation from steps/*.json

This module knows no step: the driver (``pipeline.runner.driver``) passes each step's name and folder
as the step declarations (``pipeline.steps``) give them, and which results derive from which.

Ownership: the pipeline reads and writes only a folder it marked (``.pipeline-run``): a new or empty
folder gets the mark; a folder without it that holds anything is refused with nothing changed and
nothing read (``pipeline.runner.state.check_owned``), a user's project folder named as the run folder
and a run folder from before the mark alike (no adoption by shape). Invalidation removes only the
files a step's record lists, then the folders that became empty: never a folder, nor a file a user
put next to the results.

Every state file is read through ``pipeline.runner.state`` (typed, bounded, a ``RunFolderError`` naming
the file and what to do), and the paths a saved step result holds are stored relative to the run
folder, so the folder can be moved or copied.
"""
import json
import logging
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import yaml

from .. import fileio
from ..errors import PipelineError, RunFolderError
from ..runmark import MARK_FILE
from . import state
from .state import SOURCE_FILE, check_owned
from ..runlock import LOCK_FILE
from .status import is_step_child

log = logging.getLogger("pipeline")

__all__ = ["RunDir", "lock_work_dir", "unlock", "MARK_FILE", "SOURCE_FILE", "check_owned"]
Snapshot = Dict[str, Tuple[int, int, int]]  # relative path -> (inode, size, mtime_ns)


class RunDir:
    """Paths and saved step results of one run folder.

    Args:
        loaded: the validated config (``pipeline.config.LoadedConfig``); ``run.work_dir`` is the folder.
        comm: the ``pipeline.distributed.Comm`` under torchrun (rank 0 alone writes), else None.
    """

    def __init__(self, loaded: Any, comm: Any = None) -> None:
        self.loaded = loaded
        self.work_dir = loaded.work_dir
        self.comm = comm  # pipeline.distributed.Comm under torchrun: rank 0 alone writes
        # steps whose saved results this run replaces (the driver sets it): a damaged one reads as absent
        self.replacing = set()  # type: Set[str]
        self._warned = set()  # type: Set[str]

    @property
    def is_main(self) -> bool:
        """True on rank 0 of a torch.distributed run and in a one-process run: the one that writes."""
        return self.comm is None or self.comm.is_main

    def path(self, *parts: str) -> str:
        """``work_dir/parts...``."""
        return os.path.join(self.work_dir, *parts)

    def save_step(self, step: str, result: Dict[str, Any]) -> Dict[str, Any]:
        """Write steps/<step>.json (rank 0 only), every path inside the run folder in it made relative to
        the folder (``state.relative_paths``: a moved or copied folder reads the same); returns ``result``."""
        if self.is_main:
            fileio.write_json(self.path("steps", step + ".json"), state.relative_paths(result, self.work_dir))
        return result

    def load_step(self, step: str) -> Optional[Dict[str, Any]]:
        """The saved results of ``step`` (``steps/<step>.json``), or None when it has none; its paths
        inside the run folder are relative to it (``pipeline.steps.base.in_run_folder`` joins them).

        Read as typed, bounded data (``state.read_json_state``; each field checked against the step's
        result class). A damaged file of a step this run replaces (``replacing``) reads as None, with a
        warning: the run removes it before anything could read it.

        Raises:
            RunFolderError: the file is damaged (a folder, truncated JSON, another JSON type, a field of
                another type): which file, what was expected and found, and to run the step again.
        """
        from ..steps import BY_NAME  # the result class of the step named: the driver's floor knows no step
        path = self.path("steps", step + ".json")
        what, fix = "the %s step's results" % step, state.step_fix(step)
        try:
            data = state.read_json_state(path, dict, what, fix)
            if data is not None and step in BY_NAME:
                state.check_fields(data, state.field_hints(BY_NAME[step].result), path, what, fix)
        except RunFolderError as exc:
            if step not in self.replacing:
                raise
            if step not in self._warned:
                self._warned.add(step)
                log.warning("%s. This run replaces it", str(exc).split("; ")[0])
            return None
        return data

    def require(self, step: str, by: str) -> Dict[str, Any]:
        """The results of an earlier ``step`` that ``by`` needs; PipelineError saying to run it first."""
        result = self.load_step(step)
        if result is None:
            raise PipelineError("%s: the %s step has not run in %s (or its results were removed when an earlier "
                                "step ran again); run it first, e.g. --steps %s,%s" % (by, step, self.work_dir, step, by))
        return result

    def write_resolved_config(self) -> str:
        """Write config.resolved.yaml with input paths made absolute, so a child process can run it."""
        raw = self.loaded.absolute_raw()
        return fileio.write_text(self.path("config.resolved.yaml"), yaml.safe_dump(raw, sort_keys=True))

    def snapshot(self, folder: str) -> Snapshot:
        """The files under ``folder`` (relative to the run folder) now, to tell later which ones a step wrote."""
        return _files(self.work_dir, folder)

    def record_written(self, name: str, folder: str, before: Snapshot) -> None:
        """Add to ``steps/<name>.files.json`` the files under ``folder`` that are new or were rewritten
        since ``before`` (rank 0 only; also after a failed step, whose partial files the next
        invalidation must find)."""
        if not self.is_main:
            return
        now = _files(self.work_dir, folder)
        written = sorted(set(self._recorded(name)) | {p for p, key in now.items() if before.get(p) != key})
        if written:
            fileio.write_json(self._record_path(name), {"files": written})

    def invalidate(self, asked: str, results: Sequence[Tuple[str, str]]) -> None:
        """Before step ``asked`` runs: remove ``results``, ``(name, folder)`` of each step whose results
        derive from it (the step graph says which, ``pipeline.steps.invalidated``), and ``asked`` itself
        unless its output comes from the config: the files each record lists, the folders that
        became empty, ``steps/<name>.json``, and the traceback of an internal error a previous run of
        the step left (``steps/<name>.internal_error.txt``, ``cli.internal_error``)."""
        stale = []
        for name, folder in results:
            error = self.path("steps", name + ".internal_error.txt")
            if os.path.isfile(error):
                os.remove(error)
            result = self.path("steps", name + ".json")
            had_result = os.path.exists(result)
            removed = self.remove_written(name, folder)
            if name != asked and (removed or had_result):
                stale.append(name)
            if had_result:
                os.remove(result)
        if stale:
            log.info("%s: removed the results of %s, which came from the previous %s", asked, ", ".join(stale), asked)

    def remove_written(self, name: str, folder: str) -> List[str]:
        """Delete the files step ``name`` wrote (its record), then the folders under its ``folder`` that are
        empty now, then the record; returns the record (paths relative to the run folder). Files it
        has no record of stay, with a warning."""
        folder = self.path(folder)
        recorded = self._recorded(name)
        for rel in recorded:
            path = os.path.join(self.work_dir, rel)
            if os.path.isfile(path) or os.path.islink(path):
                os.remove(path)
        for root, _, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
            if not os.listdir(root):
                os.rmdir(root)
        if os.path.exists(self._record_path(name)):
            os.remove(self._record_path(name))
        if os.path.isdir(folder):
            log.warning("%s: left %s in %s: the pipeline has no record of writing it; remove it if it is stale",
                        name, ", ".join(sorted(os.listdir(folder))[:5]), folder)
        return recorded

    def drop_partial(self, name: str, folder: str) -> None:
        """Remove what a failed or interrupted step whose output is one unit wrote (its files are
        written one by one, each atomically, and under torchrun a rank can fail after rank 0 wrote
        some of them): that output is complete or absent."""
        if self._recorded(name):
            self.remove_written(name, folder)
            log.info("%s: removed the incomplete %s", name, self.path(folder))

    def _record_path(self, name: str) -> str:
        return self.path("steps", name + ".files.json")

    def _recorded(self, name: str) -> List[str]:
        path = self._record_path(name)
        record, damaged = state.read_record(path)
        if damaged:  # nothing is removed on its word: what it listed stays, and is reported as unrecorded
            log.warning("%s; it is ignored and replaced: the files it listed stay until you remove them", damaged)
        files = (record or {}).get("files", [])
        # only paths inside the run folder: the record is data, a hand-edited one must not reach outside
        return [f for f in files if isinstance(f, str) and not os.path.isabs(f)
                and os.path.normpath(f) == f and not f.startswith("..")]

    def remove_stale_temporaries(self) -> None:
        """Delete ``.<name>.*.tmp`` files an earlier, killed run left behind (pipeline.fileio names them so)."""
        for folder, _, files in os.walk(self.work_dir):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    os.remove(os.path.join(folder, name))


def in_use(work_dir: str, holder: Optional[str]) -> PipelineError:
    """The error for a run folder whose lock another run holds (``holder``: ``"pid 1234"`` or None)."""
    return PipelineError("run.work_dir %s is in use by another run (%s); wait for it to finish or choose another "
                         "folder with --set run.work_dir=..." % (work_dir, holder or "pid unknown"))


def lock_work_dir(work_dir: str) -> Any:
    """Create ``work_dir``, take an exclusive lock on it (fcntl.flock on .pipeline.lock) and claim it
    as a run folder (the module docstring, "Ownership").

    Raises:
        PipelineError: the folder cannot be created or written, or another run holds the lock.
        RunFolderError: it is not the pipeline's (``state.check_owned``; nothing in it is changed).
    """
    if is_step_child(work_dir):
        return None  # a child process of the run that holds the lock
    import fcntl
    try:
        os.makedirs(work_dir, exist_ok=True)
        made_lock = not os.path.exists(os.path.join(work_dir, LOCK_FILE))
        handle = open(os.path.join(work_dir, LOCK_FILE), "a+")
    except OSError as exc:
        raise PipelineError("run.work_dir %s cannot be used as the run folder (%s); choose a writable folder "
                            "with --set run.work_dir=..." % (work_dir, exc.strerror or exc))
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise in_use(work_dir, holder)
    try:
        _claim(work_dir, made_lock)
    except PipelineError:
        handle.close()
        raise
    handle.seek(0)
    handle.truncate()
    handle.write("pid %d" % os.getpid())
    handle.flush()
    return handle


def _claim(work_dir: str, made_lock: bool) -> None:
    """Mark ``work_dir`` as a run folder when it is empty, or refuse a folder that is not the pipeline's
    (``state.check_owned``; the lock file it just made is removed again then)."""
    try:
        owned = check_owned(work_dir)
    except RunFolderError:
        if made_lock:
            os.remove(os.path.join(work_dir, LOCK_FILE))
        raise
    if not owned:
        fileio.write_text(os.path.join(work_dir, MARK_FILE),
                          json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                      "by": "pipeline (python -m pipeline run)"}) + "\n")


def _files(work_dir: str, folder: str) -> Snapshot:
    """Every file under ``work_dir/folder``: relative path -> (inode, size, mtime_ns)."""
    out = {}  # type: Snapshot
    for root, _, names in os.walk(os.path.join(work_dir, folder)):
        for name in names:
            path = os.path.join(root, name)
            st = os.lstat(path)
            out[os.path.relpath(path, work_dir)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def unlock(handle: Any) -> None:
    if handle is not None:
        handle.close()  # closing releases the flock
