"""The fix_pos search of the DPU quantizer (plain torch); ``fixpoint`` has the number format and rounding.

The fix_pos search is the "diffs" search of ``pytorch_nndct/nn/modules/fix_ops.py``
(``diffs_fix_pos``, docs/arithmetic.md#fix-position-search): the largest ``p`` that cannot overflow, then
(scope > 1) the ``p`` in ``p0 .. p0+scope-1`` with the smallest sum of squared errors, ties keeping the
smaller ``p``. The same torch float32 operations are used for ``p0`` (``log2`` of the reciprocal step) and
for the error sums, so the result is bit-compatible with the real quantizer on the same torch build.
"""
import math
import sys
from collections import Counter
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch

from ..fixpoint import ROUNDING_METHODS, pow2

# Scope of the diffs search (docs/arithmetic.md#fix-position-search): 5 candidates ("mse" diffs mode, the
# default) for weights, bias and activations; 1 for the network input (INPUT / QuantStub nodes).
SCOPE_DEFAULT = 5
SCOPE_INPUT = 1

# torch reduces a tensor of at most this many elements serially (ATen GRAIN_SIZE); above it a
# full sum is split over threads, so its last bits depend on the thread count (as nndct's do).
SERIAL_REDUCTION_NUMEL = 32768
# The diffs search scores all candidates in one batched pass up to this many elements (fewer
# calls); larger tensors are scored one candidate at a time, skipping provably losing ones.
# At most SERIAL_REDUCTION_NUMEL, so that the batched row sums equal torch.sum's.
BATCHED_SEARCH_NUMEL = 8192

# The value nndct uses as fix position of an all-zero tensor (fix_ops.py, ``diffs_fix_pos``).
ZERO_TENSOR_FIX_POS = 18

# _overflow_free takes floor(log2) in float64 unless the value is this close to an integer
_LOG2_MARGIN = 1e-4

# (p0, scope, dtype) -> the (scope, 1) tensor of candidate scales 2**p of the batched search
_CANDIDATE_SCALES = {}  # type: Dict[Tuple[int, int, torch.dtype], torch.Tensor]


def _overflow_free(x_min: float, x_max: float, bitwidth: int) -> int:
    # nndct: step = torch.max(x_min / fix_lb, x_max / fix_ub); floor(torch.log2(1.0 / step)).
    # The divisions and the maximum are IEEE float32 operations, done here on numpy float32
    # scalars (same results, no tensor overhead); log2 stays torch's, as in nndct.
    abs_max = 1 << (bitwidth - 1)
    step = max(np.float32(x_min) / np.float32(-abs_max - 0.5), np.float32(x_max) / np.float32(abs_max - 0.5))
    if not float(step) > sys.float_info.min:
        return ZERO_TENSOR_FIX_POS
    recip = np.float32(1.0) / step
    # torch's float32 log2 is within a few float32 ulps (< 2**-16 here) of the true value, so
    # away from an integer the float64 log2 has the same floor; near one, ask torch itself
    log2 = math.log2(float(recip))
    floor = math.floor(log2)
    if _LOG2_MARGIN < log2 - floor < 1.0 - _LOG2_MARGIN:
        return int(floor)
    return int(math.floor(torch.log2(torch.tensor(recip, dtype=torch.float32)).item()))


