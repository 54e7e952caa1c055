"""calib: calibrate on the calib split; write quantize_result/quant_info.json and the fingerprint."""
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .base import Step, StepResult, omitted_when_none

log = logging.getLogger("pipeline")


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


def ranks(ctx: Any, ledger: Any) -> Optional[Dict[str, Any]]:
    """Under torch.distributed: ``{"world_size", "ledger_by_rank"}`` (each rank's boundary ledger
    summary; ``ledger`` is rank 0's), else None. A collective."""
    if ctx.comm is None:
        return None
    return {"world_size": ctx.comm.world, "ledger_by_rank": ctx.comm.gather(ledger.summary())}


def run(ctx: Any) -> CalibResult:
    from ..checks import InputStats
    from ..quantizers import calib_commit
    from ..quantizers.fingerprint import FILE_NAME, write_fingerprint
    limit = ctx.cfg.data.calib_batches  # >= 1 or None (config); the calib split is not empty (preflight)
    model, example, ledger = ctx.float_model(), ctx.example(), ctx.new_ledger()
    stats = InputStats() if ctx.comm is None else InputStats().defer()
    batches = (stats.add(x) for x, _ in ctx.batches("calib", ledger=ledger, limit=limit))
    if ctx.is_main:
        calib_commit.begin(ctx.quant_dir)  # from here the folder holds no committed calibration until commit
    start = time.perf_counter()
    summary = ctx.backend().calibrate(model, example, batches, ctx.quant_dir, ctx.settings(), traced=ctx.trace(model))
    seconds = time.perf_counter() - start
    if ctx.comm is not None:
        stats.merge_ordered(ctx.comm)
    input_stats = stats.result(ctx.cfg.preprocess.mean, ctx.cfg.preprocess.std)
    warnings = list(input_stats["warnings"])
    if ctx.cfg.quantizer.bitwidth != 8:
        warnings.append("quantizer.bitwidth is %d: the DPU targets run 8-bit (int8) models, so this calibration is a "
                        "simulation experiment; an xmodel exported from it carries %d-bit fix ops (as the real "
                        "quantizer writes them), which the DPU compiler is not meant to take"
                        % (ctx.cfg.quantizer.bitwidth, ctx.cfg.quantizer.bitwidth))
    for warning in warnings:
        log.warning("calib: %s", warning)
    fingerprint = ctx.fingerprint(model, example)
    fp_path = write_fingerprint(ctx.quant_dir, fingerprint) if ctx.is_main else os.path.join(ctx.quant_dir, FILE_NAME)
    if ctx.is_main:
        calib_commit.commit(ctx.quant_dir, summary["files"] + [fp_path])
    log.info("calib: %d batches in %.1f s -> %s", summary["batches"], seconds, ctx.quant_dir)
    return CalibResult(batches=summary["batches"], seconds=seconds, files=sorted(summary["files"] + [fp_path]),
                       input_stats=input_stats, warnings=warnings, ledger=ledger.summary(),
                       distributed=ranks(ctx, ledger))


STEP = Step("calib", run, writes="quantize_result", after=("train",), own_process=True, distributed=True,
            result=CalibResult)
