"""calib: calibrate on the calib split; write quantize_result/quant_info.json and the fingerprint."""
import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from .base import Step, StepResult, omitted_when_none

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")

SPILL_DIR = ".finetune-spill"  # in the run folder: fast finetune's cache files beyond its memory budget


@dataclass
class CalibResult(StepResult):
    """steps/calib.json; ``distributed`` (world_size, ledger_by_rank) only under torchrun."""
    batches: int = 0
    seconds: float = 0.0
    files: List[str] = field(default_factory=list)
    input_stats: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    ledger: Dict[str, Any] = field(default_factory=dict)
    distributed: Optional[Dict[str, Any]] = omitted_when_none()
    fast_finetune: Optional[Dict[str, Any]] = omitted_when_none()

    REPORT_KEYS = ("ledger", "fast_finetune")

    def step_warnings(self) -> List[str]:
        return list(self.warnings)

    def report_fields(self, work_dir: str) -> Dict[str, Any]:
        return {"ledger": self.ledger, "fast_finetune": finetune_summary(self.fast_finetune)}

    def report_section(self, work_dir: str) -> List[str]:
        return ledger_lines(self.ledger) + (finetune_lines(finetune_summary(self.fast_finetune))
                                            if self.fast_finetune else [])

    def summary_lines(self, work_dir: str) -> List[str]:
        copies = self.ledger.get("copies_per_batch")
        return [] if copies is None else ["copies per batch at the quantizer boundary: %s" % copies]


def ranks(ctx: "StepContext", ledger: Any) -> Optional[Dict[str, Any]]:
    """Under torch.distributed: ``{"world_size", "ledger_by_rank"}`` (each rank's boundary ledger
    summary; ``ledger`` is rank 0's), else None. A collective."""
    if ctx.comm is None:
        return None
    return {"world_size": ctx.comm.world, "ledger_by_rank": ctx.comm.gather(ledger.summary())}


def run(ctx: "StepContext") -> CalibResult:
    from ..checks import InputStats
    from ..quantizers import calib_commit
    from ..fileio import json_bytes
    from ..quantizers.fingerprint import FILE_NAME, write_fingerprint
    limit = ctx.cfg.data.calib_batches  # >= 1 or None (config); the calib split is not empty (preflight)
    model, example, ledger = ctx.model.float_model(), ctx.feed.example(), ctx.feed.new_ledger()
    ft_ledger = ctx.feed.new_ledger()  # the finetune's own pass over its split: one copy per batch there too
    stats = InputStats() if ctx.comm is None else InputStats().defer()
    batches = (stats.add(x) for x, _ in ctx.feed.batches("calib", ledger=ledger, limit=limit))
    # rank 0 writes and commits under the folder's exclusive lock (a drop-in export aimed at the same folder
    # waits), and the manifest records the sha256 of the bytes written here (calib_commit); files the backend
    # did not hash as it wrote them (not in CalibrationSummary.sha256) are hashed from the folder, under the lock
    with contextlib.ExitStack() as held:
        if ctx.is_main:
            held.enter_context(calib_commit.exclusive(ctx.model.quant_dir))
            calib_commit.begin(ctx.model.quant_dir)  # from here the folder holds no committed calibration until commit
        start = time.perf_counter()
        spill = os.path.join(ctx.folder.work_dir, SPILL_DIR)
        shutil.rmtree(spill, ignore_errors=True)  # a killed finetune's files
        try:
            summary = ctx.model.backend().calibrate(model, example, batches, ctx.model.quant_dir, ctx.model.settings(),
                                              traced=ctx.model.trace(model), finetune=finetune_request(ctx, ft_ledger, spill))
        finally:
            shutil.rmtree(spill, ignore_errors=True)
        seconds = time.perf_counter() - start
        if ctx.comm is not None:
            stats.merge_ordered(ctx.comm)
        input_stats = stats.result(ctx.cfg.preprocess.mean, ctx.cfg.preprocess.std)
        warnings = list(input_stats["warnings"])
        if ctx.cfg.quantizer.bitwidth != 8:
            warnings.append("quantizer.bitwidth is %d: the DPU targets run 8-bit (int8) models, so this calibration "
                            "is a simulation experiment; an xmodel exported from it carries %d-bit fix ops (as the "
                            "real quantizer writes them), which the DPU compiler is not meant to take"
                            % (ctx.cfg.quantizer.bitwidth, ctx.cfg.quantizer.bitwidth))
        for warning in warnings:
            log.warning("calib: %s", warning)
        fp_path = os.path.join(ctx.model.quant_dir, FILE_NAME)
        if ctx.is_main:
            fingerprint = ctx.model.fingerprint(model, example)
            write_fingerprint(ctx.model.quant_dir, fingerprint)
            written = dict(summary.sha256)
            written[fp_path] = calib_commit.sha256_bytes(json_bytes(fingerprint))  # the bytes write_json wrote
            calib_commit.commit(ctx.model.quant_dir, summary.files + [fp_path], written)
    log.info("calib: %d batches in %.1f s -> %s", summary.batches, seconds, ctx.model.quant_dir)
    record = summary.fast_finetune
    if record is not None:
        record["ledger"] = ft_ledger.summary()
        log.info("calib: fast finetune (%s) on %d batches in %.1f s%s", record["method"], record["batches"],
                 record["seconds"], _scores(record))
        worse = _worse_than_plain(record)
        if worse:
            log.warning("calib: %s", worse)
            warnings.append(worse)
    return CalibResult(batches=summary.batches, seconds=seconds, files=sorted(summary.files + [fp_path]),
                       input_stats=input_stats, warnings=warnings, ledger=ledger.summary(),
                       distributed=ranks(ctx, ledger), fast_finetune=record)


