"""Literal registry of DPU targets: name, family, boards, fingerprints, ``arch.json`` paths in the image.

Sources (docs/targets.md#names-and-fingerprints, docs/targets.md#archjson):

- Fingerprint = ``(type_id << 56) | (isa_version << 48) | feature_code``
  (``src/vai_runtime/target_factory/src/target_factory.cpp``). The values below were computed from
  ``src/vai_runtime/target_factory/targets/*.prototxt`` (Vitis AI 3.0 and 3.5 give the same values) and
  from ``src/Vitis-AI-Runtime/VART/target_factory/targets/*.prototxt`` at tag v2.5 for
  ``fingerprint_2_5``. A model compiled with one fingerprint does not run on a board image with the
  other ("CHECK fingerprint fail", Vitis-AI issues #1072, #1149, #1195).
- Boards: UG1414 3.0 "Currently Supported Operators" and the 3.5 quickstarts (MPSoC boards ZCU102,
  ZCU104 and KV260 all use ``DPUCZDX8G_ISA1_B4096``; VEK280 and V70 use ``DPUCV2DX8G_ISA1_C20B14``).
- ``arch.json`` paths: the image copies ``site-packages/vaic/arch`` to ``/opt/vitis_ai/compiler/arch``
  (``docker/common/install_torch.sh``); per-board paths from the repo docs (section 3.3). Paths marked
  third-party there are kept, unverified ones (U50LV) are left out.
- An ``arch.json`` holds ``{"target": "<name>"}`` or ``{"fingerprint": "0x..."}`` (UG1414 2.0
  "VAI_C Usage").
"""
import difflib
import json
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..errors import ConfigError

ARCH_ROOT = "/opt/vitis_ai/compiler/arch"

