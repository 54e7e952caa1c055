"""The run folder's own files read as typed, bounded data, and the question asked before anything
reads or writes a folder: is it the pipeline's?

Every read of a state file (``status.json``, ``source.json``, ``steps/<step>.json``,
``steps/<step>.files.json``, the mark) goes through ``read_json_state``: a regular file (not a folder,
not a FIFO) of at most ``MAX_STATE_BYTES``, UTF-8 JSON nested at most ``fileio.MAX_JSON_DEPTH`` levels,
of the expected JSON type; ``check_fields`` then checks each field of a step's saved result against its
dataclass annotation. Anything else is a ``RunFolderError`` that names the file, what was expected,
what was found and what to do (rerun the step that writes it, remove it, or use another folder).

Paths inside the run folder are stored relative to it (``relative_paths``, applied to every saved
step result), so a folder that is moved or copied reads the same; readers join them to the folder's
current location (``pipeline.steps.base.in_run_folder``).

Ownership (``check_owned``): the pipeline reads and writes only a folder it marked (``MARK_FILE``,
written when it created the folder or found it empty). A folder without the mark that holds anything is
refused with nothing changed, whatever it holds: a run folder of a version from before the mark
(``status.json`` and ``steps/``) is not adopted either, since its shape proves nothing about who wrote
it; the error says so and what to do.
"""
import dataclasses
import json
import os
import stat
import typing
from typing import Any, Callable, Dict, Optional, Tuple

from .. import fileio
from ..errors import RunFolderError
from ..runlock import LOCK_FILE
from ..runmark import MARK_FILE

MAX_STATE_BYTES = 64 << 20  # the largest state file: report.json of a big model's per-layer table is ~1 MiB
STATUS_FILE = "status.json"
SOURCE_FILE = "source.json"  # the source's description, its splits, its sha256 before and after the run
RESOLVED_CONFIG = "config.resolved.yaml"
REPORT_FILES = ("report.json", "report.md", "report.html")
STEPS_DIR = "steps"
# entries every run rewrites or reads, with the kind each must be
STATE_ENTRIES = ((MARK_FILE, "file"), (LOCK_FILE, "file"), (STATUS_FILE, "file"), (SOURCE_FILE, "file"),
                 (RESOLVED_CONFIG, "file"), (REPORT_FILES[0], "file"), (REPORT_FILES[1], "file"), (REPORT_FILES[2], "file"),
                 (STEPS_DIR, "folder"))


def kind_of(path: str) -> str:
    """What ``path`` is, for messages: "a file", "a folder", "a FIFO", ..., or "nothing" (missing)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if os.path.islink(path) else "nothing"
    except OSError as exc:
        return "an entry that cannot be read (%s)" % (exc.strerror or exc)
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a folder"
    return {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device",
            stat.S_IFBLK: "a device"}.get(stat.S_IFMT(mode), "a special file")


def json_kind(value: Any) -> str:
    """The JSON type of ``value`` for messages: "an object", "a list", "a string", ..."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else type(value).__name__


def read_json_state(path: str, expected: type, what: str, fix: str) -> Any:
    """The JSON content of the state file ``path``, or None when it does not exist.

    Args:
        path: the file. expected: ``dict`` or ``list``, the JSON type it must hold.
        what: what the file holds, for the message ("the calib step's results").
        fix: what the user does about a bad file ("rerun the calib step (--steps calib)").

    Raises:
        RunFolderError: ``path`` is a folder or a special file, larger than ``MAX_STATE_BYTES``, not
            UTF-8, not JSON (truncated), nested too deeply, or holds another JSON type: one message
            with the file, what was expected, what was found and ``fix``.
    """
    expect = "%s (a JSON %s)" % (what, "object" if expected is dict else "list")
    kind = kind_of(path)
    if kind == "nothing":
        return None
    if kind != "a file":
        raise state_error(path, expect, kind, fix)
    size = os.path.getsize(path)
    if size > MAX_STATE_BYTES:
        raise state_error(path, expect, "a file of %d bytes, more than the %d a state file may have" % (size, MAX_STATE_BYTES),
                          fix)
    try:
        with open(path, "rb") as f:
            data = fileio.parse_json(f.read(MAX_STATE_BYTES + 1).decode("utf-8"))
    except UnicodeDecodeError:
        raise state_error(path, expect, "bytes that are not UTF-8 text", fix)
    except json.JSONDecodeError as exc:
        raise state_error(path, expect, "%s JSON (%s: line %d, column %d)" % (
            "truncated" if exc.pos >= len(exc.doc.rstrip()) else "invalid", exc.msg, exc.lineno, exc.colno), fix)
    except ValueError as exc:  # fileio.JSONDepthError
        raise state_error(path, expect, "JSON %s" % exc, fix)
    if not isinstance(data, expected):
        raise state_error(path, expect, "%s" % json_kind(data), fix)
    return data


