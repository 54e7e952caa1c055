"""DPU fixed-point arithmetic: rounding, fake quantization and the fix_pos search (plain torch).

Number format (docs/arithmetic.md#number-format): symmetric, signed, power-of-two scale, per tensor. For bit
width ``b`` and fix position ``p`` (an integer, may be negative)::

    q = clamp(R(x * 2**p), -2**(b-1), 2**(b-1) - 1)      x_hat = q * 2**-p

``x * 2**p`` and ``q * 2**-p`` are exact in float32 (power-of-two scaling), so only the rounding
rule ``R`` matters (docs/arithmetic.md#rounding, ``_vai_round_cpu`` in ``vai_q_pytorch/include/cpu/
nndct_fix_kernels_cpu.h``):

- ``"half_up"`` (kernel method 2, "DPU round"): ties go toward +inf. Used for the network input
  and every activation.
- ``"std_round"`` (kernel method 3, C ``round()``): ties go away from zero. Used for weights and
  bias.

Both are implemented exactly (no ``floor(x + 0.5)`` shortcut, which is wrong for the float just
below 0.5). ``torch.round`` is half-even and is never used as the rounding rule by itself.

The fix_pos search is the "diffs" search of ``pytorch_nndct/nn/modules/fix_ops.py``
(``diffs_fix_pos``, docs/arithmetic.md#fix-position-search): the largest ``p`` that cannot overflow, then
(scope > 1) the ``p`` in ``p0 .. p0+scope-1`` with the smallest sum of squared errors, ties keeping the
smaller ``p``. The same torch float32 operations are used for ``p0`` (``log2`` of the reciprocal step) and
for the error sums, so the result is bit-compatible with the real quantizer on the same torch build.

Differences from the real kernel, on purpose: a value so large that ``x * 2**p`` overflows a C
``int`` (|x| > 2**31 * 2**-p) saturates here, while the real kernel's int conversion is undefined.
"""
import math
import sys
from collections import Counter
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import torch
import torch.fx

from ..cpu import tile_bytes