# name -> family, boards, fingerprint (3.0/3.5), fingerprint_2_5 (None: not in the 2.5 release),
# arch_json_by_board (board -> path inside the Vitis AI image; empty when no path is documented).
TARGETS = {
    "DPUCZDX8G_ISA1_B512": {"family": "DPUCZDX8G", "boards": (), "fingerprint": 0x0101000056010200,
                            "fingerprint_2_5": 0x0101000016010200, "arch_json_by_board": {}},
    "DPUCZDX8G_ISA1_B800": {"family": "DPUCZDX8G", "boards": (), "fingerprint": 0x0101000056010201,
                            "fingerprint_2_5": 0x0101000016010201, "arch_json_by_board": {}},
    "DPUCZDX8G_ISA1_B1024": {"family": "DPUCZDX8G", "boards": (), "fingerprint": 0x0101000056010402,
                             "fingerprint_2_5": 0x0101000016010402, "arch_json_by_board": {}},
    "DPUCZDX8G_ISA1_B1152": {"family": "DPUCZDX8G", "boards": (), "fingerprint": 0x0101000056010203,
                             "fingerprint_2_5": 0x0101000016010203, "arch_json_by_board": {}},
    "DPUCZDX8G_ISA1_B1600": {"family": "DPUCZDX8G", "boards": (), "fingerprint": 0x0101000056010404,
                             "fingerprint_2_5": 0x0101000016010404, "arch_json_by_board": {}},
    "DPUCZDX8G_ISA1_B2304": {"family": "DPUCZDX8G", "boards": (), "fingerprint": 0x0101000056010405,
                             "fingerprint_2_5": 0x0101000016010405, "arch_json_by_board": {}},
    "DPUCZDX8G_ISA1_B3136": {"family": "DPUCZDX8G", "boards": (), "fingerprint": 0x0101000056010406,
                             "fingerprint_2_5": 0x0101000016010406, "arch_json_by_board": {}},
    "DPUCZDX8G_ISA1_B4096": {
        "family": "DPUCZDX8G", "boards": ("ZCU102", "ZCU104", "KV260"),
        "fingerprint": 0x0101000056010407, "fingerprint_2_5": 0x0101000016010407,
        "arch_json_by_board": {"ZCU102": ARCH_ROOT + "/DPUCZDX8G/ZCU102/arch.json",
                      "ZCU104": ARCH_ROOT + "/DPUCZDX8G/ZCU104/arch.json",
                      "KV260": ARCH_ROOT + "/DPUCZDX8G/KV260/arch.json"}},
    "DPUCVDX8G_ISA3_C32B1": {"family": "DPUCVDX8G", "boards": (), "fingerprint": 0x0603000B56011811,
                             "fingerprint_2_5": 0x0603000B16011811, "arch_json_by_board": {}},
    "DPUCVDX8G_ISA3_C32B3": {
        "family": "DPUCVDX8G", "boards": ("VCK190",),
        "fingerprint": 0x0603000B56011831, "fingerprint_2_5": 0x0603000B16011831,
        "arch_json_by_board": {"VCK190": ARCH_ROOT + "/DPUCVDX8G/VCK190/arch.json"}},
    "DPUCVDX8G_ISA3_C32B6": {"family": "DPUCVDX8G", "boards": (), "fingerprint": 0x0603000B56011861,
                             "fingerprint_2_5": 0x0603000B16011861, "arch_json_by_board": {}},
    "DPUCVDX8G_ISA3_C64B1": {"family": "DPUCVDX8G", "boards": (), "fingerprint": 0x0603000B56011812,
                             "fingerprint_2_5": 0x0603000B16011812, "arch_json_by_board": {}},
    "DPUCVDX8G_ISA3_C64B3": {"family": "DPUCVDX8G", "boards": (), "fingerprint": 0x0603000B56011832,
                             "fingerprint_2_5": 0x0603000B16011832, "arch_json_by_board": {}},
    "DPUCVDX8G_ISA3_C64B5": {"family": "DPUCVDX8G", "boards": (), "fingerprint": 0x0603000B56011852,
                             "fingerprint_2_5": 0x0603000B16011852, "arch_json_by_board": {}},
    "DPUCAHX8H_ISA2": {"family": "DPUCAHX8H", "boards": (), "fingerprint": 0x020200000010002A,
                       "fingerprint_2_5": 0x020200000010002A, "arch_json_by_board": {}},
    "DPUCAHX8H_ISA2_DWC": {
        "family": "DPUCAHX8H", "boards": ("U50", "U55C", "U50LV", "U280"),
        "fingerprint": 0x020200000010002B, "fingerprint_2_5": 0x020200000010002B,
        "arch_json_by_board": {"U50": ARCH_ROOT + "/DPUCAHX8H/U50/arch.json",
                      "U55C": ARCH_ROOT + "/DPUCAHX8H/U55C-DWC/arch.json",
                      "U280": ARCH_ROOT + "/DPUCAHX8H/U280/arch.json"}},
    "DPUCAHX8H_ISA2_ELP2": {"family": "DPUCAHX8H", "boards": (), "fingerprint": 0x020200000000002E,
                            "fingerprint_2_5": 0x020200000000002E, "arch_json_by_board": {}},
    "DPUCAHX8L_ISA0": {
        "family": "DPUCAHX8L", "boards": ("U50", "U50LV", "U280"),
        "fingerprint": 0x030000000000001D, "fingerprint_2_5": 0x030000000000001D,
        "arch_json_by_board": {"U280": ARCH_ROOT + "/DPUCAHX8L/U280/arch.json"}},
    "DPUCAHX8L_ISA0_SP": {"family": "DPUCAHX8L", "boards": (), "fingerprint": 0x030000000000101D,
                          "fingerprint_2_5": 0x030000000000101D, "arch_json_by_board": {}},
    "DPUCADF8H_ISA0": {
        "family": "DPUCADF8H", "boards": ("U200", "U250"),
        "fingerprint": 0x0700000000000000, "fingerprint_2_5": 0x0700000000000000,
        "arch_json_by_board": {"U200": ARCH_ROOT + "/DPUCADF8H/U200/arch.json",
                      "U250": ARCH_ROOT + "/DPUCADF8H/U250/arch.json"}},
    "DPUCVDX8H_ISA1_F2W2_8PE": {
        "family": "DPUCVDX8H", "boards": ("VCK5000",),
        "fingerprint": 0x0501000000140FEE, "fingerprint_2_5": 0x0501000000140FEE,
        "arch_json_by_board": {"VCK5000": ARCH_ROOT + "/DPUCVDX8H/VCK50008PE/arch.json"}},
    "DPUCVDX8H_ISA1_F2W4_4PE": {"family": "DPUCVDX8H", "boards": ("VCK5000",),
                                "fingerprint": 0x05010000001E082F,
                                "fingerprint_2_5": 0x05010000001E082F, "arch_json_by_board": {}},
    "DPUCVDX8H_ISA1_F2W4_6PE_aieDWC": {"family": "DPUCVDX8H", "boards": (),
                                       "fingerprint": 0x0501000000160C2F,
                                       "fingerprint_2_5": 0x0501000000160C2F, "arch_json_by_board": {}},
    "DPUCVDX8H_ISA1_F2W4_6PE_aieMISC": {"family": "DPUCVDX8H", "boards": (),
                                        "fingerprint": 0x05010000001E082E,
                                        "fingerprint_2_5": 0x05010000001E082E, "arch_json_by_board": {}},
    "DPUCV2DX8G_ISA1_C20B1": {"family": "DPUCV2DX8G", "boards": (),
                              "fingerprint": 0x0901400044000144, "fingerprint_2_5": None,
                              "arch_json_by_board": {}},
    "DPUCV2DX8G_ISA1_C20B14": {
        "family": "DPUCV2DX8G", "boards": ("VEK280", "V70"),
        "fingerprint": 0x0901400044000E44, "fingerprint_2_5": None,
        "arch_json_by_board": {"VEK280": ARCH_ROOT + "/DPUCV2DX8G/VEK280/arch.json",
                      "V70": ARCH_ROOT + "/DPUCV2DX8G/V70/arch.json"}},
    "DPUCZDI4G_ISA0_B4096_DEMO_SSD": {"family": "DPUCZDI4G", "boards": (),
                                      "fingerprint": 0x0400002003220206,
                                      "fingerprint_2_5": 0x0400002003220206, "arch_json_by_board": {}},
    "DPUCZDI4G_ISA0_B8192D8_DEMO_SSD": {"family": "DPUCZDI4G", "boards": (),
                                        "fingerprint": 0x0400002003220207,
                                        "fingerprint_2_5": 0x0400002003220207, "arch_json_by_board": {}},
}


