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

STATUS_FILE = "status.json"
LOCK_FILE = ".pipeline.lock"
LOCK_ENV = "PIPELINE_LOCKED_WORK_DIR"  # set for the child processes of the run that holds the lock


def is_step_child(work_dir: str) -> bool:
    """True in a process a run started for one of its steps (``LOCK_ENV``): it runs under that
    run's lock, and the run writes the status and reports the summary."""
    return os.environ.get(LOCK_ENV) == work_dir


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def _lock_held(work_dir: str) -> Optional[bool]:
    """Whether some process holds the run folder's flock (None when there is no lock file)."""
    import fcntl
    path = os.path.join(work_dir, LOCK_FILE)
    try:
        handle = open(path, "r")
    except OSError:
        return None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        handle.close()  # also drops the shared lock taken just now
    return False


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


def read_status(work_dir: str) -> Dict[str, Any]:
    """The state of the run folder ``work_dir``, as ``status.json`` says, corrected for a dead run.

    Returns:
        ``status.json``'s content; when it says ``running`` but the run is gone (its lock is free,
        or without a lock file its pid is dead or on another host), ``state`` is ``interrupted``
        and ``error`` says at which step and since when. ``{"state": "unknown"}`` without a file.
    """
    path = os.path.join(work_dir, STATUS_FILE)
    if not os.path.isfile(path):
        return {"state": "unknown"}
    try:
        status = fileio.read_json(path)
    except ValueError:
        return {"state": "unknown", "error": "%s is not valid JSON" % path}
    if not isinstance(status, dict):
        return {"state": "unknown", "error": "%s holds a JSON %s, not an object" % (path, type(status).__name__)}
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
