"""Bilinear resizing (``F.interpolate(mode="bilinear")``, ``nn.Upsample(mode="bilinear")``) in
ONNX, exact where the interpolation is exact in float32, refused elsewhere.

The real quantizer resizes in float: its ``Interpolate`` module (``pytorch_nndct/nn/modules/
interpolate.py``) calls ``F.interpolate`` on the quantized input and quantizes the result, and
the simulation does the same. torch's CPU kernel computes each output as a weighted sum of four
inputs in float32, in an order that depends on the kernel it picks (a channels-last vectorised
kernel sums ``x00*w00 + (x01*w01 + (x10*w10 + x11*w11))`` over vector-wide channel groups and the
remaining channels left to right; a separable one sums rows, then columns): with torch 2.13 the
same image resized alone and among 20 channels differs in a third of its float results.
ONNX Runtime's ``Resize`` (linear, ``pytorch_half_pixel`` / ``align_corners``) follows none of
them: on random 8-bit inputs 62% of its float results differ from torch's and 0.14% stay
different after the output's re-quantization, so it is not used.

Where every partial sum is exact, the order does not matter: the input lies on a 2^-fix_pos grid
with codes of ``b`` bits (a quantization point's output), the row weights have ``ph`` fractional
bits and the column weights ``pw``, so every product and partial sum is an integer multiple of
2^-(fix_pos + ph + pw) of magnitude at most 2^(b - 1) * 2^-fix_pos, exact in float32 when
``b - 1 + ph + pw <= 24``. That holds for power-of-two scales (2x: weights 1/4 and 3/4; 8x:
multiples of 1/16) and for ``align_corners=True`` with ``(in - 1) / (out - 1)`` a power of two;
other sizes (a third, 9 -> 17 rows) have weights with 23+ fractional bits and are refused. The
exact case is written as Gather(rows) * weights + Gather(rows) * weights, then the same on the
columns: plain float32 Mul and Add whose results are exact, so ONNX Runtime gives torch's bits.

The weights are torch's own: the resize runs on a probe whose value is the column (row) index,
which gives ``i0 + lambda1`` per output column (row); a second probe of random codes on the
input's grid checks the tables against torch's output bit for bit.
"""
from typing import TYPE_CHECKING, Any, Callable, Tuple

import numpy as np
import torch
import torch.fx

from .....ops.onnx_form import Unsupported, pow2

if TYPE_CHECKING:  # annotations only: the builder calls this module
    from .builder import Builder

FLOAT32_BITS = 24  # the significand of float32: integers up to 2^24 are exact


def _fraction_bits(values: np.ndarray) -> int:
    """The fewest fractional bits p with every value an integer multiple of 2^-p (float64 input)."""
    p = 0
    while p < 64 and np.any(values * 2.0 ** p != np.floor(values * 2.0 ** p)):
        p += 1
    return p


