"""The run folder's ``status.json``: written when a run starts and at every step, so it tells the truth
even after the run is killed.

States: ``running`` (with the pid, host, start time and current step), ``ok``, ``failed`` (step and
error), ``interrupted`` (step; Ctrl-C, or a run that died without a word). A SIGKILL, a power cut or
an out-of-memory kill leaves ``running`` behind; ``read_status`` then sees that nobody holds the run
folder's lock (``.pipeline.lock``, an ``fcntl.flock`` the runner takes for the whole run and the
kernel drops with the process) and reports the run as ``interrupted`` at its last step. The next run
into the folder does the same and records the dead run under ``previous``.

Child processes of the run that holds the lock (calib/test/export of the nndct backend, see
``pipeline.runner.driver``) leave ``status.json`` to their parent.
"""
import datetime
import os
import socket
from typing import Any, Dict, List, Optional

from .. import fileio
from ..errors import RunFolderError
from ..runlock import LOCK_FILE, holder
from .state import STATUS_FILE, check_fields, read_json_state

__all__ = ["STATUS_FILE", "LOCK_FILE", "LOCK_ENV", "is_step_child", "read_status", "RunStatus", "format_status"]
# the keys of status.json a reader relies on, with their types (pipeline.runner.state.check_fields)
STATUS_FIELDS = {"state": str, "steps": List[str], "step": Optional[str], "pid": int, "host": str, "started": str,
                 "step_started": str, "finished": str, "error": str, "world_size": int,
                 "previous": Optional[Dict[str, Any]]}
STATUS_FIX = "it is written anew by the next run into this folder; remove it to read the folder as never run"
LOCK_ENV = "PIPELINE_LOCKED_WORK_DIR"  # set for the child processes of the run that holds the lock


def is_step_child(work_dir: str) -> bool:
    """True in a process a run started for one of its steps (``LOCK_ENV``): it runs under that
    run's lock, and the run writes the status and reports the summary."""
    return os.environ.get(LOCK_ENV) == work_dir


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _lock_held(work_dir: str) -> Optional[bool]:
    """Whether some process holds the run folder's flock (None when there is no lock file)."""
    if not os.path.isfile(os.path.join(work_dir, LOCK_FILE)):
        return None
    return holder(work_dir) is not None


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_status(work_dir: str, strict: bool = False) -> Dict[str, Any]:
    """The state of the run folder ``work_dir``, as ``status.json`` says, corrected for a dead run.

    Returns:
        ``status.json``'s content (read as typed, bounded data: ``STATUS_FIELDS``); when it says
        ``running`` but the run is gone (its lock is free, or without a lock file its pid is dead or on
        another host), ``state`` is ``interrupted`` and ``error`` says at which step and since when.
        ``{"state": "unknown"}`` without a file; with a damaged one (not ``strict``), ``"unknown"`` and
        ``error`` saying which file, what was found and what to do.

    Raises:
        RunFolderError: ``strict`` and status.json is damaged (a folder, truncated JSON, not an object,
            a key of another type).
    """
    path = os.path.join(work_dir, STATUS_FILE)
    try:
        status = read_json_state(path, dict, "the run's status", STATUS_FIX)
        if status is not None:
            check_fields(status, STATUS_FIELDS, path, "the run's status", STATUS_FIX)
    except RunFolderError as exc:
        if strict:
            raise
        return {"state": "unknown", "error": str(exc)}
    if status is None:
        return {"state": "unknown"}
    if status.get("state") != "running":
        return status
    held = _lock_held(work_dir)
    if held is None:
        held = status.get("host") == socket.gethostname() and _pid_alive(status.get("pid"))
    if held:
        return status
    where = "during step %s" % status["step"] if status.get("step") else "before its first step"
    return dict(status, state="interrupted",
                error="the run (pid %s, started %s) stopped %s without finishing: it was killed or its machine "
                      "stopped; run the same command again to redo it" % (status.get("pid"), status.get("started"), where))


