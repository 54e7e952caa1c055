"""What is installed here and which steps can run: ``python -m pipeline check-env``.

Versions come from package metadata, ``pytorch_nndct`` and ``xir`` are found with
``importlib.util.find_spec`` (importing pytorch_nndct compiles kernels and edits sys.argv,
docs/quantizer.md#import-side-effects), ``vai_c_xir`` with ``shutil.which``, and the ``arch.json``
files are read as JSON. A step line whose packages are installed is then probed: the backend's
``Requirement.probe`` runs the step on a tiny model (a few seconds in all, torch imported), so a line
says yes only where the step works here, not merely where its packages exist.
"""
import glob
import importlib.util
import os
import platform
import shutil
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import support, targets
from .compilers import vai_c
from .errors import ConfigError
from .steps import ORDER

# distribution name for the metadata lookup -> name shown
PACKAGES = (("torch", "torch"), ("numpy", "numpy"), ("onnx", "onnx"), ("onnxruntime", "onnxruntime"), ("protobuf", "protobuf"))
# modules that exist only in the Vitis AI image (docs/targets.md#inspector, docs/environment.md#the-vitis-ai-35-image)
IMAGE_MODULES = ("xir", "xcompiler", "target_factory")


def _dist_version(name: str) -> Optional[str]:
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _arch_files(arch_root: str) -> List[Dict[str, Any]]:
    found = []
    for path in sorted(glob.glob(os.path.join(arch_root, "**", "arch.json"), recursive=True)):
        entry = {"path": path, "target": None, "fingerprint": None, "error": None}
        try:
            name, fp = targets.read_arch_json(path)
            entry["target"], entry["fingerprint"] = name, (targets.hex_fingerprint(fp) if fp is not None else None)
        except ConfigError as exc:
            entry["error"] = str(exc)
        found.append(entry)
    return found


def _step(uses: str, can_run: bool, why_not: Optional[str], checked: Optional[str] = None) -> Dict[str, Any]:
    return {"uses": uses, "can_run": can_run, "why_not": None if can_run else why_not, "checked": checked}


def _probe(run: Any, backend_class: Any) -> Tuple[Optional[str], Optional[str]]:
    """``(what it did, None)`` when the probe ``run`` of ``backend_class`` works, ``(None, why not)`` when
    it raises (the pipeline's log is held back meanwhile: the probe's progress is not the user's)."""
    import logging
    log = logging.getLogger("pipeline")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return run(backend_class), None
    except Exception as exc:  # any failure is the answer: the step does not work here
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return None, "its packages are installed, but it fails here (probed on a tiny model): %s: %s" % (
            type(exc).__name__, first)
    finally:
        log.setLevel(level)


def _backend_steps(probe: bool) -> Dict[str, Dict[str, Any]]:
    """The steps table's lines of every registered backend, ``"<step> (<backend>)"``, from each class's
    ``requirements`` (``pipeline.quantizers.base.Requirement``): a line can run when the backend can
    (``unavailable_reason()`` is None), its distributions and modules are installed and its probe, if
    it has one, works (``checked`` then says what the probe did; None for a line without a probe, which
    rests on the installed packages alone). Ordered by step (in the order the backends first declare
    them), then by backend (registry order)."""
    from .quantizers.base import backend_classes
    classes = backend_classes()
    order = []  # type: List[str]
    for cls in classes:
        order.extend(r.step for r in cls.requirements if r.step not in order)
    steps = {}
    for step in order:
        for cls in classes:
            for req in (r for r in cls.requirements if r.step == step):
                why, checked = cls.unavailable_reason(), None
                if why is None and not (all(_dist_version(d) is not None for d in req.distributions)
                                        and all(_module_found(m) for m in req.modules)):
                    why = req.why_not
                if why is None and probe and req.probe is not None:
                    checked, why = _probe(req.probe, cls)
                steps["%s (%s)" % (step, cls.name)] = _step(req.uses, why is None, why, checked)
    return steps


