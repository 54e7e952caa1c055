"""The run folder: its paths, its lock, each step's saved results and their invalidation.

Layout (``work_dir``)::

    config.resolved.yaml        the validated config, input paths made absolute
    model/float.pt              train: the float state_dict (or the configured model.weights)
    quantize_result/            calib: quant_info.json (+ bias_corr.pth), calib_fingerprint.json
    export/                     export: the backend's formats (e.g. <Model>_int*.onnx, <Model>_int.xmodel)
    compile/                    compile: compiled xmodel and log, or compile.sh + compile_plan.md
    deploy/                     deploy: the deploy bundle and its manifest
    steps/<step>.json           each step's results (pipeline.steps: one dataclass per step)
    status.json                 running (pid, step) from the start; ok, failed or interrupted at the end
                                (pipeline.runstatus: a killed run reads as interrupted)
    report.json, report.md      rewritten at each step's start and after every invocation from steps/*.json

What each step writes and which steps derive from it come from the step declarations
(``pipeline.steps``): this module names no step but ``train`` (whose folder an outside
model.weights keeps) and ``calib`` (whose folder is complete or absent).
"""
import logging
import os
import shutil
from typing import Any, Dict, Optional

import yaml

from . import fileio
from .errors import PipelineError
from .runstatus import LOCK_ENV, LOCK_FILE

log = logging.getLogger("pipeline")


class RunDir:
    """Paths and saved step results of one run folder.

    Args:
        loaded: the validated config (``pipeline.config.LoadedConfig``); ``run.work_dir`` is the folder.
    """

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        self.cfg = loaded.cfg
        self.work_dir = loaded.work_dir
        self.comm = None  # type: Any  # pipeline.distributed.Comm under torchrun: rank 0 alone writes

    @property
    def is_main(self) -> bool:
        """True on rank 0 of a torch.distributed run and in a one-process run: the one that writes."""
        return self.comm is None or self.comm.is_main

    def path(self, *parts: str) -> str:
        return os.path.join(self.work_dir, *parts)

    @property
    def weights_path(self) -> str:
        return self.loaded.resolve(self.cfg.model.weights) or self.path("model", "float.pt")

    @property
    def quant_dir(self) -> str:
        return self.path("quantize_result")

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
        raw.setdefault("run", {})["work_dir"] = self.work_dir
        return fileio.write_text(self.path("config.resolved.yaml"), yaml.safe_dump(raw, sort_keys=True))

    def invalidate(self, step: str) -> None:
        """Remove the results of ``step`` and of the steps derived from it (``pipeline.steps.derived``),
        before ``step`` runs. The train step keeps model/ when model.weights names an outside file."""
        from .steps import BY_NAME, derived
        own = () if step == "train" and self.cfg.model.weights is not None else (step,)
        stale = []
        for name in own + derived(step):
            folder, result = self.path(BY_NAME[name].writes), self.path("steps", name + ".json")
            if name != step and (os.path.exists(folder) or os.path.exists(result)):
                stale.append(name)
            if os.path.isdir(folder):
                shutil.rmtree(folder)
            if os.path.exists(result):
                os.remove(result)
        if stale:
            log.info("%s: removed the results of %s, which came from the previous %s", step, ", ".join(stale), step)

    def drop_partial_calibration(self) -> None:
        """Remove quantize_result/ after a failed or interrupted calib step: its files are written one by
        one (each atomically), and under torchrun a rank can fail after rank 0 wrote quant_info.json but
        before the fingerprint; a calibration is complete or absent."""
        if os.path.isdir(self.quant_dir):
            shutil.rmtree(self.quant_dir)
            log.info("calib: removed the incomplete %s", self.quant_dir)

    def remove_stale_temporaries(self) -> None:
        """Delete ``.<name>.*.tmp`` files an earlier, killed run left behind (pipeline.fileio names them so)."""
        for folder, _, files in os.walk(self.work_dir):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    os.remove(os.path.join(folder, name))


def lock_work_dir(work_dir: str) -> Any:
    """Create ``work_dir`` and take an exclusive lock on it (fcntl.flock on .pipeline.lock).

    Raises:
        PipelineError: the folder cannot be created or written, or another run holds the lock.
    """
    if os.environ.get(LOCK_ENV) == work_dir:
        return None  # a child process of the run that holds the lock
    import fcntl
    try:
        os.makedirs(work_dir, exist_ok=True)
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
    handle.seek(0)
    handle.truncate()
    handle.write("pid %d" % os.getpid())
    handle.flush()
    return handle


def unlock(handle: Any) -> None:
    if handle is not None:
        handle.close()  # closing releases the flock
