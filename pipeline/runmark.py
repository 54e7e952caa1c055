"""The run folder's mark: its file name (this module is its one owner) and the question every reader
of a user's path asks of it, "does this path lie inside a run folder?".

A run folder is a folder holding ``MARK_FILE``: the pipeline writes it when it claims the folder
(``pipeline.runner.folder``) and, from then on, owns every file it writes there (invalidation
removes and replaces them). So no source reads inside one: ``pipeline.data`` leaves run folders out
of an image folder's listing and refuses a source path inside one, and the config refuses a
run.work_dir inside its own source (``pipeline.config.loading``). A folder without the mark is no run
folder here, whatever else it holds.
"""
import os
from typing import Optional

MARK_FILE = ".pipeline-run"


def is_run_folder(folder: str) -> bool:
    """True when ``folder`` holds the mark."""
    return os.path.isfile(os.path.join(folder, MARK_FILE))


def run_folder_of(path: str) -> Optional[str]:
    """The nearest folder at or above ``path`` that holds the mark, or None. ``path`` is made absolute;
    its ancestors are looked at as written and, where links differ, as resolved (``realpath``), so a
    link into a run folder is found too."""
    seen = set()
    for start in (os.path.abspath(path), os.path.realpath(path)):
        folder = start if os.path.isdir(start) else os.path.dirname(start)
        while folder not in seen:
            seen.add(folder)
            if is_run_folder(folder):
                return folder
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    return None


def lies_inside(path: str, folder: str) -> bool:
    """True when ``path`` is ``folder`` or lies below it, links resolved (neither needs to exist)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
