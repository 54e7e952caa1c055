"""report.json, report.md and the summary printed at the end of a run.

The report is rebuilt from ``steps/*.json`` after every invocation, so it always describes the
whole run folder, whichever steps ran in which process. This module is the frame (status, warnings,
the quantizer's changes, the source, artifacts, versions) and names no step: each step result
renders its own keys, section and summary lines (``pipeline.steps.base.StepResult``).

report.json and report.md hold no path of the run folder: the paths inside it are relative to it, so
a moved or copied folder's report stays true. The summary the command line prints shows them against
the folder's path as the user named it (``render_summary``).
"""
import logging
import os
import platform
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import fileio, support
from .._version import __version__
from ..errors import RunFolderError
from ..steps import ORDER, load_results
from .state import SOURCE_FILE, read_json_state, relative_in_text, rendered

log = logging.getLogger("pipeline")

# Files that describe the invocation rather than hold its results: not listed as artifacts.
REPORT_FILES = ("report.json", "report.md", "report.html", "status.json")
SOURCE_FIX = "every run writes it anew at its end; remove it to go on without the source's description"


# module name -> distribution name, for the versions of packages the run did not import
_DISTRIBUTIONS = (("torch", "torch"), ("numpy", "numpy"), ("onnx", "onnx"), ("onnxruntime", "onnxruntime"),
                  ("pydantic", "pydantic"), ("yaml", "PyYAML"), ("sklearn", "scikit-learn"))