# float32 elements per fake_quant tile: half the per-core L2 cache, so the element-wise chain runs in cache
_FAKE_QUANT_TILE = max(1 << 12, tile_bytes() // 4)

ROUNDING_METHODS = ("half_up", "std_round")

# Activation and input fix positions are capped at this value for bit widths <= 8
# (option ``max_fix_position``, default 12; docs/arithmetic.md#fix-position-cap). Wider bit widths are capped at 15.
MAX_FIX_POS_8BIT = 12
MAX_FIX_POS_WIDE = 15

# Scope of the diffs search (docs/arithmetic.md#fix-position-search): 5 candidates ("mse" diffs mode, the
# default) for weights, bias and activations; 1 for the network input (INPUT / QuantStub nodes).
SCOPE_DEFAULT = 5
SCOPE_INPUT = 1

# fake_quant's half_up: floor((v - 2**-25) + 0.5) == half_up(v) (see fake_quant)
_HALF_UP_NUDGE = 2.0 ** -25

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


def round_half_up(v: torch.Tensor) -> torch.Tensor:
    """Round to the nearest integer, ties toward +inf (DPU "half_up"; docs/arithmetic.md#rounding, method 2).

    Args:
        v: float tensor of any shape (float32 in the pipeline). Not modified.

    Returns:
        A new tensor of the same shape and dtype holding integral values.
        ``-2.5 -> -2``, ``-0.5 -> 0``, ``0.5 -> 1``, ``2.5 -> 3``.
    """
    r = torch.round(v)  # half-even; differs from half_up only on ties with an even floor
    return r.add_((v - r) == 0.5)


def round_std(v: torch.Tensor) -> torch.Tensor:
    """Round to the nearest integer, ties away from zero (C ``round()``; docs/arithmetic.md#rounding, method 3).

    Args:
        v: float tensor of any shape. Not modified.

    Returns:
        A new tensor of the same shape and dtype holding integral values.
        ``-2.5 -> -3``, ``-0.5 -> -1``, ``0.5 -> 1``, ``2.5 -> 3``.
    """
    t = torch.trunc(v)
    frac = v - t  # exact
    # ``+ 0.0`` turns the -0.0 of trunc(-0.3) into +0.0, as the kernel's int -> float does
    return t.add_(torch.sign(v) * (frac.abs() >= 0.5)).add_(0.0)


def _round(v: torch.Tensor, method: str) -> torch.Tensor:
    if method == "half_up":
        return round_half_up(v)
    if method == "std_round":
        return round_std(v)
    raise ValueError("rounding method: expected one of %s, got %r" % (ROUNDING_METHODS, method))


def _scale(p: int) -> float:
    return 2.0 ** p


def quantize(x: torch.Tensor, fix_pos: int, bitwidth: int, method: str) -> torch.Tensor:
    """Integer codes ``clamp(R(x * 2**fix_pos), -2**(b-1), 2**(b-1)-1)`` as a float tensor.

    Args:
        x: float32 tensor, any shape and layout. Not modified.
        fix_pos: the fix position p (int, may be negative).
        bitwidth: b, e.g. 8 (codes -128..127).
        method: ``"half_up"`` or ``"std_round"``.

    Returns:
        A new float tensor (same dtype and shape) of integral values in the code range.

    Raises:
        ValueError: unknown ``method``.
    """
    lo = -(1 << (bitwidth - 1))
    hi = (1 << (bitwidth - 1)) - 1
    return _round(x * _scale(fix_pos), method).clamp_(lo, hi)


def fake_quant(x: torch.Tensor, fix_pos: int, bitwidth: int, method: str) -> torch.Tensor:
    """Quantize and dequantize: ``quantize(x, ...) * 2**-fix_pos`` (float32 values on the grid).

    The one custom call of the lowered test-mode graph (see ``sim/lowered.py``); registered with
    ``torch.fx.wrap`` so that tracing keeps it as a single node. It never writes its input (the
    real quantizer overwrites its input tensor in place, docs/quantizer.md#input-rounded-in-place; this
    function does not).

    Both rules run in one buffer: ``v = x * 2**p``, then in place ``floor((v - 2**-25) + 0.5)``
    (for std_round on ``|v|``, with the sign copied back), clamp and scale. Subtracting 2**-25
    first (a separate rounding) fixes the one float where ``floor(v + 0.5)`` is wrong
    (``v = 0.5 - 2**-25``) and changes no other result; checked over all 2**32 float32 bit
    patterns, where the only differences from half_up are odd integers beyond 2**23, which the
    clamp maps to the same code for every bit width up to 23.

    Args:
        x: float32 tensor, any shape and layout.
        fix_pos: int fix position p.
        bitwidth: int bit width b (8 on the DPU).
        method: ``"half_up"`` (input, activations) or ``"std_round"`` (weights, bias).

    Returns:
        A new tensor, same shape and dtype, every value ``q * 2**-p`` with q in the code range.
    """
    if method not in ROUNDING_METHODS or bitwidth > 23:
        return quantize(x, fix_pos, bitwidth, method).mul_(_scale(-fix_pos))
    if not torch.jit.is_tracing() and x.numel() > 2 * _FAKE_QUANT_TILE and x.is_contiguous():
        # the same element-wise chain per tile of the flat tensor, so it runs in cache: one pass
        # through memory instead of six (same operations on every element: the same bits); a
        # TorchScript trace records the single pass, which fits any size
        out = torch.empty_like(x)
        flat_x, flat_out = x.view(-1), out.view(-1)
        for i in range(0, flat_x.numel(), _FAKE_QUANT_TILE):
            _fake_quant_into(flat_x[i:i + _FAKE_QUANT_TILE], flat_out[i:i + _FAKE_QUANT_TILE], fix_pos, bitwidth,
                             method)
        return out
    return _fake_quant_into(x, None, fix_pos, bitwidth, method)


def fake_quant_(x: torch.Tensor, fix_pos: int, bitwidth: int, clamp: bool = True) -> torch.Tensor:
    """``fake_quant(x, fix_pos, bitwidth, "half_up")`` written over ``x``; returns ``x``.

    The same operations on every element as :func:`fake_quant`, so the same values, without a
    new tensor: for calibration values no one else reads (``calib.Calibrator``).

    Args:
        x: contiguous float32 tensor, overwritten.
        fix_pos: int fix position p.
        bitwidth: int bit width b, at most 23.
        clamp: False when every code is known to be in range (``codes_in_range``): the clamp,
            which would change nothing, is skipped.

    Raises:
        ValueError: ``x`` not contiguous float32, or ``bitwidth`` above 23.
    """
    if not (x.is_contiguous() and x.dtype == torch.float32) or bitwidth > 23:
        raise ValueError("fake_quant_: expected a contiguous float32 tensor and a bit width <= 23, got %s, %s and %d; "
                         "use fake_quant" % (x.dtype, "contiguous" if x.is_contiguous() else "strided", bitwidth))
    flat = x.view(-1)
    for i in range(0, max(flat.numel(), 1), _FAKE_QUANT_TILE):  # tiles as fake_quant's: in cache
        tile = flat[i:i + _FAKE_QUANT_TILE]
        _fake_quant_into(tile, tile, fix_pos, bitwidth, "half_up", clamp)
    return x


def codes_in_range(min_max: Tuple[float, float], fix_pos: int, bitwidth: int) -> bool:
    """True when every half_up code of a tensor whose extremes are ``min_max`` lies in the code
    range at ``fix_pos``: ``lo <= min * 2**p`` and ``max * 2**p <= hi`` (exact products), and
    ``floor((v - 2**-25) + 0.5)`` is monotonic in ``v`` and maps ``lo`` and ``hi`` to themselves."""
    lo = -(1 << (bitwidth - 1))
    hi = (1 << (bitwidth - 1)) - 1
    amp = _scale(fix_pos)
    return lo <= min_max[0] * amp and min_max[1] * amp <= hi


def _fake_quant_into(x: torch.Tensor, out: Optional[torch.Tensor], fix_pos: int, bitwidth: int,
                     method: str, clamp: bool = True) -> torch.Tensor:
    lo = -(1 << (bitwidth - 1))
    hi = (1 << (bitwidth - 1)) - 1
    out = torch.mul(x, _scale(fix_pos), out=out) if out is not None else torch.mul(x, _scale(fix_pos))
    if method == "half_up":
        out.sub_(_HALF_UP_NUDGE).add_(0.5).floor_()
        return (out.clamp_(lo, hi) if clamp else out).mul_(_scale(-fix_pos))
    # std_round: half_up of |v| with the sign put back; + 0.0 turns -0.0 into +0.0
    out.abs_().sub_(_HALF_UP_NUDGE).add_(0.5).floor_().copysign_(x)
    return out.clamp_(lo, hi).mul_(_scale(-fix_pos)).add_(0.0)


torch.fx.wrap("fake_quant")


def cap_fix_pos(fix_pos: int, bitwidth: int, max_fix_pos: int = MAX_FIX_POS_8BIT) -> int:
    """Apply the fix_pos cap: ``min(p, max_fix_pos)`` for b <= 8, ``min(p, 15)`` otherwise
    (docs/arithmetic.md#fix-position-cap)."""
    return min(fix_pos, max_fix_pos if bitwidth <= 8 else MAX_FIX_POS_WIDE)


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
    clamp = not (lo <= round(min_max[0] * _scale(p0)) and round(min_max[1] * _scale(p0)) <= hi)
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
        amp = _scale(p)
        ext = self._clip(self.x_max * amp) ** 2
        if self.x_min < self.x_max:  # two distinct elements
            ext += self._clip(self.x_min * amp) ** 2
        if ext * _scale(-2 * p) * self.keep * (1.0 - 2.0 ** -20) > best_sse:
            return True
        if not use_subset:
            return False
        if self.subset is None:
            self.subset = self.x.reshape(-1)[::self.SUBSET_STRIDE].double()
        v = self.subset * amp
        part = torch.sum(v.sub_(v.clamp(self.lo, self.hi)).square_()).item()
        return part * _scale(-2 * p) * self.keep * (1.0 - 2.0 ** -20) > best_sse


def _candidate_sse(x: torch.Tensor, p: int, lo: int, hi: int, d: torch.Tensor, clamp: bool = True) -> float:
    # scaled error: q - x * 2**p == -(x - q * 2**-p) * 2**p exactly (power-of-two scaling);
    # clamp=False when no value can leave the code range (the clamp would change nothing)
    amp = _scale(p)
    torch.mul(x, amp, out=d)
    d.round_()
    if clamp:
        d.clamp_(lo, hi)
    d.sub_(x, alpha=amp)
    return torch.sum(d.mul_(d)).item() * _scale(-2 * p)


def _candidate_sse_batched(x: torch.Tensor, p0: int, scope: int, lo: int, hi: int) -> List[float]:
    # all candidates in one (scope, N) tensor (small tensors only: fewer calls, and larger
    # temporaries cost more than they save). Below the grain size torch sums each row serially,
    # in the same order as torch.sum of one N-element tensor.
    amps = _CANDIDATE_SCALES.get((p0, scope, x.dtype))
    if amps is None:
        amps = torch.tensor([_scale(p0 + i) for i in range(scope)], dtype=x.dtype).reshape(scope, 1)
        _CANDIDATE_SCALES[(p0, scope, x.dtype)] = amps
    v = x.reshape(1, -1) * amps
    d = torch.round(v).clamp_(lo, hi).sub_(v)
    sums = torch.sum(d.mul_(d), dim=1).tolist()
    return [s * _scale(-2 * (p0 + i)) for i, s in enumerate(sums)]


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


def avgpool_dpu_scale(kernel_h: int, kernel_w: int) -> float:
    """The factor nndct multiplies an average pool's output by (option ``avg_pool_approximate``).

    The DPU divides by ``k = kh*kw`` as a multiply by ``m / 2**s``; the quantizer reproduces that
    as ``avg * k * m / 2**s``. Table sizes (docs/arithmetic.md#average-pool-correction;
    ``nn/modules/avgpool.py``): 3x3 -> 63/64, 5x5 -> 250/256, 6x6 (also 3x6, 6x3) -> 252/256, 7x7 ->
    1029/1024, 14x14 -> 4116/4096. Other sizes: the ``m, s`` with ``s < ceil(log2(128 k))`` minimizing
    ``|m/2**s - 1/k|`` where ``m = round(2**s / k)`` (Python banker's ``round``, first minimum wins); e.g.
    8x8 -> 1.0, 10x10 -> 1.0009765625.

    Returns:
        The factor as a Python float (exact in float32 for every table entry).
    """
    k = [kernel_h, kernel_w]
    if k == [3, 3]:
        return 9.0 * 7.0 / 64.0
    if k == [5, 5]:
        return 25.0 * 10.0 / 256.0
    if k in ([6, 6], [3, 6], [6, 3]):
        return 36.0 * 7.0 / 256.0
    if k == [7, 7]:
        return 49.0 * 21.0 / 1024.0
    if k == [14, 14]:
        return 196.0 * 21.0 / 4096.0
    rec = kernel_h * kernel_w
    max_shift = int(math.ceil(math.log(rec * 128, 2)))
    best_diff = 1.0
    mult, shift = 0.0, 0
    for s in range(max_shift):
        m = round((2 ** s) / rec)
        diff = abs(m / (2 ** s) - 1.0 / rec)
        if diff < best_diff:
            mult, best_diff, shift = m, diff, s
    return rec * mult / (2 ** shift)
