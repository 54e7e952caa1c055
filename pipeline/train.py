"""The ``train`` step: fit a zoo model on the train split, seeded and deterministic on the CPU.

The inputs are the same boundary buffers the quantizer sees (float32 NCHW, normalized), so the
float model is trained on exactly the preprocessing that will be deployed.

Adam and the cosine schedule are written out here (``Adam``, ``cosine_lr``) with the arithmetic of
``torch.optim.Adam`` (torch 2.x, single-tensor CPU path) and ``torch.optim.lr_scheduler.CosineAnnealingLR``:
the same values, without the second of import time ``torch.optim``'s first call costs (it imports
``torch._dynamo``). A test compares them step by step with torch's.
"""
import math
import time
from typing import Callable, Dict, Iterable, List, Tuple

import torch
from torch import nn


class Adam:
    """Adam (Kingma & Ba) as ``torch.optim.Adam(params, lr, betas=(0.9, 0.999), eps=1e-8,
    weight_decay)`` computes it on the CPU (``_single_tensor_adam`` in ``torch/optim/adam.py``,
    torch 2.x): the same torch operations in the same order, so the same float32 values.
    ``lr`` may be changed between steps (the cosine schedule)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, weight_decay: float = 0.0,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps
        self.steps = 0
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        step = float(self.steps)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
        step_size = self.lr / bias_correction1
        for p, exp_avg, exp_avg_sq in zip(self.params, self.exp_avg, self.exp_avg_sq):
            if p.grad is None:
                continue
            grad = p.grad if self.weight_decay == 0 else p.grad.add(p, alpha=self.weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)


def cosine_lr(base_lr: float, epochs: int) -> List[float]:
    """The learning rate of each epoch under ``CosineAnnealingLR(T_max=epochs, eta_min=0)`` stepped
    once per epoch, computed with its recursive formula (``get_lr`` in ``lr_scheduler.py``)."""
    lrs, lr = [], base_lr
    for epoch in range(epochs):
        if epoch > 0:
            lr = (1 + math.cos(math.pi * epoch / epochs)) / (1 + math.cos(math.pi * (epoch - 1) / epochs)) * (lr - 0.0) \
                + 0.0
        lrs.append(lr)
    return lrs


def train_model(model: nn.Module, make_batches: Callable[[], Iterable[Tuple[torch.Tensor, torch.Tensor]]],
                epochs: int, lr: float, weight_decay: float, seed: int,
                progress: Callable[[int, float], None] = lambda epoch, loss: None) -> Dict[str, float]:
    """Train ``model`` in place with Adam, a cosine learning-rate schedule over the epochs and
    cross-entropy, then put it in eval mode.

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
    opt = Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    mean_loss = float("nan")
    model.train()
    for epoch, epoch_lr in enumerate(cosine_lr(lr, epochs)):
        opt.lr = epoch_lr
        total, count = 0.0, 0
        for x, y in make_batches():
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(y)
            count += len(y)
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
