"""The run folder: its paths, its lock, each step's saved results and their invalidation.

Layout (``work_dir``)::

    .pipeline-run               the mark: this folder was created (or found empty) by the pipeline
    config.resolved.yaml        the validated config, input paths made absolute
    model/float.pt              train: the float state_dict (or the configured model.weights)
    quantize_result/            calib: quant_info.json (+ bias_corr.pth), calib_fingerprint.json
    export/                     export: the backend's formats (e.g. <Model>_int*.onnx, <Model>_int.xmodel)
    compile/                    compile: compiled xmodel and log, or compile.sh + compile_plan.md
    deploy/                     deploy: the deploy bundle and its manifest
    steps/<step>.json           each step's results (pipeline.steps: one dataclass per step)
    steps/<step>.files.json     the files the step wrote in its folder (what invalidation removes)
    source.json                 the source: kind, shape, layout, splits, sha256 before and after the run
    status.json                 running (pid, step) from the start; ok, failed or interrupted at the end
                                (pipeline.runner.status: a killed run reads as interrupted)
    report.json, report.md      rewritten at each step's start and after every invocation from steps/*.json

This module knows no step: the driver (``pipeline.runner.driver``) passes each step's name and folder
as the step declarations (``pipeline.steps``) give them, and which results derive from which.

Ownership: the pipeline runs only in a folder it marked (``.pipeline-run``): a new or empty folder
gets the mark, a non-empty folder without it is refused (a user's project folder named as the run
folder), and a run folder made before the mark existed (``status.json`` and ``steps/``) is adopted.
Invalidation removes only the files a step's record lists, then the folders that became empty:
never a folder, nor a file a user put next to the results.
"""
import json
import logging
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from .. import fileio
from ..errors import PipelineError
from ..runmark import MARK_FILE
from .status import LOCK_FILE, STATUS_FILE, is_step_child

log = logging.getLogger("pipeline")

SOURCE_FILE = "source.json"  # the source's description, its splits, its sha256 before and after the run
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

    @property
    def is_main(self) -> bool:
        """True on rank 0 of a torch.distributed run and in a one-process run: the one that writes."""
        return self.comm is None or self.comm.is_main

    def path(self, *parts: str) -> str:
        """``work_dir/parts...``."""
        return os.path.join(self.work_dir, *parts)

    def save_step(self, step: str, result: Dict[str, Any]) -> Dict[str, Any]:
        """Write steps/<step>.json (rank 0 only); returns ``result``."""
        if self.is_main:
            fileio.write_json(self.path("steps", step + ".json"), result)
        return result

    def load_step(self, step: str) -> Optional[Dict[str, Any]]:
        p = self.path("steps", step + ".json")
        return fileio.read_json(p) if os.path.isfile(p) else None

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
        became empty, and ``steps/<name>.json``."""
        stale = []
        for name, folder in results:
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
        if not os.path.isfile(path):
            return []
        files = fileio.read_json(path).get("files", [])
        # only paths inside the run folder: the record is data, a hand-edited one must not reach outside
        return [f for f in files if isinstance(f, str) and not os.path.isabs(f)
                and os.path.normpath(f) == f and not f.startswith("..")]

    def remove_stale_temporaries(self) -> None:
        """Delete ``.<name>.*.tmp`` files an earlier, killed run left behind (pipeline.fileio names them so)."""
        for folder, _, files in os.walk(self.work_dir):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    os.remove(os.path.join(folder, name))


def lock_work_dir(work_dir: str) -> Any:
    """Create ``work_dir``, take an exclusive lock on it (fcntl.flock on .pipeline.lock) and claim it
    as a run folder (the module docstring, "Ownership").

    Raises:
        PipelineError: the folder cannot be created or written, another run holds the lock, or it
            holds files the pipeline did not write (nothing in it is changed).
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
        raise PipelineError("run.work_dir %s is in use by another run (%s); wait for it to finish or choose another "
                            "folder with --set run.work_dir=..." % (work_dir, holder or "pid unknown"))
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
    """Mark ``work_dir`` as a run folder, or refuse a folder that holds files the pipeline did not
    write (the lock file it just made is removed again then)."""
    mark = os.path.join(work_dir, MARK_FILE)
    if os.path.exists(mark):
        return
    others = sorted(n for n in os.listdir(work_dir) if n not in (LOCK_FILE, MARK_FILE))
    legacy = os.path.isfile(os.path.join(work_dir, STATUS_FILE)) and os.path.isdir(os.path.join(work_dir, "steps"))
    if others and not legacy:
        if made_lock:
            os.remove(os.path.join(work_dir, LOCK_FILE))
        raise PipelineError(
            "run.work_dir %s already holds files the pipeline did not write (%s%s): a run replaces and removes "
            "model/, export/, quantize_result/, compile/, deploy/ and more in its folder. Name a new or empty "
            "folder with --set run.work_dir=...; nothing was changed"
            % (work_dir, ", ".join(others[:5]), ", ..." if len(others) > 5 else ""))
    if legacy:
        log.info("%s: a run folder from before the ownership mark; marked as the pipeline's", work_dir)
    fileio.write_text(mark, json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
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
