"""Small segmentation heads for the simulation's fidelity with the real quantizer (issue 23,
tests/fidelity/test_segmentation_fidelity.py): sizes read from ``x.shape`` (sliced, unpacked, read before
the layers that use them), bilinear resizing by power-of-two scales (exact in float32) and to an
uneven size (not), ``align_corners`` both ways, ``nn.Upsample`` and ``F.interpolate``, an LR-ASPP
style gate (adaptive average pool, sigmoid, product). Random weights, randomised BatchNorm.

``python tests/support/corpus_segmentation.py calib|test OUT_DIR [NAMES] [QUANT_CONFIG_FILE]`` runs one
phase for every model, exactly as ``tests/support/corpus_models.py`` does (same recipe, same seeds).
"""
import os
import sys

import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run by path
from tests.support import corpus_models  # noqa: E402


class Head(nn.Module):
    """LR-ASPP's head on two strided convs: the gated high branch resized 2x to the low one's
    ``shape[-2:]``, both classified and added, resized 4x to the input's size."""

    def __init__(self):
        super().__init__()
        self.low = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.high = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.Hardswish())
        self.cbr = nn.Sequential(nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 16, 1, bias=False), nn.Sigmoid())
        self.low_classifier = nn.Conv2d(16, 4, 1)
        self.high_classifier = nn.Conv2d(16, 4, 1)

    def forward(self, x):
        low = self.mid(self.low(x))
        high = self.high(low)
        y = self.cbr(high) * self.scale(high)
        y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
        y = self.low_classifier(low) + self.high_classifier(y)
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


class Uneven(nn.Module):
    """The input's size read first and unpacked; a bilinear resize to it from an uneven size (the
    weights are no short binary fractions), and an nn.Upsample with align_corners=True whose
    scale (in - 1) / (out - 1) is 1/2."""

    def __init__(self, corners):
        super().__init__()
        self.corners = corners
        self.down = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())
        self.up = nn.Upsample(size=(17, 23), mode="bilinear", align_corners=True)
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        h, w = x.shape[-2:]
        y = self.down(x)
        y = self.up(y) if self.corners else F.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
        return self.out(y)


# name -> (maker, input shapes without the batch dimension)
CORPUS = {
    "seg_head": (Head, [(3, 32, 40)]),
    "seg_uneven": (lambda: Uneven(False), [(3, 17, 23)]),
    "seg_corners": (lambda: Uneven(True), [(3, 17, 23)]),
}


def make_model(name):
    """The seeded model in eval mode, BatchNorm statistics randomised as in corpus_models."""
    return corpus_models.seeded_model(CORPUS[name][0])


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    return corpus_models.seeded_inputs(CORPUS[name][1], n, seed)


if __name__ == "__main__":
    from tests.support import corpus_segmentation
    corpus_models.main(corpus_segmentation, sys.argv[1:])
