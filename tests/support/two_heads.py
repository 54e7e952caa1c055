"""A small user model with two outputs (a score vector and a feature map), loaded by import path in tests."""
import torch
from torch import nn


class TwoHeads(nn.Module):
    """``(scores [N, classes], features [N, 8, 8, 8])`` of a 1-channel 8x8 input."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))

    def forward(self, x: torch.Tensor):
        y = self.body(x)
        return self.head(y), y


def two_heads(num_classes: int = 10) -> nn.Module:
    return TwoHeads(num_classes).eval()