class RunStatus:
    """``status.json`` of the run that holds ``work_dir``'s lock.

    Args:
        work_dir: the run folder (locked by the caller).
        steps: the steps this run will do, in order.
        active: False for a process that must not write it (a torchrun rank other than 0).
    """

    def __init__(self, work_dir: str, steps: List[str], active: bool = True) -> None:
        self.work_dir = work_dir
        # a child process of the lock holder (nndct steps) leaves status.json to its parent
        self.owner = active and not is_step_child(work_dir)
        self.status = {"state": "running", "steps": list(steps), "step": None, "pid": os.getpid(),
                       "host": socket.gethostname(), "started": _now()}  # type: Dict[str, Any]
        self.previous = None  # type: Optional[Dict[str, Any]]

    def start(self) -> Optional[Dict[str, Any]]:
        """Record the run as running. Returns the previous run's status when it died running (it
        is kept under ``previous``), else None."""
        if not self.owner:
            return None
        old = read_status(self.work_dir) if os.path.isfile(os.path.join(self.work_dir, STATUS_FILE)) else None
        if old is not None and old.get("state") == "running":  # we hold the lock, so its holder is gone
            old = dict(old, state="interrupted")
        if old is not None and old.get("state") == "interrupted" and old.get("pid") is not None:
            self.previous = self.status["previous"] = {k: old.get(k) for k in ("pid", "step", "started", "steps")}
        self._write()
        return self.previous

    def step(self, name: str) -> None:
        """Record that step ``name`` starts now."""
        self.status.update(step=name, step_started=_now())
        self._write()

    def finish(self, state: str, error: Optional[str] = None) -> None:
        """Record the end: ``ok`` (the step field is dropped), ``failed`` or ``interrupted``."""
        self.status.update(state=state, finished=_now())
        if error is not None:
            self.status["error"] = error
        if state == "ok":
            self.status.pop("step", None)
            self.status.pop("step_started", None)
        self._write()

    def _write(self) -> None:
        if self.owner:
            fileio.write_json(os.path.join(self.work_dir, STATUS_FILE), self.status)


def format_status(work_dir: str, status: Dict[str, Any]) -> str:
    """``python -m pipeline status``'s text for people: the state, the step, the pid, the times, and what
    to do next (``status`` is ``read_status``'s result)."""
    state = status.get("state", "unknown")
    steps = status.get("steps") or []
    step = status.get("step")
    lines = ["run folder: %s" % work_dir]
    if state == "running":
        lines += ["state: running step %s (pid %s on %s)" % (step or "(starting)", status.get("pid"), status.get("host")),
                  "started: %s%s" % (status.get("started"), ", this step since %s" % status["step_started"]
                                     if status.get("step_started") else "")]
    elif state == "ok":
        lines += ["state: ok", "started: %s, finished: %s" % (status.get("started"), status.get("finished"))]
    elif state in ("failed", "interrupted"):
        lines += ["state: %s %s" % (state, "at step %s" % step if step else "before its first step"),
                  "started: %s%s" % (status.get("started"), ", stopped: %s" % status["finished"]
                                     if status.get("finished") else "")]
    else:
        lines.append("state: unknown: no run has recorded its status here")
    if steps:
        lines.append("steps of the run: %s" % ", ".join(steps))
    if status.get("error"):
        lines.append("%s: %s" % ("error" if state != "interrupted" else "why", status["error"]))
    previous = status.get("previous")
    if isinstance(previous, dict) and previous.get("pid") is not None:
        lines.append("the run before it (pid %s) was interrupted during step %s" % (previous.get("pid"), previous.get("step")))
    report = os.path.join(work_dir, "report.md")
    if os.path.isfile(report) and state != "unknown":
        lines.append("report: %s" % report)
    lines.append("next: %s" % _next_action(state, steps, step, status.get("pid")))
    return "\n".join(lines)


def _next_action(state: str, steps: List[str], step: Optional[str], pid: Any) -> str:
    if state == "running":
        return "wait for it to finish (run this command again to follow it), or stop it with kill %s" % pid
    if state == "ok":
        return "the results are in the report; run the steps again to redo them"
    if state in ("failed", "interrupted"):
        rest = steps[steps.index(step):] if step in steps else steps
        return ("%srun the same command again%s: the results of the steps before %s are kept"
                % ("fix the cause above, then " if state == "failed" else "",
                   " with --steps %s" % ",".join(rest) if rest and rest != steps else "", step or "it")
                if step else "run the same command again")
    return "run a config into this folder: python -m pipeline run CONFIG --set run.work_dir=<this folder>"