def check_env(arch_root: str = targets.ARCH_ROOT, probe: bool = True) -> Dict[str, Any]:
    """Describe this environment.

    Args:
        arch_root: where the ``arch.json`` files are searched (``/opt/vitis_ai/compiler/arch`` in the image).
        probe: run each step line's probe (a tiny model through the step; torch imported, a few seconds);
            False judges the lines by their installed packages alone (``checked`` is then None).

    Returns a JSON-serialisable dict: ``python`` (version, executable), ``packages`` (name -> version
    or None), ``support`` (``pipeline.support.current()``: kind and text, where this Python and torch
    stand against the proven matrix), ``pytorch_nndct`` (found, version, torch it was built for matches or not), ``modules``
    (xir, xcompiler, target_factory -> found), ``vai_c_xir`` (path or None, version), ``arch_json``
    (files with their target and fingerprint), and ``steps``: for each step and backend, what it will
    use, ``can_run``, ``why_not`` and ``checked`` (what its probe ran here, or None).
    """
    from .quantizers.nndct import NndctBackend
    packages = {shown: _dist_version(dist) for dist, shown in PACKAGES}
    modules = {m: _module_found(m) for m in IMAGE_MODULES}
    compiler = shutil.which(vai_c.EXECUTABLE)
    arch = _arch_files(arch_root)
    steps = _backend_steps(probe)
    steps.update((s.name, _step(*s.environment())) for s in ORDER if s.environment is not None)
    verdict = support.current()
    return {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "packages": packages,
        "support": {"kind": verdict.kind, "text": verdict.text},
        "pytorch_nndct": {"found": NndctBackend.is_available(), "version": NndctBackend.version(),
                          "torch_matches": NndctBackend.torch_matches()},
        "modules": modules,
        "vai_c_xir": {"path": compiler, "version": vai_c.version() if compiler else None},
        "arch_json": {"root": arch_root, "files": arch},
        "steps": steps,
    }


def format_env(d: Dict[str, Any]) -> str:
    """Plain text of ``check_env()``'s result for the terminal."""
    lines = ["python         %s (%s)" % (d["python"]["version"], d["python"]["executable"])]
    for name, version in d["packages"].items():
        lines.append("%-14s %s" % (name, version or "not installed"))
    lines.append("%-14s %s: %s" % ("support", d["support"]["kind"], d["support"]["text"]))
    n = d["pytorch_nndct"]
    text = "not installed" if not n["found"] else (n["version"] or "found (version unknown)")
    if n["torch_matches"] is False:
        text += " (built for another torch)"
    lines.append("%-14s %s" % ("pytorch_nndct", text))
    for name, found in d["modules"].items():
        lines.append("%-14s %s" % (name, "found" if found else "not installed"))
    c = d["vai_c_xir"]
    lines.append("%-14s %s" % ("vai_c_xir", ("%s%s" % (c["path"], " (%s)" % c["version"] if c["version"] else ""))
                                if c["path"] else "not on PATH"))
    files = d["arch_json"]["files"]
    lines.append("%-14s %s" % ("arch.json", "%d under %s" % (len(files), d["arch_json"]["root"]) if files
                               else "none under %s" % d["arch_json"]["root"]))
    for f in files:
        lines.append("    %s: %s" % (f["path"], f["error"] or "%s %s" % (f["target"] or "?", f["fingerprint"] or "")))
    lines.append("")
    lines.append("steps:")
    for step, s in d["steps"].items():
        lines.append("  %-22s %s  %s" % (step, "yes" if s["can_run"] else "no ", s["uses"]))
        if not s["can_run"]:
            lines.append("  %-22s      why not: %s" % ("", s["why_not"]))
        elif s.get("checked"):
            lines.append("  %-22s      checked: %s" % ("", s["checked"]))
    return "\n".join(lines) + "\n"
