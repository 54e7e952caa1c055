"""report.json, report.md and the summary printed at the end of a run.

The report is rebuilt from ``steps/*.json`` after every invocation, so it always describes the
whole run folder, whichever steps ran in which process.
"""
import math
import os
import platform
import sys
from typing import Any, Dict, List, Optional, Sequence

from . import __version__, fileio

# Files that describe the invocation rather than hold its results: not listed as artifacts.
REPORT_FILES = ("report.json", "report.md", "status.json")


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
    return rows


def build_report(run: Any) -> Dict[str, Any]:
    """Collect the step results of ``run`` (a ``pipeline.steps.context.Run``) into one dict."""
    steps = {}
    for name in sorted(os.listdir(run.path("steps"))) if os.path.isdir(run.path("steps")) else []:
        if name.endswith(".json"):
            steps[name[:-5]] = fileio.read_json(run.path("steps", name))
    from .runstatus import read_status
    from .steps import BY_NAME, load_results
    results = load_results(run)  # typed: pipeline.steps.<step>.<Step>Result
    test, calib, export = results.get("test"), results.get("calib"), results.get("export")
    quant_ledger = (calib.ledger if calib else None) or (test.ledger if test else None) or {}
    cfg = run.cfg
    status = read_status(run.work_dir)
    incomplete = [step.writes for name, step in BY_NAME.items() if name not in steps]
    report = {
        "status": status,
        "run": {"name": cfg.run.name, "work_dir": run.work_dir, "config": run.loaded.path,
                "config_sha256": run.loaded.hash(), "backend": cfg.quantizer.backend,
                "target": run.loaded.target.name},
        "float_accuracy": test.float_accuracy if test else None,
        "quant_accuracy": test.quant_accuracy if test else None,
        "accuracy_drop": test.accuracy_drop if test else None,
        "eval_images": test.eval_images if test else None,
        "ledger": quant_ledger,
        "sensitivity": test.sensitivity if test else None,
        "plots": {k: os.path.relpath(v, run.work_dir) for k, v in ((test.plots if test else None) or {}).items()},
        "onnx_agreement": {k: v for k, v in export.agreement.items() if k.startswith("onnx")} or None
        if export else None,
        "xmodel": xmodel_summary(export.agreement.get("xmodel"), run.work_dir) if export else None,
        "fast_finetune": finetune_summary(calib.fast_finetune if calib else None),
        "warnings": [w for name in sorted(steps) for w in steps[name].get("warnings", [])],
        "quantizer_changes": quantizer_changes(steps),
        "compile": {k: v for k, v in steps.get("compile", {}).items() if k != "argv"} or None,
        "compile_argv": steps.get("compile", {}).get("argv"),
        "source": steps.get("source"),
        "steps": steps,
        "artifacts": artifacts(run.work_dir, incomplete),
        "versions": versions(),
    }
    return report


def quantizer_changes(steps: Dict[str, Any]) -> List[str]:
    """What the quantizer changes in the model on its way to the DPU (LeakyReLU slope 26/256, ReLU6
    -> ReLU under CLE, pooling factors, offered conversions), from the inspect step's node notes and
    the per-layer sensitivity notes, one line per change with the nodes it applies to."""
    by_change = {}  # type: Dict[str, List[str]]
    for line in steps.get("inspect", {}).get("changes", []):
        node, _, change = line.partition(": ")
        by_change.setdefault(change, []).append(node)
    for row in (steps.get("test", {}).get("sensitivity") or []):
        for note in row.get("notes", []):
            by_change.setdefault(note, []).append(row.get("float_node") or row.get("node"))
    return ["%s (%s)" % (change, ", ".join(_ordered_unique(nodes))) for change, nodes in by_change.items()]


def _ordered_unique(items: Any) -> List[Any]:
    out = []  # type: List[Any]
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _fmt(x: Any, spec: str = "%.4f") -> str:
    return "n/a" if x is None else spec % x


def _num(v: float) -> str:
    return "%.4g" % v


