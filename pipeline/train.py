"""The ``train`` step: fit a zoo model on the train split, seeded and deterministic on the CPU.

The inputs are the same boundary buffers the quantizer sees (float32 NCHW, normalized), so the
float model is trained on exactly the preprocessing that will be deployed.
"""
import time
from typing import Callable, Dict, Iterable, Tuple

import torch
from torch import nn


def train_model(model: nn.Module, make_batches: Callable[[], Iterable[Tuple[torch.Tensor, torch.Tensor]]],
                epochs: int, lr: float, weight_decay: float, seed: int,
                progress: Callable[[int, float], None] = lambda epoch, loss: None) -> Dict[str, float]:
    """Train ``model`` in place with Adam and cross-entropy, then put it in eval mode.

    Args:
        model: an ``nn.Module`` producing logits ``(N, classes)``.
        make_batches: called once per epoch; yields ``(x, y)`` with x float32 NCHW and y int64 ``(N,)``.
            It should shuffle with its own seeded generator for reproducibility.
        epochs, lr, weight_decay: optimizer settings.
        seed: seeds torch before training (weights init is the caller's business).
        progress: called after each epoch with (epoch index, mean loss).

    Returns:
        ``{"epochs", "final_loss", "seconds"}``.
    """
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    mean_loss = float("nan")
    model.train()
    for epoch in range(epochs):
        total, count = 0.0, 0
        for x, y in make_batches():
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(y)
            count += len(y)
        sched.step()
        mean_loss = total / max(count, 1)
        progress(epoch, mean_loss)
    model.eval()
    return {"epochs": epochs, "final_loss": mean_loss, "seconds": time.perf_counter() - start}


@torch.no_grad()
def accuracy(forward: Callable[[torch.Tensor], torch.Tensor],
             batches: Iterable[Tuple[torch.Tensor, torch.Tensor]]) -> Tuple[float, int]:
    """Top-1 accuracy (fraction 0..1) of ``forward`` over ``(x, y)`` batches, and the sample count."""
    correct, total = 0, 0
    for x, y in batches:
        correct += int((forward(x).argmax(dim=1) == y).sum())
        total += len(y)
    return (correct / total if total else float("nan")), total
