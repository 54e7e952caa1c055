"""Activations and other small torch.nn modules as the real quantizer's trace sees them, one small seeded
model each: a conv, the call, a conv (``ModuleNet``); a few functional forms and a classifier head.

torch.jit records the aten op(s) a module's forward runs, not the module: ``nn.LogSigmoid`` is
``aten::log_sigmoid``, ``nn.Softsign`` is abs, add and div, ``nn.UpsamplingNearest2d`` a resize; some
have nndct types of their own (``nn.Mish``: ``nndct_mish``, ``nn.Hardtanh``: ``nndct_hardtanh``,
``nn.LogSoftmax``: ``nndct_log_softmax``, ``-x``: ``nndct_neg``). The references are in
tests/data/activations_real/ (tests/data/README.md); tests/fidelity/test_activations_real.py compares the
simulation with them. The same conventions as tests/support/corpus_models.py (``CORPUS``,
``make_model``, ``make_inputs``, ``main``), so that ``corpus_models.phase`` drives either quantizer.

``python tests/support/corpus_activations.py calib|test OUT_DIR [NAMES] [QUANT_CONFIG_FILE]`` runs a phase.
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.support import corpus_models  # noqa: E402
from tests.support.corpus_models import seeded_inputs, seeded_model  # noqa: E402

# name -> the module between the two convs, and the channels it leaves (8 unless it changes them)
MODULES = {
    "elu": (lambda: nn.ELU(), 8), "celu": (lambda: nn.CELU(), 8), "selu": (lambda: nn.SELU(), 8),
    "mish": (lambda: nn.Mish(), 8), "softplus": (lambda: nn.Softplus(), 8),
    "logsigmoid": (lambda: nn.LogSigmoid(), 8), "logsoftmax": (lambda: nn.LogSoftmax(1), 8),
    "softsign": (lambda: nn.Softsign(), 8), "softmin": (lambda: nn.Softmin(1), 8),
    "tanhshrink": (lambda: nn.Tanhshrink(), 8), "hardshrink": (lambda: nn.Hardshrink(), 8),
    "softshrink": (lambda: nn.Softshrink(), 8), "threshold": (lambda: nn.Threshold(0.1, 0.0), 8),
    "hardtanh": (lambda: nn.Hardtanh(), 8), "alphadrop": (lambda: nn.AlphaDropout(0.2), 8),
    "softmax2d": (lambda: nn.Softmax2d(), 8), "glu": (lambda: nn.GLU(1), 4), "rrelu": (lambda: nn.RReLU(), 8),
    "channelshuffle": (lambda: nn.ChannelShuffle(2), 8), "pixelunshuffle": (lambda: nn.PixelUnshuffle(2), 32),
    "lrn": (lambda: nn.LocalResponseNorm(2), 8), "upnearest": (lambda: nn.UpsamplingNearest2d(scale_factor=2), 8),
    "upbilinear": (lambda: nn.UpsamplingBilinear2d(scale_factor=2), 8), "zeropad": (lambda: nn.ZeroPad2d(1), 8),
}

# name -> a functional call between the two convs
FUNCTIONS = {
    "f_hardtanh": lambda y: F.hardtanh(y, -2.0, 2.0),
    "f_hardtanh_relu6": lambda y: F.hardtanh(y, 0.0, 6.0),  # nndct's ReLU6
    "f_mish": F.mish,
    "m_log_softmax": lambda y: y.log_softmax(1),
    "neg": lambda y: -y,
    "f_pixel_unshuffle": lambda y: F.pixel_unshuffle(y, 2),
}
# the channels a call of FUNCTIONS leaves, where it changes them (8 otherwise)
FUNCTION_CHANNELS = {"f_pixel_unshuffle": 32}


class ModuleNet(nn.Module):
    """conv 3->8 (3x3), the module, conv ->4 (3x3)."""
    def __init__(self, name):
        super().__init__()
        make, channels = MODULES[name]
        self.c1 = nn.Conv2d(3, 8, 3)
        self.a = make()
        self.c2 = nn.Conv2d(channels, 4, 3)

    def forward(self, x):
        return self.c2(self.a(self.c1(x)))


class FunctionNet(nn.Module):
    """conv 3->8 (3x3), the call, conv ->4 (3x3)."""
    def __init__(self, name):
        super().__init__()
        self.call = FUNCTIONS[name]
        self.c1 = nn.Conv2d(3, 8, 3)
        self.c2 = nn.Conv2d(FUNCTION_CHANNELS.get(name, 8), 4, 3)

    def forward(self, x):
        return self.c2(self.call(self.c1(x)))


class LogSoftmaxHead(nn.Module):
    """A classifier: conv, ReLU, flatten, linear to 10 classes, nn.LogSoftmax(dim=1) on (N, 10)."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, stride=2)
        self.fc = nn.Linear(4 * 6 * 6, 10)
        self.out = nn.LogSoftmax(dim=1)

    def forward(self, x):
        return self.out(self.fc(torch.flatten(torch.relu(self.c1(x)), 1)))


def _made(cls, name):
    return lambda: cls(name)


IMAGE = [(3, 14, 14)]
# name -> (maker, input shapes without the batch dimension)
CORPUS = dict([(n, (_made(ModuleNet, n), IMAGE)) for n in MODULES] + [(n, (_made(FunctionNet, n), IMAGE))
                                                                         for n in FUNCTIONS])
CORPUS["logsoftmax_head"] = (LogSoftmaxHead, IMAGE)


def make_model(name):
    """The seeded model (corpus_models.seeded_model)."""
    return seeded_model(CORPUS[name][0])


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    return seeded_inputs(CORPUS[name][1], n, seed)


def seeded_sha256(name):
    """corpus_models.seeded_sha256 of this corpus's model ``name``."""
    return corpus_models.seeded_sha256(name, sys.modules[__name__])


if __name__ == "__main__":
    from tests.support import corpus_activations
    corpus_models.main(corpus_activations, sys.argv[1:])
