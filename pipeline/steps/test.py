"""test: float and quantized top-1 accuracy on the eval split, and the per-layer sensitivity."""
import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import qat as qat_step
from .base import Step, StepResult, in_run_folder, omitted_when_none, transient
from .calib import ranks

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")

SMALL_EVAL = 100  # fewer eval images than this: the test step warns that the accuracy is coarse


@dataclass
class TestResult(StepResult):
    """steps/test.json; ``distributed`` (world_size, ledger_by_rank) only under torchrun."""
    __test__ = False  # not a pytest class
    float_accuracy: float = 0.0
    quant_accuracy: float = 0.0
    warnings: List[str] = field(default_factory=list)
    accuracy_drop: float = 0.0
    eval_images: int = 0
    eval_seconds: float = 0.0
    max_accuracy_drop: float = 0.0
    sensitivity: List[Dict[str, Any]] = field(default_factory=list)
    plots: Dict[str, str] = field(default_factory=dict)
    ledger: Dict[str, Any] = field(default_factory=dict)
    distributed: Optional[Dict[str, Any]] = omitted_when_none()
    quantized_by: Optional[str] = omitted_when_none()  # "qat": the quantized model is the qat step's deployed one
    float_correct: int = transient(int)
    classes: Dict[int, int] = transient(dict)
    # the gate's verdict when it failed (``check``'s message): export, compile and deploy refuse to go on from it
    gate_failed: Optional[str] = omitted_when_none()

    REPORT_KEYS = ("float_accuracy", "quant_accuracy", "accuracy_drop", "eval_images", "sensitivity", "plots")

    def step_warnings(self) -> List[str]:
        return list(self.warnings)

    def report_fields(self, work_dir: str) -> Dict[str, Any]:
        return {"float_accuracy": self.float_accuracy, "quant_accuracy": self.quant_accuracy,
                "accuracy_drop": self.accuracy_drop, "eval_images": self.eval_images, "sensitivity": self.sensitivity,
                "plots": {k: in_run_folder(v, work_dir) for k, v in self.plots.items()}}

    def report_section(self, work_dir: str) -> List[str]:
        lines = ["## Accuracy", "", "| float | quantized%s | drop (points) | eval images |"
                 % (" (QAT deployed)" if self.quantized_by == "qat" else ""), "|---|---|---|---|",
                 "| %.4f | %.4f | %.2f | %s |" % (self.float_accuracy, self.quant_accuracy, 100 * self.accuracy_drop,
                                                  self.eval_images), ""]
        if self.sensitivity:
            lines += ["## Per-layer sensitivity (quantized vs float, eval data)", "",
                      sensitivity_table(self.sensitivity), ""]
            plots = self.report_fields(work_dir)["plots"]
            if plots:
                lines += ["![SQNR and cosine per layer](%s)" % plots["sensitivity"], "",
                          "![activation ranges and fix_pos](%s)" % plots["activation_ranges"], ""]
            else:
                lines += ["The plots need matplotlib (`pip install matplotlib`).", ""]
        return lines

    def summary_lines(self, work_dir: str) -> List[str]:
        return ["float accuracy %.4f, quant accuracy %.4f%s (drop %.2f points) on %d eval images"
                % (self.float_accuracy, self.quant_accuracy, " (QAT)" if self.quantized_by == "qat" else "",
                   100 * self.accuracy_drop, self.eval_images)]

    def quantizer_changes(self) -> List[Tuple[str, str]]:
        return [(note, row.get("float_node") or row.get("node")) for row in self.sensitivity
                for note in row.get("notes", [])]


def run(ctx: "StepContext") -> TestResult:
    from .model import check_labels
    import torch

    from ..fx.in_place import written_inputs
    from ..progress import phase
    model, example = ctx.model.float_model(), ctx.feed.example()
    check_labels(ctx.feed.source.labels, model, example, "test")
    backend = ctx.model.backend()
    handle = ctx.model.test_handle(model, example)
    # a float model that writes its input in place (x.sub_(0.5), nn.ReLU(inplace=True) first) runs on a copy: the
    # quantized model reads the batch after it (an untraceable model, of unknown writes, too)
    traced = ctx.model.trace(model)
    float_copy = traced.graph is None or bool(written_inputs(traced.module, traced.graph))
    ledger = ctx.feed.new_ledger()
    limit = ctx.cfg.data.eval_batches  # >= 1 or None (config); the eval split is not empty (preflight)
    float_correct, quant_correct, n = 0, 0, 0
    classes = {}  # type: Dict[int, int]
    start = time.perf_counter()
    with phase("test: float and quantized inference on %d eval batches" % ctx.feed.n_batches("eval", limit)), \
            torch.no_grad():
        for x, y in ctx.feed.batches("eval", ledger=ledger, limit=limit):
            float_correct += int((model(x.clone() if float_copy else x).argmax(dim=1) == y).sum())
            quant_correct += int((handle(x).argmax(dim=1) == y).sum())
            n += len(y)
            for label in y.tolist():
                classes[label] = classes.get(label, 0) + 1
    if ctx.comm is not None:  # integer counts: the sum is exact in any order
        float_correct, quant_correct, n = [sum(c) for c in zip(*ctx.comm.gather((float_correct, quant_correct, n)))]
        merged = {}  # type: Dict[int, int]
        for part in ctx.comm.gather(classes):
            for label, count in part.items():
                merged[label] = merged.get(label, 0) + count
        classes = merged
    float_acc, quant_acc = float_correct / n, quant_correct / n
    drop = float_acc - quant_acc
    log.info("test: float accuracy %.4f, quant accuracy %.4f (drop %.2f points) on %d images",
             float_acc, quant_acc, 100 * drop, n)
    eval_seconds = time.perf_counter() - start  # float and quantized inference, all ranks (after the gather)
    sensitivity, plot_files = _sensitivity(ctx, backend, model, example, limit, handle)
    from ..checks import chance_warnings
    warnings = chance_warnings(float_correct, n, classes)
    if n < SMALL_EVAL:
        warnings.append("accuracy was measured on only %d eval images: one image moves it by %.2f points, so the "
                        "accuracy drop check is coarse; give the eval split more data" % (n, 100.0 / n))
    for warning in warnings:
        log.warning("test: %s", warning)
    result = TestResult(float_accuracy=float_acc, quant_accuracy=quant_acc, warnings=warnings, accuracy_drop=drop,
                        eval_images=n, eval_seconds=eval_seconds,
                        max_accuracy_drop=ctx.cfg.quantizer.max_accuracy_drop, sensitivity=sensitivity,
                        plots=plot_files, ledger=ledger.summary(), distributed=ranks(ctx, ledger),
                        quantized_by="qat" if ctx.model.qat_enabled else None, float_correct=float_correct,
                        classes=classes)
    failure = _verdict(ctx, result)
    result.gate_failed = None if failure is None else str(failure)
    return result


