"""The qat step's training loop and measurements (``pipeline.steps.qat`` runs them).

The loop is the Vitis AI QAT example's recipe on the backend's trainable model: Adam with two
parameter groups (the quantizers' log2 thresholds at ``threshold_lr`` without weight decay; the
weights, biases and BN parameters at ``lr`` with ``weight_decay``), the loss cross-entropy plus
``quantizer_norm * sqrt(sum of log_threshold^2)``, the BN statistics frozen after
``freeze_bn_after`` epochs. Its batches come from the data feed (``ctx.feed``): the train split
through the same stages and quantizer boundary as calibration, each epoch recorded in a ledger of
its own, so the report proves one copy per batch in every epoch.
"""
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")

MAX_CURVE_POINTS = 500  # the loss curve saved in steps/qat.json: at most this many points (means of equal runs of steps)


def curve(losses: List[float]) -> List[List[float]]:
    """``[[step, loss], ...]`` of the per-step ``losses`` (step 1 first): every step when there are at
    most MAX_CURVE_POINTS, else the mean of each run of consecutive steps (the step of its last)."""
    n = len(losses)
    if n <= MAX_CURVE_POINTS:
        return [[i + 1, v] for i, v in enumerate(losses)]
    out = []
    for b in range(MAX_CURVE_POINTS):
        lo, hi = b * n // MAX_CURVE_POINTS, (b + 1) * n // MAX_CURVE_POINTS
        out.append([hi, sum(losses[lo:hi]) / (hi - lo)])
    return out


def positions(trainable: Any) -> Dict[str, Dict[str, Any]]:
    """``{quant_info key: {"group", "fix_pos" (raw), "log_threshold"}}`` of every quantizer now."""
    param, output = trainable.fix_positions(adjusted=False)
    out = {}
    for group, key, q in trainable.quantizers():
        out[key] = {"group": group, "fix_pos": (param if group == "param" else output)[key],
                    "log_threshold": float(q.log_threshold.detach().reshape(-1)[0])}
    return out


