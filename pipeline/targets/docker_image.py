"""The Vitis AI image ``scripts/docker_run.sh`` builds the pipeline's image on, for a config's DPU target.

Runs on the host before docker starts, where the package's dependencies (PyYAML, torch, pydantic) may be
missing: it imports only the standard library and the target tables, and reads ``compile.target`` from
the YAML with a small line reader (a block ``compile:`` mapping or a flow ``compile: {target: ...}``)
and from the ``--set compile.target=...`` arguments the run will get (the last one wins, as in
``pipeline.config``). Usage::

    python -m pipeline.targets.docker_image CONFIG.yaml [arguments of python -m pipeline run]

prints the image on stdout and, when the target compiles in an image this package cannot run in (Vitis
AI 3.0: Python 3.7), a note on stderr saying what the run in the printed image does and how to compile
with the right release. A config without ``compile.target``, or with a name the registry does not
know, gets the image of ``releases.PIPELINE_RELEASE`` (the config check then reports a bad name).
"""
import re
import sys
from typing import List, Optional, Tuple

from .registry import TARGETS
from .releases import PIPELINE_RELEASE, RELEASES, pipeline_image

_KEY = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$")
_FLOW_TARGET = re.compile(r"[{,]\s*target\s*:\s*([^,}]+)")


def _value(text: str) -> str:
    """A YAML scalar as written: a trailing comment dropped, quotes removed."""
    text = text.strip()
    if text[:1] in "'\"":
        end = text.find(text[0], 1)
        return text[1:end] if end > 0 else text[1:]
    return text.split(" #", 1)[0].strip()


def config_target(text: str) -> Optional[str]:
    """``compile.target`` of a YAML config's text, or None when it does not set one."""
    section, child_indent = False, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _KEY.match(line)
        if not line[0].isspace():
            section = bool(m) and m.group(2) == "compile"
            child_indent = None
            if section and m.group(3).startswith("{"):
                flow = _FLOW_TARGET.search(m.group(3))
                return _value(flow.group(1)) if flow else None
            continue
        if not section or m is None:
            continue
        indent = len(m.group(1))
        if child_indent is None:
            child_indent = indent
        if indent == child_indent and m.group(2) == "target":
            return _value(m.group(3)) or None
    return None


def override_target(args: List[str]) -> Optional[str]:
    """The value of the last ``--set compile.target=...`` (or ``--set=compile.target=...``) in ``args``."""
    found = None
    for i, arg in enumerate(args):
        setting = arg[len("--set="):] if arg.startswith("--set=") else (
            args[i + 1] if arg == "--set" and i + 1 < len(args) else None)
        if setting is not None and setting.partition("=")[0].strip() == "compile.target":
            found = _value(setting.partition("=")[2])
    return found


def choose(target: Optional[str]) -> Tuple[str, Optional[str]]:
    """``(image, note)``: the image to run the pipeline in for DPU target ``target``, and a note for the
    user, or None. The target's compile image when this package runs there, else the pipeline's own."""
    entry = TARGETS.get(target or "")
    if entry is None or entry.compile_image is None:
        return pipeline_image(), None
    release = RELEASES[entry.release.compile_release]
    if release.hosts_pipeline:
        return release.image, None
    runs_in = RELEASES[PIPELINE_RELEASE]
    note = ("%s compiles with Vitis AI %s's vai_c_xir (%s), an image this package cannot run in (Python %s): "
            "the pipeline runs in %s instead, whose compile step does not use its Vitis AI %s compiler for this "
            "target and writes compile/compile.sh and compile/compile_plan.md: the plan gives the docker command "
            "that compiles in %s"
            % (entry.name, release.version, release.image, release.python, runs_in.image, runs_in.version,
               release.image))
    return pipeline_image(), note


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write("usage: python -m pipeline.targets.docker_image CONFIG.yaml [run arguments]\n")
        return 2
    try:
        with open(args[0], encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        sys.stderr.write("docker_image: cannot read %s: %s\n" % (args[0], exc))
        return 2
    target = override_target(args[1:]) or config_target(text)
    image, note = choose(target)
    if note:
        sys.stderr.write("docker_run.sh: %s\n" % note)
    sys.stdout.write(image + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
