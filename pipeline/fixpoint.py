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

The fix_pos search (the real quantizer's "diffs" search) is in ``fix_pos_search``.

Differences from the real kernel, on purpose: a value so large that ``x * 2**p`` overflows a C
``int`` (|x| > 2**31 * 2**-p) saturates here, while the real kernel's int conversion is undefined.
"""
from typing import Optional, Tuple

import torch
import torch.fx

from .cpu import tile_bytes

# float32 elements per fake_quant tile: half the per-core L2 cache, so the element-wise chain runs in cache
_FAKE_QUANT_TILE = max(1 << 12, tile_bytes() // 4)

ROUNDING_METHODS = ("half_up", "std_round")

# Activation and input fix positions are capped at this value for bit widths <= 8
# (option ``max_fix_position``, default 12; docs/arithmetic.md#fix-position-cap). Wider bit widths are capped at 15.
MAX_FIX_POS_8BIT = 12
MAX_FIX_POS_WIDE = 15

# fake_quant's half_up: floor((v - 2**-25) + 0.5) == half_up(v) (see fake_quant)
_HALF_UP_NUDGE = 2.0 ** -25

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


def pow2(p: int) -> float:
    """``2.0 ** p`` (exact: a power of two)."""
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
    return _round(x * pow2(fix_pos), method).clamp_(lo, hi)


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
        return quantize(x, fix_pos, bitwidth, method).mul_(pow2(-fix_pos))
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
    amp = pow2(fix_pos)
    return lo <= min_max[0] * amp and min_max[1] * amp <= hi


def _fake_quant_into(x: torch.Tensor, out: Optional[torch.Tensor], fix_pos: int, bitwidth: int,
                     method: str, clamp: bool = True) -> torch.Tensor:
    lo = -(1 << (bitwidth - 1))
    hi = (1 << (bitwidth - 1)) - 1
    out = torch.mul(x, pow2(fix_pos), out=out) if out is not None else torch.mul(x, pow2(fix_pos))
    if method == "half_up":
        out.sub_(_HALF_UP_NUDGE).add_(0.5).floor_()
        return (out.clamp_(lo, hi) if clamp else out).mul_(pow2(-fix_pos))
    # std_round: half_up of |v| with the sign put back; + 0.0 turns -0.0 into +0.0
    out.abs_().sub_(_HALF_UP_NUDGE).add_(0.5).floor_().copysign_(x)
    return out.clamp_(lo, hi).mul_(pow2(-fix_pos)).add_(0.0)


torch.fx.wrap("fake_quant")


def cap_fix_pos(fix_pos: int, bitwidth: int, max_fix_pos: int = MAX_FIX_POS_8BIT) -> int:
    """Apply the fix_pos cap: ``min(p, max_fix_pos)`` for b <= 8, ``min(p, 15)`` otherwise
    (docs/arithmetic.md#fix-position-cap)."""
    return min(fix_pos, max_fix_pos if bitwidth <= 8 else MAX_FIX_POS_WIDE)


