"""Listing an ImageNet-style image folder (``root/<class>/<image>``): its classes and image files,
deterministically ordered, shared by the decoded and the streamed image folder.

- Classes are the visible sub-folders of ``root`` sorted by name; class ``i`` is label ``i``.
  Folders and files whose name starts with ``.`` are ignored; files directly in ``root`` are ignored.
- Images are the regular files under a class folder (recursively, links followed, a link back to a
  folder already walked skipped) whose extension is one of ``extensions`` (case-insensitive), sorted
  by their path relative to ``root``.
- Run folders are never read: a folder holding the pipeline's mark (``pipeline.runmark``) is left
  out with everything under it, whether it is a class folder or lies inside one, and a class folder
  that holds nothing but run folders (``runs/`` holding ``runs/<name>``) is no class. Each
  run folder left out is listed (``Listing.excluded``; the source's ``describe()``, the report) and
  logged once as a warning: a run writes PNG plots, which would otherwise be read as images.
"""
import logging
import os
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ..errors import DataError
from ..runmark import is_run_folder

log = logging.getLogger("pipeline")


class Listing(NamedTuple):
    """What ``scan_folder`` found.

    Fields:
        classes: class folder names sorted by name; label ``i`` is ``classes[i]``.
        files: ``(path relative to root, label)`` of each image, class by class, sorted by path.
        excluded: the run folders left out, relative to root, sorted.
    """

    classes: List[str]
    files: List[Tuple[str, int]]
    excluded: List[str]


def _visible(name: str) -> bool:
    return not name.startswith(".")


def _walk_class(root: str, name: str, extensions: Sequence[str], class_roots: dict,
                excluded: List[str]) -> Tuple[List[str], int]:
    """The image files (relative to ``root``, sorted) of class folder ``name`` and the count of other
    files; the run folders below it are appended to ``excluded``."""
    found, others = [], 0
    seen = set()  # type: set  # (st_dev, st_ino) of the folders walked: a link back up is a loop
    for folder, dirs, names in os.walk(os.path.join(root, name), followlinks=True):
        st = os.stat(folder)
        seen.add((st.st_dev, st.st_ino))
        real = os.path.realpath(folder)
        for other, other_real in class_roots.items():
            if other != name and (real == other_real or real.startswith(other_real + os.sep)):
                raise DataError("class folder %s reaches into the class folder %s through %s (a link): its "
                                "images would count as both classes; remove the link"
                                % (os.path.join(root, name), os.path.join(root, other), folder))
        kept = []
        for d in sorted(d for d in dirs if _visible(d)):
            path = os.path.join(folder, d)
            if is_run_folder(path):
                excluded.append(os.path.relpath(path, root))
                continue
            dst = os.stat(path)
            if (dst.st_dev, dst.st_ino) not in seen:
                kept.append(d)
        dirs[:] = kept
        for f in names:
            path = os.path.join(folder, f)
            # regular files only: a FIFO or device named like an image would block the decoder
            if _visible(f) and os.path.splitext(f)[1].lower() in extensions and os.path.isfile(path):
                found.append(os.path.relpath(path, root))
            else:
                others += 1
    return sorted(found), others


def scan_folder(root: str, extensions: Sequence[str], limit_per_class: Optional[int] = None) -> Listing:
    """The classes and image files of ``root`` (the module docstring), at most ``limit_per_class``
    files (the first ones in order) per class.

    Raises:
        DataError: no class folders (naming what ``root`` holds instead), a class folder without
            a file of ``extensions`` (naming the folder and what it holds), or one that reaches into
            another class folder through a link.
    """
    entries = sorted(os.listdir(root))
    folders = [e for e in entries if _visible(e) and os.path.isdir(os.path.join(root, e))]
    excluded = [e for e in folders if is_run_folder(os.path.join(root, e))]
    candidates = [e for e in folders if e not in excluded]
    class_roots = {name: os.path.realpath(os.path.join(root, name)) for name in candidates}
    classes, per_class = [], []  # type: List[str], List[List[str]]
    for name in candidates:
        before = len(excluded)
        found, others = _walk_class(root, name, extensions, class_roots, excluded)
        if not found and len(excluded) > before and not others:
            continue  # it holds run folders only: no class
        if not found:
            raise DataError("class folder %s holds no image files with extension %s (it holds %d other file(s)); "
                            "add images, remove the folder, or set data.source.extensions"
                            % (os.path.join(root, name), "/".join(extensions), others))
        classes.append(name)
        per_class.append(found[:limit_per_class])
    excluded.sort()
    if excluded:
        log.warning("image folder %s: %d run folder(s) left out, never read as data: %s", root, len(excluded),
                    ", ".join(excluded))
    if not classes:
        loose = [e for e in entries if os.path.splitext(e)[1].lower() in extensions]
        hint = (" It holds %d image file(s) directly (e.g. %s): move them into one folder per class, "
                "root/<class>/<image>" % (len(loose), loose[0])) if loose else ""
        runs = " other than run folders, left out: %s" % ", ".join(excluded) if excluded else ""
        raise DataError("image folder %s has no class folders; expected root/<class>/<image> with one sub-folder "
                        "per class (found %d entries, no visible sub-folders%s).%s"
                        % (root, len(entries), runs, hint))
    files = [(f, label) for label, found in enumerate(per_class) for f in found]
    return Listing(classes, files, excluded)
