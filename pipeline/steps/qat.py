"""qat: quantization-aware training after calib (quantizer.qat); writes qat/: quant_info.json (shipped),
test/quant_info.json (raw), deployable.pth (the trained float weights), qat_record.json, loss.png.

The trainable model is the backend's (``QuantizerBackend.qat_trainable``: the PTQ test-mode graph with a
learnable threshold at each quantization point), its thresholds started from the calib step's
quant_info.json (``init: calib``) or by warm-up; ``qat_train.train`` trains it on the train split
through the data feed. Nothing is written until training has ended; then the deployable files go
into qat/ in one batch (``pipeline.fileio.write_files``), the deployed model is built from them
exactly as the test and export steps build it (``ModelPart.qat_handle``: a PTQ-style test-mode model
of the trained float weights with the QAT quant_info.json), and float, PTQ, the trainable model in
eval mode and the deployed model are measured side by side on the eval split. Every file is handed
on with its sha256 (``handed_on``); the test, export and deploy steps check them
(``ModelPart.check_qat``). A failed or killed run leaves no result: the driver removes what it
wrote (``one_unit``) and the later steps refuse to run without steps/qat.json.
"""
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .base import Step, StepResult, in_run_folder

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")

RECORD_FILE = "qat_record.json"
PLOT_FILE = "loss.png"
ROWS = (("float", "float"), ("ptq", "PTQ (calib step)"), ("qat_trainable", "QAT trainable (eval mode)"),
        ("qat_deployed", "QAT deployed"))


@dataclass
class QatResult(StepResult):
    """steps/qat.json: what the training did (``epochs``, ``steps``, ``seconds``, ``epoch_losses``,
    ``loss_curve`` ``[[step, loss], ...]``), the eval-split ``accuracy`` of float, PTQ, the QAT trainable
    model (eval mode) and the deployed model, how the deployed outputs compare with the trainable
    model's (``deployed_vs_trainable``), one row per quantized tensor (``thresholds``: fix position at
    the start, at the end, shipped), the ledgers (the train split's, one per epoch, and the eval pass's),
    ``settings`` (quantizer.qat, checked by the later steps), ``files``, ``plots`` and ``handed_on``."""
    epochs: int = 0
    steps: int = 0
    batch_size: int = 0
    seconds: float = 0.0
    init: str = ""
    exact_deploy: bool = True
    bn_frozen_at: Optional[int] = None
    epoch_losses: List[float] = field(default_factory=list)
    loss_curve: List[List[float]] = field(default_factory=list)
    accuracy: Dict[str, Optional[float]] = field(default_factory=dict)
    ptq_label: str = "PTQ (calib step)"
    eval_images: int = 0
    deployed_vs_trainable: Dict[str, Any] = field(default_factory=dict)
    thresholds: List[Dict[str, Any]] = field(default_factory=list)
    ledger: Dict[str, Any] = field(default_factory=dict)
    copies_per_batch_by_epoch: List[int] = field(default_factory=list)
    eval_ledger: Dict[str, Any] = field(default_factory=dict)
    settings: Dict[str, Any] = field(default_factory=dict)
    files: List[str] = field(default_factory=list)
    plots: Dict[str, str] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)

    REPORT_KEYS = ("qat",)

    def step_warnings(self) -> List[str]:
        return list(self.warnings)

    def moved(self) -> List[Dict[str, Any]]:
        """The threshold rows whose fix position changed in training or in the constraint pass."""
        return [r for r in self.thresholds if not r["start"] == r["end"] == r["shipped"]]

    def report_fields(self, work_dir: str) -> Dict[str, Any]:
        return {"qat": {"accuracy": dict(self.accuracy), "eval_images": self.eval_images, "epochs": self.epochs,
                        "steps": self.steps, "seconds": self.seconds, "init": self.init,
                        "exact_deploy": self.exact_deploy, "epoch_losses": list(self.epoch_losses),
                        "deployed_vs_trainable": dict(self.deployed_vs_trainable),
                        "copies_per_batch": self.ledger.get("copies_per_batch"),
                        "moved_fix_positions": len(self.moved()),
                        "plots": {k: in_run_folder(v, work_dir) for k, v in self.plots.items()}}}

    def report_section(self, work_dir: str) -> List[str]:
        a, cmp = self.accuracy, self.deployed_vs_trainable
        lines = ["## Quantization-aware training", "",
                 "%d epoch%s, %d optimizer steps of batch %d on the train split in %.1f s; thresholds from %s; "
                 "exact_deploy %s; BN statistics %s. Copies per batch at the quantizer boundary: **%s** (each "
                 "epoch: %s)." % (self.epochs, "" if self.epochs == 1 else "s", self.steps, self.batch_size,
                                  self.seconds, "the calibration" if self.init == "calib" else "warm-up on the first batch",
                                  "on" if self.exact_deploy else "off",
                                  "never frozen" if self.bn_frozen_at is None else
                                  "frozen after %d epoch%s" % (self.bn_frozen_at, "" if self.bn_frozen_at == 1 else "s"),
                                  self.ledger.get("copies_per_batch"), ", ".join(str(c) for c in
                                                                               self.copies_per_batch_by_epoch)), "",
                 "| model | top-1 on %d eval images |" % self.eval_images, "|---|---|"]
        for key, label in ROWS:
            if a.get(key) is not None:
                lines.append("| %s | %.4f |" % (self.ptq_label if key == "ptq" else label, a[key]))
        lines += ["", _comparison(cmp), ""]
        if self.epoch_losses:
            lines += ["Mean loss per epoch: %s." % ", ".join("%.4f" % v for v in self.epoch_losses), ""]
        plots = self.report_fields(work_dir)["qat"]["plots"]
        lines += (["![QAT loss per step](%s)" % plots["loss"], ""] if plots.get("loss") else
                  ["The loss plot needs matplotlib (`pip install matplotlib`).", ""])
        if self.thresholds:
            lines += ["### Fix positions (per quantized tensor)", "",
                      "`start`: when training began (%s); `end`: the trained threshold's (test/quant_info.json); "
                      "`shipped`: after the DPU constraint pass (quant_info.json). %d of %d changed." % (
                          "the calibration's" if self.init == "calib" else "after warm-up", len(self.moved()),
                          len(self.thresholds)), "",
                      "| tensor | start | end | shipped | changed | log2 threshold start -> end |",
                      "|---|---|---|---|---|---|"]
            for r in self.thresholds:
                lines.append("| %s | %s | %s | %s | %s | %.4f -> %.4f |" % (
                    r["tensor"], r["start"], r["end"], r["shipped"],
                    "" if r["start"] == r["end"] == r["shipped"] else "yes", r["log_threshold_start"],
                    r["log_threshold_end"]))
            lines.append("")
        return lines

    def summary_lines(self, work_dir: str) -> List[str]:
        a = self.accuracy
        parts = ["%s %.4f" % (name, a[key]) for key, name in (("float", "float"), ("ptq", "PTQ"),
                                                                ("qat_trainable", "QAT trainable"),
                                                                ("qat_deployed", "QAT deployed"))
                 if a.get(key) is not None]
        return ["QAT: %d epoch%s, %d steps; top-1 %s (deployed %s); %d fix positions changed"
                % (self.epochs, "" if self.epochs == 1 else "s", self.steps, ", ".join(parts),
                   "bit-exact with the trainable model" if self.deployed_vs_trainable.get("identical") else
                   "differs from the trainable model", len(self.moved()))]


