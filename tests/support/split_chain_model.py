"""A small user model indexing with a chain of slices split by an Ellipsis after a None
(``y[:, None, 2:6, ..., 0:4]``), which the capture refuses before calibration; loaded by import path in tests."""
from torch import nn


class SplitChainCNN(nn.Module):
    """Scores ``[N, classes]`` of a 1-channel 8x8 input through ``y[:, None, 2:6, ..., 0:4]`` of a conv's
    ``[N, 8, 8, 8]`` output (``[N, 1, 4, 8, 4]``)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.c = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        return self.fc(self.c(x).relu()[:, None, 2:6, ..., 0:4].flatten(1))


def split_chain_cnn(num_classes: int = 10) -> nn.Module:
    return SplitChainCNN(num_classes).eval()
