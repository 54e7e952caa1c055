"""``arch.json``: where the image keeps it for a target, what it holds, and whether it matches.

An ``arch.json`` holds ``{"target": "<name>"}`` or ``{"fingerprint": "0x..."}``, the two forms
``vai_c_xir`` reads (docs/targets.md#archjson); the fingerprint baked into a compiled model must match
the board's DPU (docs/compiler.md#fingerprint-on-the-board).
"""
import json
import os
from typing import Optional, Tuple

from ..errors import ConfigError
from ..fileio import not_a_file, parse_json
from .registry import ARCH_ROOT, TARGETS, get_target, hex_fingerprint, targets_by_fingerprint


def arch_json_path(target: str, board: Optional[str] = None) -> str:
    """The ``arch.json`` path inside the Vitis AI image for ``target`` (and ``board``).

    Without ``board`` the target's first listed board with a known path is used.

    Raises:
        ConfigError: unknown target, unknown board for that target, or no documented path (then set
            ``arch_json`` in the config to a file holding ``{"fingerprint": "0x..."}`` from
            ``xdputil query`` on the board).
    """
    paths = get_target(target).arch_json_by_board
    if board is not None:
        if board in paths:
            return paths[board]
        raise ConfigError("board: %s has no documented arch.json path for target %s (known boards: %s); "
                          "set arch_json to the file's path" % (board, target, ", ".join(paths) or "none"))
    if not paths:
        raise ConfigError("target %s: no arch.json path is documented for it; set arch_json to a file "
                          "holding {\"fingerprint\": \"%s\"}" % (target, hex_fingerprint(get_target(target).fingerprint)))
    return next(iter(paths.values()))


def _arch_json_form_error(path: str, holds: str, target: Optional[str]) -> ConfigError:
    """The error for an ``arch.json`` that vai_c_xir cannot use: what the file holds, the two forms the
    compiler reads (for ``target`` when it is known) and what to do."""
    board_value = "{\"fingerprint\": \"0x...\"} with the value `xdputil query` prints on the board"
    if target in TARGETS:
        entry = get_target(target)
        forms = "{\"target\": \"%s\"} or {\"fingerprint\": \"%s\"}" % (target, hex_fingerprint(entry.fingerprint))
        todo = ("Use the arch.json of your board from the Vitis AI image (%s), or write %s"
                % (", ".join(entry.arch_json_by_board.values()), board_value) if entry.arch_json_by_board else
                "Write one of these into the file; if the board runs another image, use the fingerprint "
                "that `xdputil query` prints there")
    else:
        forms = "{\"target\": \"<DPU target name>\"} or {\"fingerprint\": \"0x...\"}"
        todo = ("Use the arch.json of your board from the Vitis AI image (under %s; `python -m pipeline "
                "targets` lists them), or write %s" % (ARCH_ROOT, board_value))
    return ConfigError("arch_json: %s holds %s; vai_c_xir needs a JSON object %s. %s"
                       % (path, holds, forms, todo))


JSON_TYPES = {"dict": "object", "list": "array", "str": "string", "int": "number", "float": "number",
              "bool": "boolean", "NoneType": "null"}


