"""Two forms the simulation once refused to calibrate, as the real quantizer calibrates them
(tests/fidelity/test_calib_forms.py against tests/data/calib_forms_real/):

- an adaptive average pool whose output size does not divide its input size (torchvision's VGG-11
  at 64x64: ``AdaptiveAvgPool2d((7, 7))`` of a 2x2 map; 3x3 of 8x8 and 10x10 maps; 3x2 of 8x8),
  which nndct leaves unscaled and unquantized, beside pools that divide (1x1 and 2x2 of 10x10);
- a ``forward`` with default arguments the example does not give (a float scale, a bool flag that
  picks the path, a None mask), which the real quantizer's ``torch.jit.trace`` bakes in.

``python tests/support/corpus_calib_forms.py calib|test OUT_DIR [NAMES|all] [QUANT_CONFIG_FILE]`` runs
one phase of ``corpus_models.phase`` (the corpus's recipe and seeds) with the drop-in's
``torch_quantizer``.
"""
import os
import sys
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run by path
from tests.support import corpus_models  # noqa: E402


class PoolHead(nn.Module):
    """conv 3x3 (3 -> 8) + ReLU, an adaptive average pool to ``size`` (``functional``: through
    ``F.adaptive_avg_pool2d``), then ``after``: None (the pool is the output), ``"fc"`` (flatten
    and a Linear), ``"conv"`` (a 3x3 conv, 8 -> 4) or ``"relu"``."""

    def __init__(self, size, after=None, functional=False):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = None if functional else nn.AdaptiveAvgPool2d(size)
        self.size, self.after = size, after
        if after == "fc":
            self.fc = nn.Linear(8 * size[0] * size[1], 5)
        elif after == "conv":
            self.head = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.conv(x))
        x = F.adaptive_avg_pool2d(x, self.size) if self.pool is None else self.pool(x)
        if self.after == "fc":
            return self.fc(torch.flatten(x, 1))
        if self.after == "conv":
            return self.head(x)
        return F.relu(x) if self.after == "relu" else x


class DefaultScale(nn.Module):
    """``forward(x, scale=0.5)``: the default scales the conv's output (a number operand)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x, scale: float = 0.5):
        return self.head(F.relu(self.conv(x)) * scale)


class DefaultFlag(nn.Module):
    """``forward(x, flag=False, mask=None)``: the defaults pick the path (sigmoid with the flag, else
    ReLU; the mask multiplied in only when given)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x, flag: bool = False, mask: Optional[torch.Tensor] = None):
        y = self.conv(x)
        y = torch.sigmoid(y) if flag else F.relu(y)
        if mask is not None:
            y = y * mask
        return self.head(y)


def vgg11():
    from tests.support.corpus_torchvision import import_torchvision
    return import_torchvision().models.vgg11(num_classes=10)


# name -> (maker, input shapes without the batch dimension)
CORPUS = {
    "pool_3x3_of_8": (lambda: PoolHead((3, 3)), [(3, 8, 8)]),
    "pool_3x3_of_10_fc": (lambda: PoolHead((3, 3), "fc"), [(3, 10, 10)]),
    "pool_7x7_of_2_conv": (lambda: PoolHead((7, 7), "conv"), [(3, 2, 2)]),
    "pool_3x2_of_8_relu": (lambda: PoolHead((3, 2), "relu", functional=True), [(3, 8, 8)]),
    "pool_2x2_of_10": (lambda: PoolHead((2, 2), "conv"), [(3, 10, 10)]),
    "pool_1x1_of_10": (lambda: PoolHead((1, 1), "fc", functional=True), [(3, 10, 10)]),
    "default_scale": (DefaultScale, [(3, 8, 8)]),
    "default_flag": (DefaultFlag, [(3, 8, 8)]),
    "tv_vgg11": (vgg11, [(3, 64, 64)]),
}


def make_model(name):
    """The seeded model (``corpus_models.seeded_model``)."""
    return corpus_models.seeded_model(CORPUS[name][0])


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list): the example gives no default argument."""
    return corpus_models.seeded_inputs(CORPUS[name][1], n, seed)


if __name__ == "__main__":
    from tests.support import corpus_calib_forms
    corpus_models.main(corpus_calib_forms, sys.argv[1:])


class DigitsFlag(nn.Module):
    """A digits classifier (1 x 8 x 8) whose ``forward(x, flag=False)`` default picks the path, for a run
    of the pipeline (``model.factory``)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 16, num_classes)

    def forward(self, x, flag: bool = False):
        y = self.conv(x)
        y = torch.sigmoid(y) if flag else F.relu(y)
        return self.fc(torch.flatten(F.max_pool2d(y, 2), 1))


def digits_uneven_pool(num_classes=10):
    """A digits classifier (1 x 8 x 8) whose AdaptiveAvgPool2d((3, 3)) does not divide its 8x8 map, for
    a run of the pipeline (``model.factory``)."""
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d((3, 3)), nn.Flatten(),
                         nn.Linear(8 * 9, num_classes))