def threshold_moves(start: Dict[str, Dict[str, Any]], end: Dict[str, Dict[str, Any]],
                    shipped: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One row per quantized tensor, in quant_info order: ``tensor`` (quant_info key), ``group`` (param or
    output), ``start`` and ``end`` (the raw fix position when training started and ended), ``shipped``
    (quant_info.json's: after the DPU constraint pass), ``log_threshold_start``/``_end`` (log2 of the
    threshold)."""
    rows = []
    for key, e in end.items():
        s = start.get(key, e)
        entry = (shipped.get(e["group"]) or {}).get(key)
        rows.append({"tensor": key, "group": e["group"], "start": s["fix_pos"], "end": e["fix_pos"],
                     "shipped": None if not entry else entry[0][1],
                     "log_threshold_start": round(s["log_threshold"], 6),
                     "log_threshold_end": round(e["log_threshold"], 6)})
    return rows


def train(ctx: "StepContext", trainable: Any) -> Dict[str, Any]:
    """Train ``trainable`` (the backend's QAT model, training mode) on the train split as
    quantizer.qat says (module docstring), in place.

    Returns ``{"losses": per-step loss, "epoch_losses": mean per epoch, "steps", "epochs" (run),
    "seconds", "start": positions() after the first forward (the warm-up's or the calibration's),
    "ledgers": each epoch's ledger summary, "bn_frozen_at": epoch or None}``.

    Raises:
        QuantizationError: the loss became NaN or infinite (training diverged; names the step and
            what to lower). DataError: what the feed raises.
    """
    import torch

    from ..errors import QuantizationError
    from ..progress import progress
    q = ctx.cfg.quantizer.qat
    bs = q.batch_size or ctx.cfg.data.batch_size
    thresholds = trainable.quantizer_parameters()
    optimizer = torch.optim.Adam([{"params": thresholds, "lr": q.threshold_lr, "weight_decay": 0.0},
                                  {"params": trainable.non_quantizer_parameters(), "lr": q.lr,
                                   "weight_decay": q.weight_decay}])
    criterion = torch.nn.CrossEntropyLoss()
    per_epoch = ctx.feed.n_batches("train", batch_size=bs)
    total = per_epoch * q.epochs if q.max_steps is None else min(per_epoch * q.epochs, q.max_steps)
    losses, epoch_losses, ledgers = [], [], []  # type: List[float], List[float], List[Dict[str, Any]]
    start_positions = None  # type: Optional[Dict[str, Dict[str, Any]]]
    bn_frozen_at = None  # type: Optional[int]
    bar = progress(None, "qat", total=q.epochs, unit="epoch")
    began = time.perf_counter()
    trainable.train()
    for epoch in range(q.epochs):
        left = total - len(losses)
        if left <= 0:
            break
        if q.freeze_bn_after is not None and epoch >= q.freeze_bn_after and bn_frozen_at is None:
            trainable.freeze_bn_stats()
            bn_frozen_at = epoch
        ledger = ctx.feed.new_ledger()
        seen, summed, t0 = 0, 0.0, time.perf_counter()
        for x, y in ctx.feed.batches("train", ledger=ledger, limit=min(per_epoch, left), batch_size=bs,
                                     desc="qat epoch %d/%d" % (epoch + 1, q.epochs)):
            out = trainable(x)
            loss = criterion(out, y)
            if start_positions is None:  # after the first forward: the warm-up has set every threshold
                start_positions = positions(trainable)
            if q.quantizer_norm and thresholds:
                norm = torch.stack([t.reshape(-1)[0] for t in thresholds]).pow(2).sum()
                loss = loss + q.quantizer_norm * norm.clamp_min(1e-12).sqrt()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise QuantizationError("qat: the loss became %s at step %d (epoch %d): training diverged; lower "
                                        "quantizer.qat.lr (now %g) or threshold_lr (now %g); nothing was written"
                                        % (value, len(losses) + 1, epoch + 1, q.lr, q.threshold_lr))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(value)
            seen, summed = seen + 1, summed + value
        ledgers.append(ledger.summary())
        epoch_losses.append(summed / max(seen, 1))
        bar.set_postfix(loss="%.4f" % epoch_losses[-1])
        bar.update(1)
        log.info("qat: epoch %d/%d: %d steps, mean loss %.4f (%.1f s)", epoch + 1, q.epochs, seen, epoch_losses[-1],
                 time.perf_counter() - t0)
    bar.close()
    return {"losses": losses, "epoch_losses": epoch_losses, "steps": len(losses), "epochs": len(epoch_losses),
            "seconds": time.perf_counter() - began, "start": start_positions or positions(trainable),
            "ledgers": ledgers, "bn_frozen_at": bn_frozen_at}


def evaluate(ctx: "StepContext", models: List[Tuple[str, Any]], pair: Tuple[str, str]) -> Dict[str, Any]:
    """Top-1 accuracy of each ``(name, model)`` on the eval split (data.eval_batches), in one pass over
    the batches (one boundary copy each, recorded in the returned ``ledger``), and how the outputs of
    the two models named in ``pair`` compare: ``identical`` (bit for bit on every batch),
    ``max_abs_diff`` and ``top1_differ`` (images whose top-1 class differs).

    Returns ``{"accuracy": {name: float}, "images", "ledger", "identical", "max_abs_diff", "top1_differ"}``.
    """
    import torch

    ledger = ctx.feed.new_ledger()
    correct = {name: 0 for name, _ in models}
    n, identical, max_diff, differ = 0, True, 0.0, 0
    limit = ctx.cfg.data.eval_batches
    with torch.no_grad():
        for x, y in ctx.feed.batches("eval", ledger=ledger, limit=limit, desc="qat: eval"):
            outs = {}
            for name, model in models:
                outs[name] = model(x)
                correct[name] += int((outs[name].argmax(dim=1) == y).sum())
            a, b = outs[pair[0]], outs[pair[1]]
            if not torch.equal(a, b):
                identical = False
                max_diff = max(max_diff, float((a - b).abs().max()))
            differ += int((a.argmax(dim=1) != b.argmax(dim=1)).sum())
            n += len(y)
    return {"accuracy": {name: c / max(n, 1) for name, c in correct.items()}, "images": n,
            "ledger": ledger.summary(), "identical": identical, "max_abs_diff": max_diff, "top1_differ": differ}