def versions() -> Dict[str, Optional[str]]:
    """Versions of the tools the run used (None where a package is absent): ``__version__`` of the
    modules already imported, the installed distribution's version of the others (importing
    scikit-learn or onnx only to read a version would cost a second)."""
    from importlib import metadata

    out = {"python": platform.python_version(), "pipeline": __version__}  # type: Dict[str, Optional[str]]
    for name, dist in _DISTRIBUTIONS:
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "unknown")
            continue
        try:
            out[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[name] = None
    nndct = sys.modules.get("pytorch_nndct")
    out["pytorch_nndct"] = getattr(nndct, "__version__", "imported") if nndct else None
    return out


def artifacts(work_dir: str, incomplete: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Every file in the run folder except the reports and hidden files (the run lock, temporaries),
    with its size and sha256, sorted by path: only files that exist when the report is written.
    Files under a top-level folder named in ``incomplete`` (the output folder of a step that has not
    finished: killed, failed, or running now) carry ``"incomplete": True``: they are not results."""
    rows = []
    for folder, dirs, files in os.walk(work_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, work_dir)
            if rel in REPORT_FILES or name.startswith("."):
                continue
            try:
                row = {"path": rel, "bytes": os.path.getsize(path), "sha256": fileio.sha256_file(path)}
            except FileNotFoundError:  # removed while the report was written
                continue
            if rel.split(os.sep)[0] in incomplete:
                row["incomplete"] = True
            rows.append(row)
    return sorted(rows, key=lambda row: row["path"])


def read_source(run: Any) -> Optional[Dict[str, Any]]:
    """source.json's content (typed, bounded); a damaged one is left out with a warning: every run writes
    it anew at its end."""
    try:
        return read_json_state(run.path(SOURCE_FILE), dict, "the source's description", SOURCE_FIX)
    except RunFolderError as exc:
        log.warning("%s", exc)
        return None


def build_report(run: Any, results: Dict[str, Any]) -> Dict[str, Any]:
    """report.json's content for the run folder ``run`` (``pipeline.runner.folder.RunDir``) from ``results``, the
    typed step results in the run folder (``pipeline.steps.load_results``): the frame (status, run,
    warnings, the quantizer's changes, the source, every step's saved result, artifacts, versions),
    each step's ``REPORT_KEYS`` (None while it has no result) and ``summary``, the lines the command
    line prints (``render_summary``: paths relative to the run folder).

    Raises:
        RunFolderError: a saved step result the rendering cannot use (``rendered``).
    """
    from .status import read_status
    cfg = run.loaded.cfg
    report = {
        "status": read_status(run.work_dir),
        "run": {"name": cfg.run.name, "config": run.loaded.path,
                "config_sha256": run.loaded.hash(), "backend": cfg.quantizer.backend,
                "target": run.loaded.target.name},
    }  # type: Dict[str, Any]
    for step in ORDER:
        report.update(dict.fromkeys(step.result.REPORT_KEYS))
        if step.name in results:
            result = results[step.name]
            report.update(rendered(step.name, lambda: result.report_fields("")))
    verdict = support.current()
    warnings = [w for name, r in results.items() for w in rendered(name, r.step_warnings)]
    report.update(warnings=warnings, support={"kind": verdict.kind, "text": verdict.text},
                  quantizer_changes=quantizer_changes(results), source=read_source(run),
                  steps={name: r.to_json() for name, r in results.items()},
                  artifacts=artifacts(run.work_dir, [s.writes for s in ORDER if s.name not in results]),
                  versions=versions())
    report = relative_in_text(report, run.work_dir)  # a message naming a file of the run folder (a failed step's)
    report["summary"] = render_summary(report, "")
    return report


def render_summary(report: Dict[str, Any], root: str) -> List[str]:
    """The summary lines of ``report`` (report.json's content): warnings, each step's summary lines, the
    source's, the environment's verdict when it is not proven, the report's path; the run folder's paths
    shown against ``root`` ("" in report.json: relative to the folder; the folder's path for the
    command line)."""
    from ..data.summary import source_summary
    lines = ["warning: %s" % w for w in report["warnings"]]
    for step in ORDER:  # in pipeline order, whatever the order of the keys
        if step.name in report["steps"]:
            result = step.result.from_json(report["steps"][step.name])
            lines += rendered(step.name, lambda: result.summary_lines(root))
    try:
        lines += source_summary(report.get("source"))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        log.warning("%s: its content cannot be shown (%s: %s); %s", SOURCE_FILE, type(exc).__name__, exc, SOURCE_FIX)
    support_kind = (report.get("support") or {}).get("kind")
    if support_kind not in (None, "proven"):  # an environment outside the proven matrix says so with its results
        lines.append("environment: %s" % report["support"]["text"])
    return lines + ["report: %s" % (os.path.join(root, "report.md") if root else "report.md")]


def quantizer_changes(results: Dict[str, Any]) -> List[str]:
    """What the quantizer changes in the model on its way to the DPU (LeakyReLU slope 26/256, ReLU6
    -> ReLU under CLE, pooling factors, offered conversions), from each step result's
    ``quantizer_changes`` (the inspect step's node notes, the per-layer sensitivity notes), one line
    per change with the nodes it applies to."""
    by_change = {}  # type: Dict[str, List[str]]
    for name, result in results.items():
        for change, node in rendered(name, result.quantizer_changes):
            by_change.setdefault(change, []).append(node)
    return ["%s (%s)" % (change, ", ".join(_ordered_unique(nodes))) for change, nodes in by_change.items()]


def _ordered_unique(items: Any) -> List[Any]:
    out = []  # type: List[Any]
    for item in items:
        if item not in out:
            out.append(item)
    return out


def render_markdown(r: Dict[str, Any], results: Dict[str, Any]) -> str:
    """report.md: the same facts as report.json (``r``), for people; each step's section comes from its
    result (``results``, typed, in pipeline order)."""
    from ..data.summary import source_section
    st = r["status"]
    headline = {"ok": "finished: %s" % ", ".join(st.get("steps", [])),
                "failed": "**FAILED at step `%s`**: %s" % (st.get("step"), st.get("error")),
                "interrupted": "**INTERRUPTED at step `%s`**%s" % (st.get("step"), ": %s" % st["error"] if st.get("error")
                                                                   else ""),
                "running": "running step `%s` (pid %s, started %s)" % (st.get("step"), st.get("pid"), st.get("started"))
                }.get(st.get("state"), "unknown")
    lines = ["# Run report: %s" % r["run"]["name"], "", "- status: %s" % headline,
             "- config: `%s` (hash of the resolved settings `%s`)" % (r["run"]["config"],
                                                                        r["run"]["config_sha256"][:16]),
             "- backend: `%s`, target: `%s`" % (r["run"]["backend"], r["run"]["target"]), ""]
    headlines = [line for name, result in results.items() for line in rendered(name, lambda: result.summary_lines(""))]
    if headlines:
        lines += ["## Summary", ""] + ["- %s" % line for line in headlines] + [""]
    if r["warnings"]:
        lines += ["## Warnings", ""] + ["- %s" % w for w in r["warnings"]] + [""]
    if r["quantizer_changes"]:
        lines += ["## Changes the quantizer makes for the DPU", ""] + ["- %s" % c for c in r["quantizer_changes"]] + [""]
    for name, result in results.items():
        lines += rendered(name, lambda: result.report_section(""))
    try:
        lines += source_section(r.get("source"))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        log.warning("%s: its content cannot be shown (%s: %s); %s", SOURCE_FILE, type(exc).__name__, exc, SOURCE_FIX)
    lines += ["## Artifacts", "", "| file | bytes | sha256 |", "|---|---|---|"]
    lines += ["| %s%s | %d | `%s` |" % (a["path"], " (left by an unfinished step)" if a.get("incomplete") else "",
                                       a["bytes"], a["sha256"][:16]) for a in r["artifacts"]]
    lines += ["", "## Versions", ""] + ["- %s: %s" % kv for kv in sorted(r["versions"].items())]
    if r.get("support"):
        lines += ["", "Support: %s." % r["support"]["text"]]
    return "\n".join(lines) + "\n"


def remove_report(work_dir: str) -> None:
    """Delete report.json, report.md and report.html (before files they list are removed; a new report follows)."""
    for name in ("report.json", "report.md", "report.html"):
        path = os.path.join(work_dir, name)
        if os.path.exists(path):
            os.remove(path)


def current_results(run: Any) -> Tuple[Dict[str, Any], List[str]]:
    """The saved step results the report describes, and a warning for each result left out: a step the
    current config turns off (``Step.off``: e.g. qat with ``quantizer.qat.enabled: false``) keeps its folder,
    but the later steps ran without it, so its result is no part of this run's report; a result made under
    other settings than the current config's (``Step.made_under``: an inspection of another model or target)
    describes something else."""
    results, unused = load_results(run), []
    for step in ORDER:
        reason = step.off_reason(run.loaded.cfg) if step.name in results else None
        changed = step.settings_changed(run.loaded.cfg, results[step.name]) if step.name in results else None
        if reason:
            del results[step.name]
            unused.append("%s/ holds an earlier result of the %s step, which the config now turns off (%s): the "
                          "later steps do not use it and this report leaves it out; it is kept until that step "
                          "runs again" % (step.writes, step.name, reason))
        elif changed:
            del results[step.name]
            unused.append("%s/ holds a result of the %s step made under other settings than this config's (%s): "
                          "this report leaves it out; run the %s step again" % (step.writes, step.name,
                                                                                 "; ".join(changed), step.name))
    return results, unused


def write_report(run: Any) -> Dict[str, Any]:
    """Write report.json, report.md and report.html (``report_html``) into the run folder ``run``
    (``pipeline.runner.folder.RunDir``) and return the report dict."""
    from .report_html import render_html
    results, unused = current_results(run)
    report = build_report(run, results)
    report["warnings"] += unused
    report["summary"] = ["warning: %s" % w for w in unused] + report["summary"]
    fileio.write_json(run.path("report.json"), report)
    fileio.write_text(run.path("report.md"), render_markdown(report, results))
    fileio.write_text(run.path("report.html"), render_html(report, results, run.work_dir))
    return report
