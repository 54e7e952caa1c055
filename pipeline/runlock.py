"""The run folder's lock: its file name (this module is its one owner) and the question every writer
that is not the run asks before it writes under a path: "does a run hold the folder this path lies in?"

A run holds ``<run folder>/.pipeline.lock`` with an exclusive ``fcntl.flock`` for its whole length
(``pipeline.runner.folder.lock_work_dir``; the kernel drops it with the process, so a killed run holds
nothing) and writes ``pid <n>`` into it. ``holder`` probes the lock with a shared, non-blocking flock
and drops it at once: it never waits and never keeps a run out. The drop-in API
(``pipeline.apis``) refuses to write into a folder a run holds (its calibration, exports, inspection
reports), and ``python -m pipeline status`` tells a live run from a killed one with it.

Where ``fcntl`` is missing (Windows) nothing can be probed: ``holder`` answers None (not held).
"""
import os
from typing import Optional, Tuple

LOCK_FILE = ".pipeline.lock"
_HOLDER_BYTES = 200  # "pid 1234": what the run writes; more is not read


def holder(folder: str) -> Optional[str]:
    """Who holds the run lock of ``folder``: ``"pid 1234"`` as the run wrote it, ``"a process that has
    not written its pid yet"`` while it starts, or None when nobody holds it (no lock file, a free lock,
    a lock file this process may not open, no ``fcntl``)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        handle = open(os.path.join(folder, LOCK_FILE), "rb")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = handle.read(_HOLDER_BYTES).decode("utf-8", "replace").strip()
            return text if text.startswith("pid ") and text[4:].isdigit() else "a process that has not written its pid yet"
        return None  # closing the handle drops the shared lock taken just now


def locked_run_of(path: str) -> Optional[Tuple[str, str]]:
    """``(run folder, holder)`` for the nearest folder at or above ``path`` whose run lock a process
    holds now, or None. ``path`` need not exist; it is made absolute and its folders are looked at
    as written and, where links make them differ, as resolved (``realpath``)."""
    seen = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        folder = start
        while folder not in seen:
            seen.add(folder)
            who = holder(folder) if os.path.isfile(os.path.join(folder, LOCK_FILE)) else None
            if who is not None:
                return folder, who
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    return None
