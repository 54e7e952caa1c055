"""calib: calibrate on the calib split; write quantize_result/quant_info.json and the fingerprint."""
import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .base import Step, StepResult, omitted_when_none

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


def ranks(ctx: Any, ledger: Any) -> Optional[Dict[str, Any]]:
    """Under torch.distributed: ``{"world_size", "ledger_by_rank"}`` (each rank's boundary ledger
    summary; ``ledger`` is rank 0's), else None. A collective."""
    if ctx.comm is None:
        return None
    return {"world_size": ctx.comm.world, "ledger_by_rank": ctx.comm.gather(ledger.summary())}


def run(ctx: Any) -> CalibResult:
    from ..checks import InputStats
    from ..quantizers import calib_commit
    from ..fileio import json_bytes
    from ..quantizers.fingerprint import FILE_NAME, write_fingerprint
    limit = ctx.cfg.data.calib_batches  # >= 1 or None (config); the calib split is not empty (preflight)
    model, example, ledger = ctx.float_model(), ctx.feed.example(), ctx.feed.new_ledger()
    ft_ledger = ctx.feed.new_ledger()  # the finetune's own pass over its split: one copy per batch there too
    stats = InputStats() if ctx.comm is None else InputStats().defer()
    batches = (stats.add(x) for x, _ in ctx.feed.batches("calib", ledger=ledger, limit=limit))
    # rank 0 writes and commits under the folder's exclusive lock (a drop-in export aimed at the same folder
    # waits), and the manifest records the sha256 of the bytes written here (calib_commit); files the backend
    # did not hash as it wrote them (not in CalibrationSummary.sha256) are hashed from the folder, under the lock
    with contextlib.ExitStack() as held:
        if ctx.is_main:
            held.enter_context(calib_commit.exclusive(ctx.quant_dir))
            calib_commit.begin(ctx.quant_dir)  # from here the folder holds no committed calibration until commit
        start = time.perf_counter()
        spill = os.path.join(ctx.work_dir, SPILL_DIR)
        shutil.rmtree(spill, ignore_errors=True)  # a killed finetune's files
        try:
            summary = ctx.backend().calibrate(model, example, batches, ctx.quant_dir, ctx.settings(),
                                              traced=ctx.trace(model), finetune=finetune_request(ctx, ft_ledger, spill))
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
        fp_path = os.path.join(ctx.quant_dir, FILE_NAME)
        if ctx.is_main:
            fingerprint = ctx.fingerprint(model, example)
            write_fingerprint(ctx.quant_dir, fingerprint)
            written = dict(summary.sha256)
            written[fp_path] = calib_commit.sha256_bytes(json_bytes(fingerprint))  # the bytes write_json wrote
            calib_commit.commit(ctx.quant_dir, summary.files + [fp_path], written)
    log.info("calib: %d batches in %.1f s -> %s", summary.batches, seconds, ctx.quant_dir)
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


def finetune_request(ctx: Any, ledger: Any, spill: str) -> Any:
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


STEP = Step("calib", run, writes="quantize_result", after=("train",), own_process=True, distributed=True,
            result=CalibResult)