def state_error(path: str, expected: str, found: str, fix: str) -> RunFolderError:
    """The one message of a bad state file: which, what was expected, what was found, what to do."""
    return RunFolderError("%s: expected %s, found %s; %s" % (path, expected, found, fix))


def step_fix(step: str) -> str:
    """What to do about a bad ``steps/<step>.json``."""
    return ("run the %s step again (--steps %s), which writes it anew, or remove the file (the results of %s are "
            "then gone)" % (step, step, step))


def rendered(name: str, what: Callable[[], Any]) -> Any:
    """``what()``, a step result's rendering; a saved result whose content the rendering cannot use
    (a key missing or of another type deep inside it) is a RunFolderError naming its file and the fix."""
    try:
        return what()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise RunFolderError("%s: expected the %s step's results as this version of the pipeline writes them, "
                             "found content it cannot use (%s: %s); %s" % (os.path.join("steps", name + ".json"), name,
                                                                        type(exc).__name__, exc, step_fix(name)))


def field_hints(result_class: Any) -> Dict[str, Any]:
    """``{field: annotation}`` of the dataclass ``result_class`` (a step's result)."""
    hints = typing.get_type_hints(result_class)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(result_class)}


def check_fields(data: Dict[str, Any], hints: Dict[str, Any], path: str, what: str, fix: str) -> Dict[str, Any]:
    """``data`` when each of its keys named in ``hints`` (``{key: annotation}``, e.g. ``field_hints``)
    holds a value of that type (an int for a float accepted); other keys are left to the reader (a step
    result's ``from_json`` ignores them). Raises RunFolderError naming the first key that does not."""
    for name, hint in hints.items():
        if name in data and not _matches(data[name], hint):
            raise state_error(path, "%s, whose %r is %s" % (what, name, type_name(hint)),
                              "%s (%s)" % (json_kind(data[name]), _short(data[name])), fix)
    return data


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _matches(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Union:
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        item = args[0] if args else Any
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        key, item = args if args else (Any, Any)
        return isinstance(value, dict) and all(_matches(k, key) or key is int and str(k).lstrip("-").isdigit()
                                               for k in value) and all(_matches(v, item) for v in value.values())
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def type_name(hint: Any) -> str:
    """A type annotation in JSON words: "a number", "a list of strings", "an object or null"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return " or ".join(type_name(a) for a in args)
    if origin in (list, tuple):
        return "a list of %s" % _plural(type_name(args[0])) if args and args[0] is not Any else "a list"
    if origin is dict:
        return "an object of %s" % _plural(type_name(args[1])) if args and args[1] is not Any else "an object"
    return {type(None): "null", float: "a number", int: "an integer", str: "a string", bool: "true/false",
            list: "a list", dict: "an object"}.get(hint, "any value" if hint is Any else getattr(hint, "__name__", str(hint)))


def _plural(name: str) -> str:
    return name.split(" ", 1)[1] + "s" if name.startswith(("a ", "an ")) and " or " not in name else name


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (JSON: dicts, lists, tuples as lists) with ``fn`` applied to every string in it."""
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, fn) for v in value]
    return fn(value) if isinstance(value, str) else value


def relative_paths(value: Any, root: str) -> Any:
    """``value`` (a step result's JSON) with every string that is an absolute path at or under the run
    folder ``root`` made relative to it (``"."`` for ``root`` itself); other values unchanged."""
    def relative(text: str) -> str:
        if os.path.isabs(text) and (text == root or text.startswith(root.rstrip(os.sep) + os.sep)):
            return os.path.relpath(text, root)
        return text
    return _map_strings(value, relative)


