"""test: float and quantized top-1 accuracy on the eval split, and the per-layer sensitivity."""
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .base import Step, StepResult, omitted_when_none, transient
from .calib import ranks

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
    float_correct: int = transient(int)
    classes: Dict[int, int] = transient(dict)


def run(ctx: Any) -> TestResult:
    import torch

    from ..quantizers.calib_commit import check_committed
    from .context import FINGERPRINT_INFORMATIVE
    from ..progress import phase
    model, example = ctx.float_model(), ctx.feed.example()
    ctx.check_labels(model, example, "test")
    check_committed(ctx.quant_dir, ctx.fingerprint(model, example), ignore=FINGERPRINT_INFORMATIVE,
                    redo="run the calib step again")
    backend = ctx.backend()
    handle = backend.load_test(model, example, ctx.quant_dir, ctx.settings(), traced=ctx.trace(model))
    ledger = ctx.feed.new_ledger()
    limit = ctx.cfg.data.eval_batches  # >= 1 or None (config); the eval split is not empty (preflight)
    float_correct, quant_correct, n = 0, 0, 0
    classes = {}  # type: Dict[int, int]
    start = time.perf_counter()
    with phase("test: float and quantized inference on %d eval batches" % ctx.feed.n_batches("eval", limit)), \
            torch.no_grad():
        for x, y in ctx.feed.batches("eval", ledger=ledger, limit=limit):
            float_correct += int((model(x).argmax(dim=1) == y).sum())
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
    warnings = []
    if n < SMALL_EVAL:
        warnings.append("accuracy was measured on only %d eval images: one image moves it by %.2f points, so the "
                        "accuracy drop check is coarse; give the eval split more data" % (n, 100.0 / n))
    for warning in warnings:
        log.warning("test: %s", warning)
    return TestResult(float_accuracy=float_acc, quant_accuracy=quant_acc, warnings=warnings, accuracy_drop=drop,
                      eval_images=n, eval_seconds=eval_seconds, max_accuracy_drop=ctx.cfg.quantizer.max_accuracy_drop,
                      sensitivity=sensitivity, plots=plot_files, ledger=ledger.summary(),
                      distributed=ranks(ctx, ledger), float_correct=float_correct, classes=classes)


def check(ctx: Any, result: TestResult) -> None:
    """The verdict, after steps/test.json is saved: a float model no better than chance
    (quantizer.require_float_above_chance), an accuracy drop past quantizer.max_accuracy_drop."""
    from ..checks import check_above_chance
    from ..errors import QuantizationError
    q = ctx.cfg.quantizer
    if q.require_float_above_chance:
        check_above_chance(result.float_correct, result.eval_images, result.classes,
                           (ctx.load_step("calib") or {}).get("warnings", []))
    if result.accuracy_drop > q.max_accuracy_drop:
        raise QuantizationError("test: quantized accuracy %.4f is %.2f points below float %.4f, more than "
                                "quantizer.max_accuracy_drop=%.4f; use more or better calibration data"
                                % (result.quant_accuracy, 100 * result.accuracy_drop, result.float_accuracy,
                                   q.max_accuracy_drop))


def _sensitivity(ctx: Any, backend: Any, model: Any, example: Any, limit: Optional[int],
                 test_handle: Any) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """Per-layer SQNR and cosine of the simulated model against float on the eval data (JSON-safe rows),
    and the PNG plots of that table and of the activation ranges (``backend.layer_sensitivity``, plots.py).
    The simulated model is ``backend.analysis_handle``: the test handle when it is one, else built from
    the calibration files, so this works after either backend's calib."""
    from .. import plots
    from ..quantizers.quant_info import read_quant_info
    from ..progress import phase
    handle = backend.analysis_handle(test_handle, model, example, ctx.quant_dir, ctx.settings(),
                                     traced=ctx.trace(model))
    with phase("test: per-layer sensitivity (SQNR, cosine) on %d eval batches" % ctx.feed.n_batches("eval", limit)):
        rows = backend.layer_sensitivity(model, handle, read_quant_info(ctx.quant_dir),
                                         (x for x, _ in ctx.feed.batches("eval", limit=limit)), ctx.settings(),
                                         comm=ctx.comm if ctx.feed.sharded else None, example=example,
                                         traced=ctx.trace(model))
    files = {}
    if plots.is_available() and ctx.is_main:
        with phase("test: plots"):
            files = {"sensitivity": plots.plot_sensitivity(rows, ctx.path("plots", "sensitivity.png")),
                     "activation_ranges": plots.plot_activation_ranges(rows,
                                                                       ctx.path("plots", "activation_ranges.png"))}
    return [r.to_json() for r in rows], files


STEP = Step("test", run, writes="plots", requires=("calib",), own_process=True, distributed=True, check=check,
            result=TestResult)