def sensitivity_table(rows: List[Dict[str, Any]]) -> str:
    """The rows as a Markdown table (one line per row, graph order) plus a footnote for CLE rows.

    Columns: quantized node, float node (``LayerSensitivity.float_name``), op, bits/fix_pos, per-sample shape, SQNR (dB, two
    decimals, ``inf`` when exact), cosine (six decimals), float range, the fix_pos range, clipped
    percentage. Ranges of CLE rows (marked ``*``) are in the quantized graph's scale. Below the
    table: a footnote when there are CLE rows, and each note with the nodes it applies to.

    ``rows`` as ``pipeline.quantizers.sim.sensitivity.layer_sensitivity`` returns them, or after
    ``LayerSensitivity.to_json`` and a JSON round trip (``steps/test.json``).
    """
    from .quantizers.sensitivity_rows import LayerSensitivity

    rows = [LayerSensitivity.of(r) for r in rows]
    lines = ["| # | quantized node | float node | op | bits / fix_pos | shape | SQNR (dB) | cosine | float range "
             "| fix_pos range | clipped |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        mark = " \\*" if r["cle_rescaled"] else ""
        sqnr = r["sqnr_db"]
        lines.append("| %d | %s | %s | %s | %d / %d | %s | %s | %.6f | %s .. %s%s | %s .. %s | %s |" % (
            i, r["node"], r.float_name, r["op"].replace("nndct_", ""), r["bitwidth"], r["fix_pos"],
            "x".join(str(d) for d in r["shape"] or []),
            ("inf" if sqnr > 0 else "-inf") if math.isinf(sqnr) else "%.2f" % sqnr, r["cosine"],
            _num(r["graph_min"]), _num(r["graph_max"]), mark, _num(r["range_min"]), _num(r["range_max"]),
            "0" if r["clipped_fraction"] == 0 else "%.3g%%" % (100 * r["clipped_fraction"])))
    text = "\n".join(lines) + "\n"
    text += ("\nSQNR = 10 log10(sum f^2 / sum (f - q)^2) and cosine over all eval values (f float, q quantized); "
             "clipped = share of the float values more than half an LSB beyond the fix_pos range (they "
             "saturate).\n")
    if any(r["cle_rescaled"] for r in rows):
        text += ("\n\\* between the two convs of a CLE pair: the quantized graph holds the float tensor divided "
                 "per channel by the CLE scale. SQNR and cosine are taken after undoing it (float model scale); "
                 "the ranges are in the quantized graph's scale, where the fix_pos applies.\n")
    nodes_by_note = {}  # type: Dict[str, List[str]]
    for r in rows:
        for note in r["notes"]:
            if not note.startswith("rescaled by CLE"):
                nodes_by_note.setdefault(note, []).append(r["node"])
    if nodes_by_note:
        text += "\n" + "".join("- %s: %s\n" % (note, ", ".join(nodes)) for note, nodes in nodes_by_note.items())
    return text


def render_markdown(r: Dict[str, Any]) -> str:
    """report.md: the same facts as report.json, for people."""
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
             "- backend: `%s`, target: `%s`" % (r["run"]["backend"], r["run"]["target"]), "",
             "## Accuracy", "",
             "| float | quantized | drop (points) | eval images |", "|---|---|---|---|",
             "| %s | %s | %s | %s |" % (_fmt(r["float_accuracy"]), _fmt(r["quant_accuracy"]),
                                        _fmt(None if r["accuracy_drop"] is None else 100 * r["accuracy_drop"], "%.2f"),
                                        r["eval_images"]), ""]
    if r["warnings"]:
        lines += ["## Warnings", ""] + ["- %s" % w for w in r["warnings"]] + [""]
    if r["quantizer_changes"]:
        lines += ["## Changes the quantizer makes for the DPU", ""] + ["- %s" % c for c in r["quantizer_changes"]] + [""]
    if r.get("sensitivity"):
        lines += ["## Per-layer sensitivity (quantized vs float, eval data)", "",
                  sensitivity_table(r["sensitivity"]), ""]
        if r.get("plots"):
            lines += ["![SQNR and cosine per layer](%s)" % r["plots"]["sensitivity"], "",
                      "![activation ranges and fix_pos](%s)" % r["plots"]["activation_ranges"], ""]
        else:
            lines += ["The plots need matplotlib (`pip install matplotlib`).", ""]
    led = r["ledger"]
    lines += ["## Memory ledger", "",
              "copies per batch at the quantizer boundary: **%s**" % led.get("copies_per_batch", "n/a"), ""]
    if led.get("stages"):
        lines += ["Per stage over the %s calibration batches (the counters are in report.json):" % led.get("batches"),
                  "", "| stage | batches | shares storage with its input | bytes allocated (total) |",
                  "|---|---|---|---|"]
        for c in led["stages"]:
            lines.append("| %s | %d | %s | %d |" % (c["stage"], c["batches"], "yes" if not c["copies"] else
                                                   "no" if not c["views"] else "some batches", c["bytes_allocated"]))
        lines.append("")
    if r.get("onnx_agreement"):
        lines += ["## ONNX Runtime vs simulation", "",
                  "| flavour | max abs diff | differing | elements | max LSB | ORT optimizations |",
                  "|---|---|---|---|---|---|"]
        for fmt, a in sorted(r["onnx_agreement"].items()):
            lines.append("| %s | %g | %d | %d | %s | %s |" % (fmt, a["max_abs_diff"], a["mismatches"], a["elements"],
                                                            a["max_diff_lsb"], a.get("ort_optimizations", "none")))
        lines += ["", "The simulation and `onnx_exact` reproduce the DPU's numbers. `onnx_qdq` rounds ties half to "
                  "even (ONNX QuantizeLinear) where the DPU rounds half_up; it was checked bit for bit against the "
                  "simulation with that one change, and its difference from the DPU's numbers is shown above.", ""]
    if r.get("fast_finetune"):
        lines += finetune_lines(r["fast_finetune"])
    if r.get("xmodel"):
        x = r["xmodel"]
        lines += ["## xmodel", "",
                  "`%s`: %d ops (%d fix), %d bytes; read back and checked (topological order, arguments, attributes, "
                  "shapes): %s; run by the interpreter on the batch-1 example: %d of %d output elements differ from "
                  "the simulation." % (x["path"], x["ops"], x["fix_ops"], x["bytes"], x["check"], x["mismatches"],
                                       x["elements"]),
                  "", "`vai_c_xir` compiles this file (the compile plan names it); it is the file the real quantizer's "
                  "`export_xmodel()` writes for this model and calibration.", ""]
    if r.get("compile"):
        c = r["compile"]
        lines += ["## Compile", ""]
        if c.get("compiled"):
            lines.append("compiled: `%s`" % c["compiled"])
        else:
            lines.append("not compiled: %s. Next: %s. The exact command is in `%s`."
                         % (c.get("reason"), c.get("next") or "see `%s`" % (c.get("plan") or {}).get("plan"),
                            (c.get("plan") or {}).get("script")))
        lines.append("")
    src = r.get("source")
    if src:
        lines += ["## Source data", "",
                  "- %s%s: shape %s, %s, %s%s" % (src.get("kind"), " `%s`" % src["path"] if src.get("path") else "",
                                                 src.get("shape"), src.get("dtype"), src.get("layout"),
                                                 ", memory-mapped" if src.get("mmap") else "")]
        if "unchanged" in src:
            lines.append("- unchanged by the run: **%s** (sha256 `%s`)" % (src["unchanged"], src["sha256_after"][:16]))
        for part, info in sorted((src.get("splits") or {}).items()):
            lines.append("- %s split (%s): %d images%s" % (
                part, src.get("split_order"), info["images"],
                "; classes " + ", ".join("%s (%d)" % kv for kv in info["classes"].items()) if info.get("classes")
                else ""))
        if src.get("class_counts"):
            lines.append("- classes (images): %s" % ", ".join("%s (%d)" % kv for kv in src["class_counts"].items()))
        if src.get("skipped"):
            lines.append("- skipped %d unreadable files:" % src["skipped"])
            lines += ["  - `%s`: %s" % (f["file"], f["error"]) for f in src.get("skipped_files", [])]
        lines.append("")
    lines += ["## Artifacts", "", "| file | bytes | sha256 |", "|---|---|---|"]
    lines += ["| %s%s | %d | `%s` |" % (a["path"], " (left by an unfinished step)" if a.get("incomplete") else "",
                                       a["bytes"], a["sha256"][:16]) for a in r["artifacts"]]
    lines += ["", "## Versions", ""] + ["- %s: %s" % kv for kv in sorted(r["versions"].items())]
    return "\n".join(lines) + "\n"


