"""DPU fixed-point arithmetic: rounding table (docs/arithmetic.md#rounding), fake quantization, fix_pos search (2.3)."""
import math

import numpy as np
import pytest
import torch

from pipeline import fixpoint
from pipeline.quantizers import fix_pos_search
from pipeline.ops.pool import avgpool_dpu_scale

TIES = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]


def test_rounding_table_of_the_fix_neuron_kernel():
    v = torch.tensor(TIES)
    # rows "half_up" (method 2) and "std_round" (method 3) of the table in docs/arithmetic.md#rounding
    assert fixpoint.round_half_up(v).tolist() == [-2, -1, 0, 1, 2, 3]
    assert fixpoint.round_std(v).tolist() == [-3, -2, -1, 1, 2, 3]
    # torch.round is half-even and must not be what the DPU does
    assert torch.round(v).tolist() == [-2, -2, 0, 0, 2, 2]


def _ref_half_up(v: float) -> float:
    f = math.floor(v)
    return f + (1.0 if v - f >= 0.5 else 0.0)  # exact in float64 for float32 inputs


def _ref_std(v: float) -> float:
    return math.copysign(math.floor(abs(v) + 0.5), v) + 0.0


def _probe_values(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(-300, 300, (4000,), generator=g).float()
    ties = k + 0.5
    near = torch.cat([torch.nextafter(ties, ties + 1), torch.nextafter(ties, ties - 1)])
    rand = (torch.rand(4000, generator=g) - 0.5) * 600
    edge = torch.tensor([0.49999997, -0.49999997, 0.5, -0.5, 0.0, -0.0, 1e-30, -1e-30,
                         8388607.5, -8388607.5, 8388609.0, 1.5e7])
    return torch.cat([ties, near, rand, k, edge]).float()


def test_rounding_matches_independent_reference_on_ties_and_neighbours():
    v = _probe_values()
    up = fixpoint.round_half_up(v).tolist()
    std = fixpoint.round_std(v).tolist()
    for x, a, b in zip(v.tolist(), up, std):
        assert a == _ref_half_up(x), x
        assert b == _ref_std(x), x


def test_rounding_properties():
    v = _probe_values(1)
    up = fixpoint.round_half_up(v)
    d = up.double() - v.double()
    assert torch.all((d > -0.5) & (d <= 0.5))  # nearest, ties go up
    assert torch.equal(fixpoint.round_std(-v), -fixpoint.round_std(v) + 0.0)  # symmetric
    shift = torch.randint(-50, 50, v.shape).float()
    exact = (v + shift).double() == v.double() + shift.double()  # keep shifts that are exact
    a, s = v[exact], shift[exact]
    assert a.numel() > 10000
    assert torch.equal(fixpoint.round_half_up(a + s), fixpoint.round_half_up(a) + s)
    # results are +0.0, never -0.0 (the kernel converts an int back to float)
    zeros = fixpoint.round_std(torch.tensor([-0.3, -0.0]))
    assert all(math.copysign(1.0, z) > 0 for z in zeros.tolist())


def test_floor_plus_half_trap_is_avoided():
    x = torch.tensor([0.49999997], dtype=torch.float32)
    assert torch.floor(x + 0.5).item() == 1.0  # the shortcut is wrong here ...
    assert fixpoint.round_half_up(x).item() == 0.0  # ... the DPU rounds to 0


def test_fake_quant_grid_range_and_no_write():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 5, 5, generator=g) * 3
    before = x.clone()
    version = x._version
    y = fixpoint.fake_quant(x, 5, 8, "half_up")
    assert torch.equal(x, before) and x._version == version
    codes = y * 32
    assert torch.equal(codes, torch.round(codes))
    assert codes.min() >= -128 and codes.max() <= 127
    assert torch.equal(fixpoint.fake_quant(y, 5, 8, "half_up"), y)  # idempotent
    assert y.dtype == torch.float32 and y.shape == x.shape


def test_fake_quant_saturates_like_the_golden_mlp_input():
    # docs/quantizer.md#observed-numbers: with input fix_pos 6 an input of exactly 2.0 becomes 127/64
    y = fixpoint.fake_quant(torch.tensor([2.0, -2.0, -2.1, 1.0]), 6, 8, "half_up")
    assert y.tolist() == [127 / 64, -2.0, -2.0, 1.0]


def test_fake_quant_negative_fix_pos_and_bitwidth():
    y = fixpoint.fake_quant(torch.tensor([100.0, 3.0, -1000.0]), -2, 8, "std_round")
    assert y.tolist() == [100.0, 4.0, -512.0]
    y4 = fixpoint.fake_quant(torch.tensor([0.9, -0.9]), 3, 4, "half_up")
    assert y4.tolist() == [7 / 8, -7 / 8]


def test_scope_1_search_gives_the_largest_fix_pos_that_cannot_overflow():
    assert fix_pos_search.diffs_fix_pos(torch.tensor([1.0, -0.5]), 8, 1, "half_up") == 6  # 127.5/1 -> 2^6
    assert fix_pos_search.diffs_fix_pos(torch.tensor([0.0, -1.0]), 8, 1, "half_up") == 7  # 128.5/1 -> 2^7
    assert fix_pos_search.diffs_fix_pos(torch.zeros(10), 8, 1, "half_up") == fix_pos_search.ZERO_TENSOR_FIX_POS == 18
    g = torch.Generator().manual_seed(3)
    for _ in range(50):
        x = torch.randn(100, generator=g) * float(torch.rand(1, generator=g) * 100)
        p = fix_pos_search.diffs_fix_pos(x, 8, 1, "half_up")
        step = max(x.min().item() / -128.5, x.max().item() / 127.5)
        assert step * 2 ** p <= 1.0 + 1e-6 and step * 2 ** (p + 1) > 1.0 - 1e-6