def relative_in_text(value: Any, root: str) -> Any:
    """``value`` (a report's JSON) with the run folder ``root``'s path cut out of every string that names a
    file under it (``"...; the file was kept as <root>/export/m.onnx.rejected"`` -> ``"... as
    export/m.onnx.rejected"``; ``root`` made absolute, as the run folder's paths are); other values unchanged."""
    prefix = os.path.join(os.path.abspath(root), "")
    return _map_strings(value, lambda text: text.replace(prefix, ""))


def check_owned(work_dir: str) -> bool:
    """Whether the pipeline may use ``work_dir`` as its run folder; reads only, changes nothing.

    Returns True when it holds the mark, False when it does not exist or is empty (the run creates
    and marks it).

    Raises:
        RunFolderError: ``work_dir`` is not a folder; its mark is not a file or not the pipeline's; it
            holds anything without the mark (a user's folder, or a run folder from before the mark:
            neither is adopted); one of the files every run rewrites is a folder or the other way round.
    """
    kind = kind_of(work_dir)
    if kind == "nothing":
        return False
    if kind != "a folder":
        raise RunFolderError("run.work_dir %s cannot be used as the run folder: it is %s, not a folder; name a new "
                             "or empty folder with --set run.work_dir=...; nothing was changed" % (work_dir, kind))
    mark = os.path.join(work_dir, MARK_FILE)
    if kind_of(mark) == "nothing":
        others = sorted(n for n in os.listdir(work_dir) if n != LOCK_FILE)
        if not others:
            return False
        raise RunFolderError(_not_ours(work_dir, others))
    read_json_state(mark, dict, "the pipeline's mark of a run folder", "this folder was not made by the pipeline: "
                    "name a new or empty folder with --set run.work_dir=...; nothing was changed")
    check_entries(work_dir)
    return True


def _not_ours(work_dir: str, others: Any) -> str:
    listed = "%s%s" % (", ".join(others[:5]), ", ..." if len(others) > 5 else "")
    old = STATUS_FILE in others and STEPS_DIR in others
    return ("run.work_dir %s already holds files the pipeline did not write (%s): it has no %s mark%s. A run replaces and "
            "removes model/, export/, quantize_result/, compile/, deploy/ and more in its folder, so it runs only in "
            "a folder it made. Name a new or empty folder with --set run.work_dir=...%s; nothing was changed"
            % (work_dir, listed, MARK_FILE,
               " (its status.json and steps/ look like a run folder of a pipeline version from before the mark, "
               "but nothing proves who wrote them, so it is not adopted)" if old else "",
               " (and delete this one if it is an old run folder you no longer need: its results are made again "
               "by running the steps)" if old else ""))


def check_entries(work_dir: str) -> None:
    """Each file every run rewrites (status.json, source.json, the reports, ...) is a file or absent, and
    ``steps/`` is a folder whose entries are files; RunFolderError naming the first that is not."""
    entries = list(STATE_ENTRIES)
    steps_dir = os.path.join(work_dir, STEPS_DIR)
    if kind_of(steps_dir) == "a folder":
        entries += [(os.path.join(STEPS_DIR, n), "file") for n in sorted(os.listdir(steps_dir))]
    for rel, want in entries:
        path = os.path.join(work_dir, rel)
        kind = kind_of(path)
        if kind not in ("nothing", "a " + want):
            raise RunFolderError(
                "%s: expected a %s the pipeline writes, found %s; remove it (rm -r %s): %s" % (
                    path, want, kind, _quote(path),
                    "the next run writes it again" if rel != MARK_FILE and rel != LOCK_FILE else
                    "then name this folder again only if the pipeline made it"))


def _quote(path: str) -> str:
    import shlex
    return shlex.quote(path)


def read_record(path: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """A step's record of written files (``steps/<step>.files.json``): ``({"files": [...]}, None)``,
    ``(None, None)`` when there is none, or ``(None, why)`` when it is damaged (the caller says what it
    does instead)."""
    try:
        data = read_json_state(path, dict, "the list of files a step wrote", "")
        if data is not None and not _matches(data.get("files", []), typing.List[str]):
            raise state_error(path, "an object whose \"files\" is a list of strings", json_kind(data.get("files")), "")
    except RunFolderError as exc:
        return None, str(exc).rstrip("; ")
    return data, None
