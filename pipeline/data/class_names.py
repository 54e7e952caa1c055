"""The names of a source's classes: label ``i`` is ``names[i]``; the deploy bundle's ``words.txt``.

Where they come from: an image folder's class folder names (``pipeline.data.listing``), the digits
``"0"`` to ``"9"``, and for the array sources (npy, npz, array, tensor) the key ``class_names``: a
list of names, or a text file with one name per line (line ``i`` names label ``i``, as the Vitis AI
Library samples' ``words.txt`` does). A name is one non-empty line of text; the list names every
label the source has.
"""
import os
from typing import Any, List, Optional

import numpy as np

from ..errors import ConfigError

KEY = "class_names"
MAX_FILE_BYTES = 4 << 20  # 4 MiB: ImageNet-21k's names take 1.7 MiB
DIGITS = [str(d) for d in range(10)]


def check_names(names: Any, where: str, labels: Optional[np.ndarray]) -> List[str]:
    """``names`` as a list of str after checking: a non-empty list of non-empty strings without a line
    break, one for every label of ``labels`` (np.int64, or None). Raises ConfigError naming ``where``."""
    if not isinstance(names, (list, tuple)) or not names:
        raise ConfigError("%s: expected a non-empty list of class names (or a text file with one name per line), "
                          "got %r" % (where, names))
    out = []
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip() or "\n" in name or "\r" in name:
            raise ConfigError("%s: name %d is %r; each class name must be a non-empty line of text" % (where, i, name))
        out.append(name)
    if labels is not None and len(labels):
        top = int(np.max(labels))
        if top >= len(out):
            raise ConfigError("%s: %d names for labels that run up to %d; give one name per label (label i is name "
                              "i, counted from 0)" % (where, len(out), top))
    return out


def read_names_file(path: str, where: str) -> List[str]:
    """The lines of the UTF-8 text file ``path``, one class name each (a final line break and
    ``\\r\\n`` line ends allowed). Raises ConfigError: missing, not a file, too large, not UTF-8."""
    if not os.path.isfile(path):
        raise ConfigError("%s: %s is not a file; give a text file with one class name per line, or a list"
                          % (where, path))
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise ConfigError("%s: %s has %d bytes, more than the %d a class name file may have" % (where, path, size,
                                                                                                MAX_FILE_BYTES))
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError("%s: %s is not UTF-8 text (%s)" % (where, path, exc))
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def source_class_names(spec: Any, base_dir: str, labels: Optional[np.ndarray]) -> Optional[List[str]]:
    """The ``class_names`` of an array source's ``spec`` (a list, or a file resolved against ``base_dir``),
    checked against its ``labels``; None when the spec has none."""
    value = spec.get(KEY)
    where = "data.source." + KEY
    if value is None:
        return None
    if isinstance(value, str):
        path = value if os.path.isabs(value) else os.path.join(base_dir, value)
        value = read_names_file(path, where + " (%s)" % path)
        where += " (%s)" % path
    return check_names(value, where, labels)


NONE = ("none: the source names no classes; set data.source.class_names to a list, or to a text file with one name "
        "per line (line i names output i)")


def origin(spec: Any, classes: Optional[List[str]]) -> str:
    """Where a source's class names came from, for the deploy bundle (``spec``: the config's
    ``data.source``), or, when ``classes`` is None, that there are none and how to give them."""
    if classes is None:
        return NONE
    value = spec.get(KEY) if isinstance(spec, dict) else None
    if value is not None:
        return "data.source.%s%s" % (KEY, " (%s)" % value if isinstance(value, str) else "")
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "image_folder":
        return "the class folder names of the image folder %s, sorted by name" % spec.get("root")
    if kind == "digits":
        return "the digits 0 to 9"
    return "the source"