def finetune_summary(record: Any) -> Any:
    """The calib step's fast finetune record for report.json (per-layer evaluations left out), or None."""
    if not record:
        return None
    out = {k: v for k, v in record.items() if k not in ("layers", "ledger")}
    out["layers"] = [{k: v for k, v in layer.items() if k != "evals"} for layer in record.get("layers", [])]
    return out


def finetune_lines(f: Dict[str, Any]) -> List[str]:
    """report.md's fast finetune section: what ran, the candidates' output MSE and top-1 agreement with
    float on the finetune data, and the per-layer net loss and codes changed."""
    lines = ["## Fast finetune", "",
             "`%s` on %s batches in %s s; net loss (nndct's objective: batch mean of sqrt(MSE) at the last "
             "quantized node) %s -> %s; %s parameter codes changed." % (
                 f.get("method"), f.get("batches"), f.get("seconds"),
                 ", ".join("%.6g" % v for v in f.get("net_loss_before") or []),
                 ", ".join("%.6g" % v for v in f.get("net_loss_after") or []), f.get("codes_changed")), ""]
    if f.get("candidates"):
        lines += ["| calibration | output MSE vs float | top-1 agreement |", "|---|---|---|"]
        for name, v in f["candidates"].items():
            lines.append("| %s | %.6g | %s |" % (name, v["mse"], _fmt(v["top1_agreement"])))
        lines += ["", "Measured on the finetune data; `plain` is calibration without the finetune (what the run "
                  "would have written without it).", ""]
    if f.get("layers"):
        lines += ["| layer | passes | net loss in | net loss out | codes changed |", "|---|---|---|---|---|"]
        for layer in f["layers"]:
            lines.append("| %s | %d | %s | %s | %d |" % (layer["node"], layer["passes"],
                                                       ", ".join("%.6g" % v for v in layer["net_loss_in"]),
                                                       ", ".join("%.6g" % v for v in layer["net_loss_out"]),
                                                       layer["weight_changed"] + layer["bias_changed"]))
        lines.append("")
    return lines