def _shown(value: object, limit: int = 120) -> str:
    """``value`` as JSON text, cut after ``limit`` characters."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def read_arch_json(path: str, target: Optional[str] = None) -> Tuple[Optional[str], Optional[int]]:
    """Read an ``arch.json``: returns ``(target name, fingerprint)``.

    The file holds ``{"target": name}`` or ``{"fingerprint": "0x..."}`` (an int is accepted too); these
    are the two forms ``vai_c_xir`` reads (UG1414 "VAI_C Usage", docs/targets.md#archjson). The missing half is filled
    from the registry when it is unique there (a fingerprint from the 3.x release maps to its name; a
    target name maps to its 3.x fingerprint), else left None. ``target`` (the configured DPU target,
    or None) only makes the error messages name the exact content to write.

    Raises:
        ConfigError: the file is missing or is not JSON; it is not an object with a non-empty string
            ``"target"`` or a hex ``"fingerprint"`` (the message says what it holds, what is expected
            and what to do); or it holds both, naming different DPUs.
    """
    if not os.path.isfile(path):
        raise ConfigError("arch_json: %s %s; inside the Vitis AI image the files are "
                          "under %s (see `python -m pipeline targets`)" % (path, not_a_file(path), ARCH_ROOT))
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = parse_json(f.read())
    except ValueError as exc:  # not JSON, not UTF-8, or nested too deep (fileio.parse_json)
        raise ConfigError("arch_json: %s is not valid JSON (%s)" % (path, exc))
    if not isinstance(data, dict):
        raise _arch_json_form_error(path, "a JSON %s (%s)" % (JSON_TYPES.get(type(data).__name__, "value"), _shown(data)), target)
    if "target" not in data and "fingerprint" not in data:
        keys = ("only the keys %s" % ", ".join('"%s"' % k for k in sorted(data))) if data else "an empty object"
        raise _arch_json_form_error(path, "%s, neither \"target\" nor \"fingerprint\"" % keys, target)
    name = data.get("target")
    if "target" in data and not (isinstance(name, str) and name):
        raise _arch_json_form_error(path, "\"target\": %s, not a DPU target name" % _shown(name), target)
    if "fingerprint" not in data:
        entry = TARGETS.get(name)
        return name, (entry.fingerprint if entry else None)
    raw = data["fingerprint"]
    try:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise ValueError(raw)
        fingerprint = raw if isinstance(raw, int) else int(raw, 16)
    except ValueError:
        raise _arch_json_form_error(path, "\"fingerprint\": %s, not a hex number" % _shown(raw), target)
    names = [n for n, release in targets_by_fingerprint(fingerprint) if release == "3.x"]
    if name is not None and name in TARGETS and TARGETS[name].fingerprint != fingerprint:
        raise ConfigError("arch_json: %s holds \"target\": %r (fingerprint %s) and \"fingerprint\": %s (%s), "
                          "which name different DPUs; keep the one that matches your board (`xdputil query`)"
                          % (path, name, hex_fingerprint(TARGETS[name].fingerprint), hex_fingerprint(fingerprint),
                             ", ".join(names) or "no registered 3.x target"))
    return (names[0] if len(names) == 1 else name), fingerprint


def check_arch_json(path: str, target: str) -> int:
    """Check that the ``arch.json`` at ``path`` describes the configured DPU ``target`` (public case P11).

    Returns the fingerprint (int) that the compiler will bake into the model.

    Raises:
        ConfigError: unknown target; unreadable file; a file vai_c_xir cannot use (neither a
            ``"target"`` name nor a hex ``"fingerprint"``: the message says what the file holds and
            the exact content this target needs); or a file that describes another DPU. For
            the last one the message names the target, its expected fingerprint and the file's
            fingerprint (and the target that fingerprint belongs to, or that it is the Vitis AI 2.5
            value of the same target).
    """
    expected = get_target(target).fingerprint
    name, found = read_arch_json(path, target)
    if found == expected:
        return found
    if found is None:
        raise ConfigError("arch.json %s names target %r, which is not a Vitis AI 3.x DPU target; the "
                          "configured target is %s (fingerprint %s)" % (path, name, target, hex_fingerprint(expected)))
    owners = targets_by_fingerprint(found)
    if (target, "2.5") in owners:
        why = ("it is the Vitis AI 2.5 fingerprint of %s; a model compiled with it fails with "
               "\"CHECK fingerprint fail\" on a 3.x board image" % target)
    elif owners:
        why = "it belongs to %s" % ", ".join("%s (%s)" % o for o in owners)
    else:
        why = "it belongs to no registered target"
    raise ConfigError("arch.json %s has fingerprint %s but target %s needs %s: %s. Use the arch.json of "
                      "%s (`python -m pipeline targets`) or change the target"
                      % (path, hex_fingerprint(found), target, hex_fingerprint(expected), why, target))