def _comparison(cmp: Dict[str, Any]) -> str:
    if not cmp:
        return ""
    if cmp.get("identical"):
        return "The deployed model's outputs equal the trainable model's (eval mode) bit for bit on the eval data."
    return ("The deployed model's outputs differ from the trainable model's (eval mode): max abs diff %g, top-1 "
            "differs on %d images%s." % (cmp.get("max_abs_diff", 0.0), cmp.get("top1_differ", 0),
                                         "" if cmp.get("exact_deploy") else " (quantizer.qat.exact_deploy is "
                                         "off: the real quantizer's behaviour; true trains at the positions that ship)"))


def run(ctx: "StepContext") -> QatResult:
    import torch

    from .. import fileio
    from ..handoff import record
    from . import plots
    from .model import check_labels, qat_settings_record
    from .qat_train import curve, evaluate, positions, threshold_moves, train
    q = ctx.cfg.quantizer.qat
    model, example = ctx.model.float_model(), ctx.feed.example()
    check_labels(ctx.feed.source.labels, model, example, "qat")
    backend, out_dir = ctx.model.backend(), ctx.model.qat_dir
    settings = qat_settings_record(ctx.cfg)
    torch.manual_seed(settings["seed"])
    ptq = ctx.model.ptq_handle(model, example)  # checks the calibration first: QAT starts from it or is compared with it
    trainable = backend.qat_trainable(model, example, ctx.model.qat_settings(), q.exact_deploy,
                                      calib_dir=ctx.model.quant_dir if q.init == "calib" else None)
    log.info("qat: %d quantizers, %d trainable weights; %s on the train split (%d images), %d epoch%s ...",
             len(trainable.quantizer_parameters()), len(trainable.non_quantizer_parameters()),
             "thresholds from the calibration" if q.init == "calib" else "warm-up", ctx.feed.split_size("train"),
             q.epochs, "" if q.epochs == 1 else "s")
    trained = train(ctx, trainable)
    trainable.eval()
    end = positions(trainable)
    raw, shipped, items = backend.qat_files(trainable, model, out_dir)
    written = fileio.write_files(items)  # nothing is in qat/ before this: training left nothing half-written
    deployed = ctx.model.qat_handle(model, example, out_dir)  # as the test and export steps build it
    measured = evaluate(ctx, [("float", model), ("ptq", ptq), ("qat_trainable", trainable),
                              ("qat_deployed", deployed)], ("qat_trainable", "qat_deployed"))
    measured["deployed_vs_trainable"] = {k: measured[k] for k in ("identical", "max_abs_diff", "top1_differ")}
    measured["deployed_vs_trainable"]["exact_deploy"] = q.exact_deploy
    thresholds = threshold_moves(trained["start"], end, shipped)
    calib = ctx.folder.load_step("calib") or {}
    ft = calib.get("fast_finetune")
    epoch_ends = [sum(int(led.get("batches", 0)) for led in trained["ledgers"][:i + 1])
                  for i in range(len(trained["ledgers"]))]
    points = curve(trained["losses"])
    plot_files = {}
    if plots.is_available() and points:
        path = os.path.join(out_dir, PLOT_FILE)
        written.append(fileio.write_bytes(path, plots.loss_curve_png(points, epoch_ends, "QAT loss per step")))
        plot_files["loss"] = path
    result = QatResult(epochs=trained["epochs"], steps=trained["steps"],
                       batch_size=q.batch_size or ctx.cfg.data.batch_size, seconds=trained["seconds"], init=q.init,
                       exact_deploy=q.exact_deploy, bn_frozen_at=trained["bn_frozen_at"],
                       epoch_losses=trained["epoch_losses"], loss_curve=points, accuracy=measured["accuracy"],
                       ptq_label="PTQ + fast finetune (%s)" % ft["method"] if ft else "PTQ (calib step)",
                       eval_images=measured["images"], deployed_vs_trainable=measured["deployed_vs_trainable"],
                       thresholds=thresholds, ledger=_merged(trained["ledgers"]),
                       copies_per_batch_by_epoch=[led.get("copies_per_batch", 0) for led in trained["ledgers"]],
                       eval_ledger=measured["ledger"], settings=settings, plots=plot_files,
                       warnings=_warnings(ctx, measured))
    record_path = os.path.join(out_dir, RECORD_FILE)
    written.append(fileio.write_json(record_path, {k: v for k, v in result.to_json().items()
                                                   if k in ("epochs", "steps", "epoch_losses", "loss_curve", "accuracy",
                                                            "deployed_vs_trainable", "thresholds", "settings")}))
    result.files = sorted(written)
    result.handed_on = record(ctx.folder.work_dir, result.files)
    a = result.accuracy
    log.info("qat: top-1 on %d eval images: float %.4f, PTQ %.4f, QAT trainable %.4f, QAT deployed %.4f (%s) -> %s",
             result.eval_images, a["float"], a["ptq"], a["qat_trainable"], a["qat_deployed"],
             "bit-exact" if measured["identical"] else "max abs diff %g" % measured["max_abs_diff"], out_dir)
    for warning in result.warnings:
        log.warning("qat: %s", warning)
    return result