def xmodel_summary(report: Any, work_dir: str) -> Any:
    """The export's xmodel report for report.json: path (relative to the run folder), ops, fix ops,
    bytes, check, and the interpreter's comparison with the simulation; None without an xmodel."""
    if not report or "path" not in report:
        return None
    run = report.get("interpreter", {})
    return {"path": os.path.relpath(report["path"], work_dir), "ops": report["ops"], "fix_ops": report["fix_ops"],
            "bytes": report["bytes"], "check": report["check"], "elements": run.get("elements", 0),
            "mismatches": run.get("mismatches", 0)}


def remove_report(work_dir: str) -> None:
    """Delete report.json and report.md (before files they list are removed; a new report follows)."""
    for name in ("report.json", "report.md"):
        path = os.path.join(work_dir, name)
        if os.path.exists(path):
            os.remove(path)


def write_report(run: Any) -> Dict[str, Any]:
    """Write report.json and report.md into the run folder and return the report dict."""
    report = build_report(run)
    fileio.write_json(run.path("report.json"), report)
    fileio.write_text(run.path("report.md"), render_markdown(report))
    return report


def summary_lines(r: Dict[str, Any]) -> List[str]:
    """The short summary the command line prints at the end."""
    out = ["warning: %s" % w for w in r["warnings"]]
    if r.get("float_accuracy") is not None:
        out.append("float accuracy %.4f, quant accuracy %.4f (drop %.2f points) on %d eval images"
                   % (r["float_accuracy"], r["quant_accuracy"], 100 * r["accuracy_drop"], r["eval_images"]))
    if r["ledger"].get("copies_per_batch") is not None:
        out.append("copies per batch at the quantizer boundary: %s" % r["ledger"]["copies_per_batch"])
    for fmt, a in sorted((r.get("onnx_agreement") or {}).items()):
        out.append("%s vs simulation in ONNX Runtime: max abs diff %g, %d of %d elements differ%s"
                   % (fmt, a["max_abs_diff"], a["mismatches"], a["elements"],
                      " (bit-exact with the simulation rounding half to even)" if "reference_mismatches" in a else ""))
    x = r.get("xmodel")
    if x:
        out.append("xmodel %s written and verified: %d ops, checked; the interpreter reproduces the simulation "
                   "(%d of %d elements differ)" % (x["path"], x["ops"], x["mismatches"], x["elements"]))
    c = r.get("compile")
    if c:
        out.append("compiled: %s" % c["compiled"] if c.get("compiled") else "not compiled: %s; %s" % (
            c.get("reason"), c.get("next") or "%s says how" % (c.get("plan") or {}).get("plan")))
    if r.get("source", {}).get("skipped"):
        out.append("skipped %d unreadable image files (listed in the report)" % r["source"]["skipped"])
    if "unchanged" in (r.get("source") or {}):
        out.append("source data unchanged: %s" % r["source"]["unchanged"])
    out.append("report: %s" % os.path.join(r["run"]["work_dir"], "report.md"))
    return out