def test_diffs_search_picks_smallest_squared_error():
    g = torch.Generator().manual_seed(4)
    for trial in range(30):
        x = torch.randn(500, generator=g) * 0.3
        x[0] = 6.0 * (1 + trial % 3)  # an outlier: clipping it can pay off
        p0 = fix_pos_search.diffs_fix_pos(x, 8, 1, "half_up")
        errs = []
        for p in range(p0, p0 + 5):
            q = np.clip(np.floor(x.double().numpy() * 2.0 ** p + 0.5), -128, 127) / 2.0 ** p
            errs.append(float(((x.double().numpy() - q) ** 2).sum()))
        best = p0 + int(np.argmin(errs))
        if sorted(errs)[1] - min(errs) > 1e-6 * min(errs):  # skip float near-ties
            assert fix_pos_search.diffs_fix_pos(x, 8, 5, "half_up") == best
    assert fix_pos_search.diffs_fix_pos(x, 8, 1, "half_up") == p0


def test_modal_fix_pos_and_cap():
    # docs/quantizer.md#observed-numbers: the golden mlp input saw 6,6,6,6,5,5,5,6 and got 6
    assert fix_pos_search.modal_fix_pos([6, 6, 6, 6, 5, 5, 5, 6]) == 6
    assert fix_pos_search.modal_fix_pos([7, 5, 7, 5]) == 5  # ties -> smallest, like scipy.stats.mode
    with pytest.raises(ValueError):
        fix_pos_search.modal_fix_pos([])
    assert fixpoint.cap_fix_pos(14, 8) == 12 and fixpoint.cap_fix_pos(11, 8) == 11
    assert fixpoint.cap_fix_pos(16, 16) == 15 and fixpoint.cap_fix_pos(-3, 8) == -3


@pytest.mark.parametrize("kernel,scale", [((3, 3), 9 * 7 / 64), ((5, 5), 0.9765625), ((6, 6), 36 * 7 / 256),
                                          ((7, 7), 49 * 21 / 1024), ((14, 14), 196 * 21 / 4096),
                                          ((8, 8), 1.0), ((10, 10), 1.0009765625), ((2, 2), 1.0)])
def test_avgpool_dpu_scale(kernel, scale):
    # table of docs/arithmetic.md#average-pool-correction; 10x10 and 8x8 observed in
    # docs/quantizer.md#observed-numbers and golden/README.md
    assert avgpool_dpu_scale(*kernel) == scale


def test_unknown_rounding_method():
    with pytest.raises(ValueError, match="half_up"):
        fixpoint.fake_quant(torch.zeros(2), 3, 8, "nearest")


def test_fake_quant_equals_reference_on_sampled_float32_bit_patterns():
    # every 4099th bit pattern (about 1M finite floats of all magnitudes) through the
    # one-buffer half_up of fake_quant, against quantize() built on round_half_up
    bits = torch.arange(-(1 << 31), 1 << 31, 4099, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = x[torch.isfinite(x)]
    for method in fixpoint.ROUNDING_METHODS:
        for fix_pos, bitwidth in [(0, 23), (0, 8), (7, 8), (-3, 16)]:
            expect = fixpoint.quantize(x, fix_pos, bitwidth, method) * 2.0 ** -fix_pos
            got = fixpoint.fake_quant(x, fix_pos, bitwidth, method)
            assert torch.equal(got, expect), (method, fix_pos, bitwidth)
            assert not torch.any(torch.signbit(got) & (got == 0))  # +0.0, like the kernel
    tie = torch.tensor([0.5 - 2 ** -25, 0.5, -0.5, 2.5, -2.5, 126.5, 127.5, -128.5, 8388609.0])
    assert fixpoint.fake_quant(tie, 0, 23, "half_up").tolist() == [0, 1, 0, 3, -2, 127, 128, -128, 4194303]
    assert fixpoint.fake_quant(tie, 0, 23, "std_round").tolist() == [0, 1, -1, 3, -3, 127, 128, -129, 4194303]


def _nndct_overflow_free(x):
    # fix_ops.py diffs_fix_pos, first part, with torch ops as nndct writes it
    step = torch.max(torch.min(x) / -128.5, torch.max(x) / 127.5)
    return int(torch.floor(torch.log2(1.0 / step)).item())


def test_overflow_free_matches_nndct_torch_formula_at_power_of_two_edges():
    vals = []
    for k in range(-20, 21):
        for base in (127.5, 128.5):
            edge = torch.tensor(base * 2.0 ** k, dtype=torch.float32)
            vals += [edge, torch.nextafter(edge, edge + 1), torch.nextafter(edge, edge - 1)]
    g = torch.Generator().manual_seed(5)
    vals += list(torch.rand(300, generator=g) * 1000)
    for v in vals:
        for x in (torch.stack([v, -v / 3]), torch.stack([-v, v / 3])):
            assert fix_pos_search.diffs_fix_pos(x, 8, 1, "half_up") == _nndct_overflow_free(x)