def finetune_request(ctx: "StepContext", ledger: Any, spill: str) -> Any:
    """The backend's FinetuneRequest for ``quantizer.fast_finetune`` (None when it is off): its
    batches come from the configured split through the same stages and boundary as calibration,
    recorded in ``ledger`` (their own); spill files go to folder ``spill`` (made when needed)."""
    from ..quantizers.base import FinetuneRequest
    ft = ctx.cfg.quantizer.fast_finetune
    if not ft.enabled:
        return None
    if ctx.comm is not None:
        from ..errors import QuantizationError
        raise QuantizationError("quantizer.fast_finetune runs in one process: run the calib step without torchrun "
                                "(the other steps may still use it)")

    def progress(index: int, count: int, trace: Any) -> None:
        log.info("calib: fast finetune layer %d/%d %s: %d passes, %d codes changed, net loss %s -> %s (%.1f s)",
                 index, count, trace.node, len(trace.evals), trace.weight_changed + trace.bias_changed,
                 ", ".join("%.6g" % v for v in trace.loss_in), ", ".join("%.6g" % v for v in trace.loss_out),
                 trace.seconds)

    batches = (x for x, _ in ctx.feed.batches(ft.data, ledger=ledger, limit=ft.batches, shard=False))
    return FinetuneRequest(batches, method=ft.method, passes=ft.passes, memory_mb=ft.memory_mb, spill_dir=spill,
                           progress=progress)


def _worse_than_plain(record: Dict[str, Any]) -> Optional[str]:
    """A warning when the finetuned calibration is further from float than plain calibration on the
    finetune data (the real algorithm rounds the re-calibration's bias correction away), else None."""
    scores = record.get("candidates") or {}
    mine, plain = scores.get(record.get("method")), scores.get("plain")
    if not mine or not plain or not mine["mse"] > plain["mse"]:
        return None
    return ("fast finetune (%s) left the outputs further from float than plain calibration on the finetune data "
            "(output MSE %.4g vs %.4g); the finetuned calibration is kept as configured. The real algorithm rounds the "
            "re-calibration's bias correction away; try method adaquant_plus, more finetune data (data: train), or "
            "turn fast_finetune off" % (record.get("method"), mine["mse"], plain["mse"]))


def _scores(record: Dict[str, Any]) -> str:
    scores = record.get("candidates") or {}
    if not scores:
        return ""
    return "; output MSE vs float on the finetune data: %s" % ", ".join("%s %.4g" % (k, v["mse"])
                                                                         for k, v in scores.items())


def ledger_lines(led: Dict[str, Any]) -> List[str]:
    """report.md's memory ledger section: copies per batch at the quantizer boundary, and per stage
    whether it shared storage with its input, over the calibration batches."""
    lines = ["## Memory ledger", "",
             "copies per batch at the quantizer boundary: **%s**" % led.get("copies_per_batch", "n/a"), ""]
    if led.get("stages"):
        lines += ["Per stage over the %s calibration batches (the counters are in report.json):" % led.get("batches"),
                  "", "| stage | batches | shares storage with its input | bytes allocated (total) |",
                  "|---|---|---|---|"]
        for c in led["stages"]:
            lines.append("| %s | %d | %s | %d |" % (c["stage"], c["batches"], "yes" if not c["copies"] else
                                                   "no" if not c["views"] else "some batches", c["bytes_allocated"]))
        lines.append("")
    return lines


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


def _fmt(x: Any) -> str:
    return "n/a" if x is None else "%.4f" % x


def preflight(ctx: "StepContext") -> None:
    """Before any work: a calib split with images (QuantizationError, public case P03), and at least 2
    finetune batches when quantizer.fast_finetune is on."""
    from ..errors import QuantizationError
    d, feed = ctx.cfg.data, ctx.feed
    if not feed.split_size("calib"):
        raise QuantizationError("calibration saw 0 batches: the calib split of the %d images is empty "
                                "(data.split %s); give it a share of the data" % (len(feed.source), d.split))
    ft = ctx.cfg.quantizer.fast_finetune
    n = feed.n_batches(ft.data, ft.batches) if ft.enabled else 2
    if n < 2:
        raise QuantizationError("quantizer.fast_finetune needs at least 2 batches of the %s split, which gives %d "
                                "(data.split %s, batch_size %d); give it more data or a smaller batch size"
                                % (ft.data, n, d.split, d.batch_size))


STEP = Step("calib", run, writes="quantize_result", after=("train",), reads=("calib",), one_unit=True,
            preflight=preflight, own_process=True, distributed=True, result=CalibResult)