def _axis_tables(position: torch.Tensor, size: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices ``i0``, ``i1`` and the weight ``lambda1`` of ``i1`` per output position,
    from torch's resize of a probe holding each position's index (``i0 + lambda1``)."""
    v = position.double().numpy()
    i0 = np.clip(np.floor(v), 0, size - 1).astype(np.int64)
    lam1 = v - i0
    i1 = np.minimum(i0 + 1, size - 1)
    return i0, i1, lam1


def _weighted(b: "Builder", x: str, name: str, axis: int, tables: Tuple[np.ndarray, np.ndarray, np.ndarray]) -> str:
    """``Gather(x, i0) * (1 - lambda1) + Gather(x, i1) * lambda1`` along ``axis`` (2 rows, 3 columns)."""
    i0, i1, lam1 = tables
    shape = (-1, 1) if axis == 2 else (-1,)
    w1 = lam1.astype(np.float32).reshape(shape)
    w0 = (1.0 - lam1).astype(np.float32).reshape(shape)
    g0 = b.op("Gather", [x, b.ints(name + "/i0", i0.tolist())], name + "/g0", axis=axis)
    g1 = b.op("Gather", [x, b.ints(name + "/i1", i1.tolist())], name + "/g1", axis=axis)
    return b.op("Add", [b.op("Mul", [g0, b.init(name + "/w0", w0)], name + "/m0"),
                        b.op("Mul", [g1, b.init(name + "/w1", w1)], name + "/m1")], name)


def bilinear(b: "Builder", node: torch.fx.Node, call: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """An exact bilinear resize of node's input ``node.args[0]`` (4-D NCHW float32, a fake_quant's
    output); ``call`` runs the resize as the model does (same size / scale_factor /
    align_corners) on a probe of the input's (1, C, H, W) shape.

    Raises:
        Unsupported: input not 4-D or not on a quantization grid; antialiasing; weights whose sums
            are not exact in float32 (the reason names the fractional bits needed); torch's
            output on the probe not the exact interpolation.
    """
    x = node.args[0]
    shape = b.shape(x)
    if len(shape) != 4:
        raise Unsupported("input is %d-D, expected 4-D NCHW" % len(shape))
    if node.kwargs.get("antialias"):
        raise Unsupported("bilinear with antialias=True (only the plain 2-tap interpolation is written)")
    grid = b.grid(x)
    if grid is None:
        raise Unsupported("bilinear resize of %s, which is no quantization point's output: exact only on "
                          "a 2^-fix_pos grid" % getattr(x, "name", x))
    fix_pos, bits = grid
    h, w = shape[2:]
    oh, ow = b.shape(node)[2:]
    rows = torch.arange(h, dtype=torch.float32).view(1, 1, h, 1).expand(1, 1, h, w)
    cols = torch.arange(w, dtype=torch.float32).view(1, 1, 1, w).expand(1, 1, h, w)
    with torch.no_grad():
        probe = call(torch.cat([rows, cols], 1))
    if tuple(probe.shape[2:]) != (oh, ow):
        raise Unsupported("the resize of a probe gives %s, expected %s" % (tuple(probe.shape[2:]), (oh, ow)))
    row_t, col_t = _axis_tables(probe[0, 0, :, 0], h), _axis_tables(probe[0, 1, 0, :], w)
    ph, pw = _fraction_bits(row_t[2]), _fraction_bits(col_t[2])
    if bits - 1 + ph + pw > FLOAT32_BITS:
        raise Unsupported(
            "bilinear %dx%d -> %dx%d: its weights have %d (rows) + %d (columns) fractional bits, so with "
            "%d-bit input codes the interpolation is not exact in float32 and torch's result depends on "
            "its kernel's summation order (ONNX Runtime's Resize differs in the last bits); exact for "
            "power-of-two scales" % (h, w, oh, ow, ph, pw, bits))
    _check_tables(call, shape, fix_pos, bits, row_t, col_t)
    y = b.tensor(x)
    if not (h == oh and not row_t[2].any() and (row_t[0] == np.arange(h)).all()):
        y = _weighted(b, y, node.name + "/rows", 2, row_t)
    return _weighted(b, y, node.name, 3, col_t)


def _check_tables(call: Callable[[torch.Tensor], torch.Tensor], shape: Tuple[int, ...], fix_pos: int, bits: int,
                  row_t: Any, col_t: Any) -> None:
    """torch's resize of random codes (the extremes included) on the input's grid equals the exact
    interpolation with the tables, bit for bit."""
    g = torch.Generator().manual_seed(0)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    codes = torch.randint(lo, hi + 1, (1,) + tuple(shape[1:]), generator=g, dtype=torch.int64)
    flat = codes.view(-1)
    flat[:2] = torch.tensor([lo, hi])[:flat.numel()]
    x = codes.double() * pow2(-fix_pos)
    with torch.no_grad():
        got = call(x.float()).double()
    (ri0, ri1, rl), (ci0, ci1, cl) = row_t, col_t
    rl, cl = torch.from_numpy(rl).view(-1, 1), torch.from_numpy(cl)
    t = x[:, :, torch.from_numpy(ri0)] * (1 - rl) + x[:, :, torch.from_numpy(ri1)] * rl
    exact = t[:, :, :, torch.from_numpy(ci0)] * (1 - cl) + t[:, :, :, torch.from_numpy(ci1)] * cl
    if not torch.equal(got, exact):
        raise Unsupported("torch's bilinear kernel did not give the exact interpolation on a probe "
                          "(%d of %d values differ)" % (int((got != exact).sum()), got.numel()))