def _verdict(ctx: "StepContext", result: TestResult) -> Optional[Exception]:
    """The gate's failure as the exception ``check`` raises (DataError, QuantizationError), or None."""
    from ..checks import check_above_chance
    from ..errors import PipelineError, QuantizationError
    q = ctx.cfg.quantizer
    if q.require_float_above_chance:
        try:
            check_above_chance(result.float_correct, result.eval_images, result.classes,
                               (ctx.folder.load_step("calib") or {}).get("warnings", []))
        except PipelineError as exc:
            return exc
    if result.accuracy_drop > q.max_accuracy_drop:
        return QuantizationError("test: quantized accuracy %.4f is %.2f points below float %.4f, more than "
                                 "quantizer.max_accuracy_drop=%.4f; %s"
                                 % (result.quant_accuracy, 100 * result.accuracy_drop, result.float_accuracy,
                                    q.max_accuracy_drop, "train QAT longer or with other rates (quantizer.qat.epochs, "
                                    "lr, threshold_lr)" if result.quantized_by == "qat" else
                                    "use more or better calibration data"))
    return None


def check(ctx: "StepContext", result: TestResult) -> None:
    """The verdict, after steps/test.json is saved: a float model no better than chance
    (quantizer.require_float_above_chance), an accuracy drop past quantizer.max_accuracy_drop."""
    failure = _verdict(ctx, result)
    if failure is not None:
        raise failure


def _sensitivity(ctx: "StepContext", backend: Any, model: Any, example: Any, limit: Optional[int],
                 test_handle: Any) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """Per-layer SQNR and cosine of the simulated model against float on the eval data (JSON-safe rows),
    and the PNG plots of that table and of the activation ranges (``pipeline.sensitivity``, plots.py).
    The simulated model is ``sensitivity.simulated_model``: the test handle when the backend's is the
    simulation's, else built from the calibration files, so this works after either backend's calib."""
    from . import plots
    from ..quantizers.quant_info import read_quant_info
    from ..progress import phase
    from ..sensitivity import layer_sensitivity, simulated_model
    # against the float model the quantized one is made of (with QAT: the trained weights, qat/'s quant_info.json)
    model, qdir = ctx.model.deployed_float(model), ctx.model.deployed_dir
    settings = ctx.model.qat_settings() if ctx.model.qat_enabled else ctx.model.settings()
    handle = simulated_model(test_handle, backend.simulates, model, example, qdir, settings,
                             traced=ctx.model.trace(model))
    with phase("test: per-layer sensitivity (SQNR, cosine) on %d eval batches" % ctx.feed.n_batches("eval", limit)):
        rows = layer_sensitivity(model, handle, read_quant_info(qdir),
                                 (x for x, _ in ctx.feed.batches("eval", limit=limit)), settings,
                                 comm=ctx.comm if ctx.feed.sharded else None, example=example,
                                 traced=ctx.model.trace(model))
    files = {}
    if plots.is_available() and ctx.is_main:
        with phase("test: plots"):
            files = {"sensitivity": plots.plot_sensitivity(rows, ctx.folder.path("plots", "sensitivity.png")),
                     "activation_ranges": plots.plot_activation_ranges(rows,
                                                                       ctx.folder.path("plots", "activation_ranges.png"))}
    return [r.to_json() for r in rows], files


def _num(v: float) -> str:
    return "%.4g" % v


def sensitivity_table(rows: List[Dict[str, Any]]) -> str:
    """The rows as a Markdown table (one line per row, graph order) plus a footnote for CLE rows.

    Columns: quantized node, float node (``LayerSensitivity.float_name``), op, bits/fix_pos, per-sample shape, SQNR (dB, two
    decimals, ``inf`` when exact), cosine (six decimals), float range, the fix_pos range, clipped
    percentage. Ranges of CLE rows (marked ``*``) are in the quantized graph's scale. Below the
    table: a footnote when there are CLE rows, and each note with the nodes it applies to.

    ``rows``: ``LayerSensitivity`` rows as ``pipeline.sensitivity.layer_sensitivity`` returns them, or after
    ``LayerSensitivity.to_json`` and a JSON round trip (``steps/test.json``).
    """
    from ..quantizers.sensitivity_rows import LayerSensitivity
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


STEP = Step("test", run, writes="plots", requires=("calib",), after=("qat",), requires_when=qat_step.needed,
            reads=("eval",), own_process=True, distributed=True, check=check, result=TestResult)
