"""DPU fixed-point arithmetic: rounding, fake quantization and the fix_pos search (plain torch).

Number format (vitis_ai_facts.md 2.1): symmetric, signed, power-of-two scale, per tensor. For bit
width ``b`` and fix position ``p`` (an integer, may be negative)::

    q = clamp(R(x * 2**p), -2**(b-1), 2**(b-1) - 1)      x_hat = q * 2**-p

``x * 2**p`` and ``q * 2**-p`` are exact in float32 (power-of-two scaling), so only the rounding
rule ``R`` matters (facts 2.2, ``_vai_round_cpu`` in ``vai_q_pytorch/include/cpu/
nndct_fix_kernels_cpu.h``):

- ``"half_up"`` (kernel method 2, "DPU round"): ties go toward +inf. Used for the network input
  and every activation.
- ``"std_round"`` (kernel method 3, C ``round()``): ties go away from zero. Used for weights and
  bias.

Both are implemented exactly (no ``floor(x + 0.5)`` shortcut, which is wrong for the float just
below 0.5). ``torch.round`` is half-even and is never used as the rounding rule by itself.

The fix_pos search is the "diffs" search of ``pytorch_nndct/nn/modules/fix_ops.py``
(``diffs_fix_pos``, facts 2.3): the largest ``p`` that cannot overflow, then (scope > 1) the ``p``
in ``p0 .. p0+scope-1`` with the smallest sum of squared errors, ties keeping the smaller ``p``.
The same torch float32 operations are used for ``p0`` (``log2`` of the reciprocal step), so the
result is bit-compatible with the real quantizer on the same torch build.

Differences from the real kernel, on purpose: a value so large that ``x * 2**p`` overflows a C
``int`` (|x| > 2**31 * 2**-p) saturates here, while the real kernel's int conversion is undefined.
"""
import math
import sys
from collections import Counter
from typing import Iterable

import torch
import torch.fx

ROUNDING_METHODS = ("half_up", "std_round")

# Activation and input fix positions are capped at this value for bit widths <= 8
# (option ``max_fix_position``, default 12; facts 2.1). Wider bit widths are capped at 15.
MAX_FIX_POS_8BIT = 12
MAX_FIX_POS_WIDE = 15

# Scope of the diffs search (facts 2.3): 5 candidates ("mse" diffs mode, the default) for weights,
# bias and activations; 1 for the network input (INPUT / QuantStub nodes).
SCOPE_DEFAULT = 5
SCOPE_INPUT = 1

# The value nndct uses as fix position of an all-zero tensor (fix_ops.py, ``diffs_fix_pos``).
ZERO_TENSOR_FIX_POS = 18


def round_half_up(v: torch.Tensor) -> torch.Tensor:
    """Round to the nearest integer, ties toward +inf (DPU "half_up"; facts 2.2, method 2).

    Args:
        v: float tensor of any shape (float32 in the pipeline). Not modified.

    Returns:
        A new tensor of the same shape and dtype holding integral values.
        ``-2.5 -> -2``, ``-0.5 -> 0``, ``0.5 -> 1``, ``2.5 -> 3``.
    """
    r = torch.round(v)  # half-even; differs from half_up only on ties with an even floor
    return r.add_((v - r) == 0.5)


def round_std(v: torch.Tensor) -> torch.Tensor:
    """Round to the nearest integer, ties away from zero (C ``round()``; facts 2.2, method 3).

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
    real quantizer overwrites its input tensor in place, facts 1.4; this function does not).

    Args:
        x: float32 tensor, any shape and layout.
        fix_pos: int fix position p.
        bitwidth: int bit width b (8 on the DPU).
        method: ``"half_up"`` (input, activations) or ``"std_round"`` (weights, bias).

    Returns:
        A new tensor, same shape and dtype, every value ``q * 2**-p`` with q in the code range.
    """
    return quantize(x, fix_pos, bitwidth, method).mul_(_scale(-fix_pos))


torch.fx.wrap("fake_quant")


def cap_fix_pos(fix_pos: int, bitwidth: int, max_fix_pos: int = MAX_FIX_POS_8BIT) -> int:
    """Apply the fix_pos cap: ``min(p, max_fix_pos)`` for b <= 8, ``min(p, 15)`` otherwise (facts 2.1)."""
    return min(fix_pos, max_fix_pos if bitwidth <= 8 else MAX_FIX_POS_WIDE)


def overflow_free_fix_pos(x: torch.Tensor, bitwidth: int) -> int:
    """The largest fix position that cannot overflow: ``floor(log2(1 / step))``.

    ``step = max(min(x) / (-2**(b-1) - 0.5), max(x) / (2**(b-1) - 0.5))``, computed with the same
    float32 torch operations as nndct (fix_ops.py ``diffs_fix_pos``), so the floor lands on the
    same side of a power of two. An all-zero tensor gives 18.

    Args:
        x: float32 tensor, any shape, finite values.
        bitwidth: b.

    Returns:
        int fix position (not capped).
    """
    abs_max = 1 << (bitwidth - 1)
    x_max = torch.max(x)
    x_min = torch.min(x)
    step = torch.max(x_min / (-abs_max - 0.5), x_max / (abs_max - 0.5))
    if not bool(step > sys.float_info.min):
        return ZERO_TENSOR_FIX_POS
    return int(torch.floor(torch.log2(1.0 / step)).item())


def diffs_fix_pos(x: torch.Tensor, bitwidth: int, scope: int, method: str) -> int:
    """The "diffs" fix_pos search of the DPU quantizer (facts 2.3), without the cap.

    For ``scope == 1`` this is :func:`overflow_free_fix_pos`. Otherwise each candidate
    ``p = p0 + i`` (i < scope) is scored by the float32 sum of squared errors
    ``sum((x - fake_quant(x, p))**2)``; the smallest wins, ties keep the smaller p. The error is
    computed as ``(x * 2**p - q) * 2**-p``, which equals nndct's ``x - q * 2**-p`` bit for bit
    (power-of-two scaling commutes with rounding), and the sum is scaled by ``4**-p`` after the
    reduction for the same reason.

    Args:
        x: float32 tensor, any shape, finite values. Not modified.
        bitwidth: b.
        scope: number of candidates (5 for weights, bias and activations, 1 for the input).
        method: ``"half_up"`` for activations and input, ``"std_round"`` for weights and bias.

    Returns:
        int fix position (cap it with :func:`cap_fix_pos`).
    """
    p0 = overflow_free_fix_pos(x, bitwidth)
    if scope <= 1:
        return p0
    lo = -(1 << (bitwidth - 1))
    hi = (1 << (bitwidth - 1)) - 1
    best = p0
    best_sse = sys.float_info.max
    v0 = x * _scale(p0)
    for i in range(scope):
        v = v0 * _scale(i) if i else v0
        d = v - _round(v, method).clamp_(lo, hi)
        sse = torch.sum(d.mul_(d)).item() * _scale(-2 * (p0 + i))
        if sse < best_sse:
            best, best_sse = p0 + i, sse
    return best


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
    as ``avg * k * m / 2**s``. Table sizes (facts 2.6; ``nn/modules/avgpool.py``): 3x3 -> 63/64,
    5x5 -> 250/256, 6x6 (also 3x6, 6x3) -> 252/256, 7x7 -> 1029/1024, 14x14 -> 4116/4096. Other
    sizes: the ``m, s`` with ``s < ceil(log2(128 k))`` minimizing ``|m/2**s - 1/k|`` where
    ``m = round(2**s / k)`` (Python banker's ``round``, first minimum wins); e.g. 8x8 -> 1.0,
    10x10 -> 1.0009765625.

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