def diffs_fix_pos(x: torch.Tensor, bitwidth: int, scope: int, method: str,
                  min_max: Optional[Tuple[float, float]] = None) -> int:
    """The "diffs" fix_pos search of the DPU quantizer (docs/arithmetic.md#fix-position-search), without the cap.

    ``p0 = floor(log2(1 / step))`` is the largest fix position that cannot overflow, with ``step =
    max(min(x) / (-2**(b-1) - 0.5), max(x) / (2**(b-1) - 0.5))`` computed with the same float32 torch
    operations as nndct (fix_ops.py ``diffs_fix_pos``), so the floor lands on the same side of a power
    of two; an all-zero tensor gives 18. For ``scope == 1`` the result is ``p0``. Otherwise each candidate
    ``p = p0 + i`` (i < scope) is scored by the float32 sum of squared errors
    ``torch.sum((x - fake_quant(x, p))**2)``, as nndct computes it; the smallest wins, ties keep
    the smaller p. The error is computed scaled by ``2**p`` and the sum scaled back by ``4**-p``;
    power-of-two scaling commutes with float rounding, so every partial sum equals nndct's. The
    candidates are rounded half to even (``round_``): that differs from half_up and std_round only
    on exact ties, where the error has the same magnitude, so the sums are bit-identical for both
    ``method`` values. Small tensors (up to ``BATCHED_SEARCH_NUMEL`` elements) score all
    candidates in one batched pass (same sums: torch reduces them serially). Larger ones score
    one candidate at a time in one scratch buffer and stop at the first candidate whose clipping
    error alone provably exceeds the best sum so far (``_ClipBound``): those candidates could
    not have won, so the result is the one of scoring all five, at two candidates' cost or less
    on typical activations.

    Args:
        x: float32 tensor, any shape, finite values. Not modified.
        bitwidth: b.
        scope: number of candidates (5 for weights, bias and activations, 1 for the input).
        method: ``"half_up"`` or ``"std_round"`` (checked; the result does not depend on it).
        min_max: ``(min(x), max(x))`` as Python floats when the caller already has them.

    Returns:
        int fix position (cap it with :func:`cap_fix_pos`).

    Raises:
        ValueError: unknown ``method``.
    """
    if method not in ROUNDING_METHODS:
        raise ValueError("rounding method: expected one of %s, got %r" % (ROUNDING_METHODS, method))
    if min_max is None:
        mn, mx = torch.aminmax(x)
        min_max = (mn.item(), mx.item())
    p0 = _overflow_free(min_max[0], min_max[1], bitwidth)
    if scope <= 1:
        return p0
    lo = -(1 << (bitwidth - 1))
    hi = (1 << (bitwidth - 1)) - 1
    if x.numel() <= BATCHED_SEARCH_NUMEL:
        sses = _candidate_sse_batched(x, p0, scope, lo, hi)
        best, best_sse = p0, sys.float_info.max
        for i, sse in enumerate(sses):
            if sse < best_sse:
                best, best_sse = p0 + i, sse
        return best
    # one candidate at a time, in increasing p; a candidate whose clipping error alone is
    # provably larger than the best sum so far is skipped, and so are all after it (see
    # _ClipBound: the bound grows with p)
    buf = torch.empty_like(x)
    # p0 cannot overflow, except where R(v) of an extreme reaches the code range's edge + 1
    clamp = not (lo <= round(min_max[0] * pow2(p0)) and round(min_max[1] * pow2(p0)) <= hi)
    best, best_sse = p0, _candidate_sse(x, p0, lo, hi, buf, clamp)
    bound = _ClipBound(x, min_max, lo, hi)
    for p in range(p0 + 1, p0 + scope):
        # the strided subset rarely holds an element clipped at p0 + 1: extremes only there
        if bound.exceeds(p, best_sse, p > p0 + 1):
            break
        sse = _candidate_sse(x, p, lo, hi, buf)
        if sse < best_sse:
            best, best_sse = p, sse
    return best