class DpuTarget(NamedTuple):
    """One registry entry. ``arch_json`` is the default ``arch.json`` path in the image (the first
    board's), or None when no path is documented."""
    name: str
    family: str
    boards: Tuple[str, ...]
    fingerprint: int
    fingerprint_2_5: Optional[int]
    arch_json_by_board: Dict[str, str]

    @property
    def arch_json(self) -> Optional[str]:
        return next(iter(self.arch_json_by_board.values()), None)


def hex_fingerprint(value: Optional[int]) -> str:
    """Format a 64-bit fingerprint as ``0x`` + 16 lower-case hex digits; ``-`` for None."""
    return "-" if value is None else "0x%016x" % value


def get_target(name: str) -> DpuTarget:
    """Return the registry entry of DPU target ``name`` as a ``DpuTarget``.

    Raises:
        ConfigError: unknown name; the message names the closest registered names. Expired ISA0
            names such as ``DPUCZDX8G_ISA0_B4096_MAX_BG2`` are rejected by Vitis AI 3.x too (docs/targets.md#expired-names).
    """
    if name in TARGETS:
        return DpuTarget(name=name, **TARGETS[name])
    close = difflib.get_close_matches(str(name), list(TARGETS), n=3, cutoff=0.6)
    hint = ("; closest: %s" % ", ".join(close)) if close else ""
    raise ConfigError("target: expected a DPU target name of Vitis AI 3.x, got %r%s. "
                      "`python -m pipeline targets` lists them all" % (name, hint))


def targets_by_fingerprint(fingerprint: int) -> List[Tuple[str, str]]:
    """All ``(target name, release)`` pairs whose fingerprint equals ``fingerprint``.

    ``release`` is ``"3.x"`` or ``"2.5"``. Several names can share one fingerprint across releases
    (the Alveo targets kept theirs), so the result is a list, in registry order.
    """
    found = []
    for name, entry in TARGETS.items():
        if entry["fingerprint"] == fingerprint:
            found.append((name, "3.x"))
        if entry["fingerprint_2_5"] == fingerprint and entry["fingerprint_2_5"] != entry["fingerprint"]:
            found.append((name, "2.5"))
    return found


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
        raise ConfigError("arch_json: file %s does not exist; inside the Vitis AI image the files are "
                          "under %s (see `python -m pipeline targets`)" % (path, ARCH_ROOT))
    try:
        with open(path, "r") as f:
            data = json.load(f)
    except ValueError as exc:
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
        return name, (entry["fingerprint"] if entry else None)
    raw = data["fingerprint"]
    try:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise ValueError(raw)
        fingerprint = raw if isinstance(raw, int) else int(raw, 16)
    except ValueError:
        raise _arch_json_form_error(path, "\"fingerprint\": %s, not a hex number" % _shown(raw), target)
    names = [n for n, release in targets_by_fingerprint(fingerprint) if release == "3.x"]
    if name is not None and name in TARGETS and TARGETS[name]["fingerprint"] != fingerprint:
        raise ConfigError("arch_json: %s holds \"target\": %r (fingerprint %s) and \"fingerprint\": %s (%s), "
                          "which name different DPUs; keep the one that matches your board (`xdputil query`)"
                          % (path, name, hex_fingerprint(TARGETS[name]["fingerprint"]), hex_fingerprint(fingerprint),
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


def format_targets() -> str:
    """A plain-text table of the registry for ``python -m pipeline targets``: one line per target
    with family, fingerprint (3.x), fingerprint (2.5), boards, then the ``arch.json`` paths."""
    header = ("target", "family", "fingerprint 3.x", "fingerprint 2.5", "boards")
    rows = [header]
    for name, e in TARGETS.items():
        rows.append((name, e["family"], hex_fingerprint(e["fingerprint"]),
                     hex_fingerprint(e["fingerprint_2_5"]), ",".join(e["boards"]) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("")
    lines.append("arch.json inside the Vitis AI image (%s):" % ARCH_ROOT)
    for name, e in TARGETS.items():
        for board, path in e["arch_json_by_board"].items():
            lines.append("  %-24s %-8s %s" % (name, board, path))
    return "\n".join(lines) + "\n"