def _merged(ledgers: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The first epoch's ledger summary, with ``copies_per_batch`` the most of any epoch's."""
    if not ledgers:
        return {}
    out = dict(ledgers[0])
    out["copies_per_batch"] = max(led.get("copies_per_batch", 0) for led in ledgers)
    out["epochs"] = len(ledgers)
    return out


def _warnings(ctx: "StepContext", measured: Dict[str, Any]) -> List[str]:
    out = []
    q = ctx.cfg.quantizer
    if q.quant_config_file is not None:
        out.append("quantizer.quant_config_file applies to the calibration only: QAT trains and deploys with the "
                   "real QatProcessor's strategy (the defaults at quantizer.bitwidth, CLE and bias correction off)")
    if q.qat.exact_deploy and not measured["identical"]:
        out.append("exact_deploy is on but the deployed model's outputs differ from the trainable model's (max abs "
                   "diff %g): please report this" % measured["max_abs_diff"])
    return out


def off(cfg: Any) -> Optional[str]:
    """Why the qat step does not run: quantizer.qat.enabled is false; None when it is on."""
    return None if cfg.quantizer.qat.enabled else "quantizer.qat.enabled is false"


def needed(cfg: Any) -> Tuple[str, ...]:
    """``("qat",)`` when quantizer.qat.enabled: the test, export and deploy steps then read its result."""
    return () if off(cfg) else (STEP.name,)


def preflight(ctx: "StepContext") -> None:
    """Before any work: one process (QuantizationError under torchrun: the trainable model's warm-up is a
    collective the waiting ranks would never join), a train split with at least one batch (DataError)."""
    from ..errors import DataError, QuantizationError
    if ctx.comm is not None:
        raise QuantizationError("the qat step runs in one process: run it without torchrun (e.g. --steps train,calib,qat "
                                "in one process, then the other steps under torchrun if you wish)")
    if not ctx.feed.split_size("train"):
        raise DataError("the qat step trains on the train split, which is empty (data.split %s, %d images); give it "
                        "a share of the data" % (ctx.cfg.data.split, len(ctx.feed.source)))


STEP = Step("qat", run, writes="qat", requires=("calib",), reads=("train",), one_unit=True,
            preflight=preflight, off=off, result=QatResult)