class _ClipBound:
    """Lower bounds of a candidate's float32 error sum from its clipped values (diffs search).

    For candidate ``p`` every element with ``v = x * 2**p`` outside ``[lo, hi]`` is clamped, so
    its squared error is at least ``c**2`` with ``c = v - clamp(v, lo, hi)``, exactly. Summed over
    any subset of the elements this is a lower bound ``L(p)`` of the exact sum ``S(p)``, and in
    unscaled units ``L(p) * 4**-p`` never decreases with ``p`` (the clamp thresholds
    ``hi * 2**-p`` shrink). The float32 sum torch computes, in any order, is at least
    ``S(p) * (1 - n * 2**-24)`` for ``n`` non-negative terms each rounded once (squares) and
    added ``n - 1`` times. So when ``L(p) * 4**-p * (1 - n * 2**-24)`` exceeds the best float32
    sum found so far, candidate ``p`` and every larger one would lose: the search result is
    the same as scoring them all.

    Two subsets are used: the two extreme elements (free: the min/max are known), then, only
    if that is not enough, every ``SUBSET_STRIDE``-th element (``L`` in float64, exact up to a
    relative 2**-29, lowered by 2**-20 for safety).
    """

    SUBSET_STRIDE = 16

    def __init__(self, x: torch.Tensor, min_max: Tuple[float, float], lo: int, hi: int) -> None:
        self.x = x
        self.x_min, self.x_max = min_max
        self.lo, self.hi = lo, hi
        n = x.numel()
        self.keep = 1.0 - n * 2.0 ** -24  # <= 0 for n >= 2**24: nothing is ever skipped
        self.subset = None  # type: Optional[torch.Tensor]

    def _clip(self, v: float) -> float:
        return v - min(max(v, self.lo), self.hi)

    def exceeds(self, p: int, best_sse: float, use_subset: bool = True) -> bool:
        """True when candidate ``p``'s float32 error sum is provably larger than ``best_sse``
        (False means "not proven"); ``use_subset=False`` tries the extremes only."""
        if self.keep <= 0.0:
            return False
        amp = pow2(p)
        ext = self._clip(self.x_max * amp) ** 2
        if self.x_min < self.x_max:  # two distinct elements
            ext += self._clip(self.x_min * amp) ** 2
        if ext * pow2(-2 * p) * self.keep * (1.0 - 2.0 ** -20) > best_sse:
            return True
        if not use_subset:
            return False
        if self.subset is None:
            self.subset = self.x.reshape(-1)[::self.SUBSET_STRIDE].double()
        v = self.subset * amp
        part = torch.sum(v.sub_(v.clamp(self.lo, self.hi)).square_()).item()
        return part * pow2(-2 * p) * self.keep * (1.0 - 2.0 ** -20) > best_sse


def _candidate_sse(x: torch.Tensor, p: int, lo: int, hi: int, d: torch.Tensor, clamp: bool = True) -> float:
    # scaled error: q - x * 2**p == -(x - q * 2**-p) * 2**p exactly (power-of-two scaling);
    # clamp=False when no value can leave the code range (the clamp would change nothing)
    amp = pow2(p)
    torch.mul(x, amp, out=d)
    d.round_()
    if clamp:
        d.clamp_(lo, hi)
    d.sub_(x, alpha=amp)
    return torch.sum(d.mul_(d)).item() * pow2(-2 * p)


def _candidate_sse_batched(x: torch.Tensor, p0: int, scope: int, lo: int, hi: int) -> List[float]:
    # all candidates in one (scope, N) tensor (small tensors only: fewer calls, and larger
    # temporaries cost more than they save). Below the grain size torch sums each row serially,
    # in the same order as torch.sum of one N-element tensor.
    amps = _CANDIDATE_SCALES.get((p0, scope, x.dtype))
    if amps is None:
        amps = torch.tensor([pow2(p0 + i) for i in range(scope)], dtype=x.dtype).reshape(scope, 1)
        _CANDIDATE_SCALES[(p0, scope, x.dtype)] = amps
    v = x.reshape(1, -1) * amps
    d = torch.round(v).clamp_(lo, hi).sub_(v)
    sums = torch.sum(d.mul_(d), dim=1).tolist()
    return [s * pow2(-2 * (p0 + i)) for i, s in enumerate(sums)]


def modal_fix_pos(history: Iterable[int]) -> int:
    """The statistical mode of per-batch fix positions; ties give the smallest value.

    This is nndct's "modal" ``calib_statistic_method`` (``scipy.stats.mode`` in
    ``torchquantizer.py``, which returns the smallest of the most frequent values).

    Raises:
        ValueError: empty history.
    """
    counts = Counter(history)
    if not counts:
        raise ValueError("modal_fix_pos: empty fix_pos history")
    top = max(counts.values())
    return min(p for p, c in counts.items() if c == top)
