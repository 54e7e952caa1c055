"""CLE's per-input-channel weight ranges (``cle._input_ranges``): the two-step maximum equals the
maximum over all of c1's output channels and kernel taps at once, for plain, grouped, depthwise
and transposed convolutions, NaN included."""
import numpy as np
import pytest
from torch import nn

from pipeline import ops as g
from pipeline.quantizers.sim import cle


class _Node:
    def __init__(self, op):
        self.op = op


def _reference(op, m, w):
    # the formula this replaced: one reduction over the three axes at once
    if op == g.CONVTRANSPOSE2D:
        return np.abs(w).max(axis=(1, 2, 3))
    v = np.abs(w.reshape(m.groups, w.shape[0] // m.groups, *w.shape[1:]))
    return v.max(axis=(1, 3, 4)).reshape(-1)


@pytest.mark.parametrize("op, module", [
    (g.CONV2D, nn.Conv2d(12, 8, 3)),
    (g.CONV2D, nn.Conv2d(12, 8, (1, 5), groups=4)),
    (g.DEPTHWISE_CONV2D, nn.Conv2d(6, 12, 3, groups=6)),
    (g.CONVTRANSPOSE2D, nn.ConvTranspose2d(6, 5, 2)),
])
def test_input_ranges_equal_the_one_step_maximum(op, module):
    rng = np.random.RandomState(0)
    w = rng.randn(*module.weight.shape).astype(np.float32)
    w.reshape(-1)[7] = np.nan
    w.reshape(-1)[3] = -0.0
    got = cle._input_ranges(_Node(op), module, w)
    expected = _reference(op, module, w)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()
    assert np.isnan(got).sum() == 1
