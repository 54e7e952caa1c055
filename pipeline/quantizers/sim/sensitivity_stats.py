"""The statistics of the per-layer sensitivity (``sensitivity.py``): one point's float64 running sums.

:class:`Point` names a quantized point and its float twin; :class:`Accumulator` reduces each batch
of (float, simulated) values at that point to running sums as soon as both exist and makes the
:class:`~pipeline.quantizers.sensitivity_rows.LayerSensitivity` row at the end.
"""
import math
from typing import Any, List, Optional, Tuple

import torch
import torch.fx

from ...errors import QuantizationError
from ..sensitivity_rows import LayerSensitivity

# float64 temporaries of the statistics are kept near this many elements (8 MiB) per tensor
CHUNK_ELEMENTS = 1 << 20


class Point:
    """One quantized point: the nndct node, its float twin and its fix_pos."""

    def __init__(self, name: str, op: str, fix_pos: int, bitwidth: int, float_node: torch.fx.Node,
                 float_target: str, quant_node: torch.fx.Node, notes: List[str]) -> None:
        self.name = name
        self.op = op
        self.fix_pos = fix_pos
        self.bitwidth = bitwidth
        self.float_node = float_node
        self.float_target = float_target
        self.quant_node = quant_node
        self.notes = notes


def describe(v: Any) -> str:
    """A value for an error message: ``"a <dtype> tensor of shape (...)"`` or its type name."""
    if isinstance(v, torch.Tensor):
        return "a %s tensor of shape %s" % (v.dtype, tuple(v.shape))
    return type(v).__name__


class Accumulator:
    """float64 running sums of one point over all batches."""

    def __init__(self, point: Point, scale: Optional[torch.Tensor], keep_batches: bool = False) -> None:
        self.point = point
        self.kept = [] if keep_batches else None  # type: Optional[List[List[Tuple[Any, ...]]]]
        self.scale = scale
        self.shape = None  # type: Optional[List[int]]
        self.n = 0
        self.sum_f2 = self.sum_q2 = self.sum_fq = self.sum_e2 = 0.0
        self.f_min = self.g_min = math.inf
        self.f_max = self.g_max = -math.inf
        self.clipped = 0

    def add(self, f: torch.Tensor, q: torch.Tensor) -> None:
        """Add one batch: ``f`` float and ``q`` simulated values of this point, same shape (N, ...).

        Reduced a few samples at a time, so the float64 temporaries stay near ``CHUNK_ELEMENTS``.
        """
        p = self.point
        if not isinstance(f, torch.Tensor) or not isinstance(q, torch.Tensor) or f.shape != q.shape or f.dim() < 1:
            raise QuantizationError("layer sensitivity: at %s the float model gives %s and the test-mode model %s"
                                    % (p.name, describe(f), describe(q)))
        if self.shape is None:
            self.shape = list(f.shape[1:])
        per_sample = max(1, f[:1].numel())
        step = max(1, CHUNK_ELEMENTS // per_sample)
        chunks = [c for c in (self._chunk(f[start:start + step].detach().double(), q[start:start + step].detach().double())
                              for start in range(0, f.shape[0], step)) if c is not None]
        if self.kept is not None:
            self.kept.append(chunks)  # added later, in global batch order
        else:
            for chunk in chunks:
                self.apply(chunk)

    def apply(self, chunk: Tuple[Any, ...]) -> None:
        """Add one chunk's statistics (``_chunk``'s tuple) to the running sums."""
        f2, q2, fq, e2, f_min, f_max, g_min, g_max, clipped, n = chunk
        self.sum_f2 += f2
        self.sum_q2 += q2
        self.sum_fq += fq
        self.sum_e2 += e2
        self.f_min = min(self.f_min, f_min)
        self.f_max = max(self.f_max, f_max)
        self.g_min = min(self.g_min, g_min)
        self.g_max = max(self.g_max, g_max)
        self.clipped += clipped
        self.n += n

    def _chunk(self, f: torch.Tensor, q: torch.Tensor) -> Optional[Tuple[Any, ...]]:
        """The statistics of a few samples (float64): sums of f^2, q^2, fq, e^2, ranges, clipped count, n."""
        if not f.numel():
            return None
        g = f
        if self.scale is not None:
            s = self.scale.reshape((1, -1) + (1,) * (f.dim() - 2))
            q = q * s  # back to the float model's scale
            g = f / s  # the float values in the quantized graph's scale
        e = f - q
        ff, qq, ee = f.reshape(-1), q.reshape(-1), e.reshape(-1)
        sums = (float(torch.dot(ff, ff)), float(torch.dot(qq, qq)), float(torch.dot(ff, qq)), float(torch.dot(ee, ee)))
        ranges = (float(f.min()), float(f.max()), float(g.min()), float(g.max()))
        codes = g.mul_(2.0 ** self.point.fix_pos) if g is not f else g * (2.0 ** self.point.fix_pos)
        half = 2 ** (self.point.bitwidth - 1)
        clipped = int(((codes >= half - 0.5) | (codes < -half - 0.5)).sum())
        return sums + ranges + (clipped, f.numel())

    def row(self) -> LayerSensitivity:
        """The row of this point over every batch added (a new object)."""
        p = self.point
        if self.sum_e2 == 0.0:
            sqnr, cosine = math.inf, 1.0
        else:
            sqnr = 10.0 * math.log10(self.sum_f2 / self.sum_e2) if self.sum_f2 > 0 else -math.inf
            denom = math.sqrt(self.sum_f2 * self.sum_q2)
            cosine = max(-1.0, min(1.0, self.sum_fq / denom)) if denom > 0 else 0.0
        half = 2 ** (p.bitwidth - 1)
        lsb = 2.0 ** -p.fix_pos
        notes = list(p.notes)
        if self.n and self.g_max * 2.0 ** p.fix_pos < 0.5 and self.g_min * 2.0 ** p.fix_pos >= -0.5:
            notes.append("every float value is within half an LSB of 0 at fix_pos %d: all quantize to 0"
                         % p.fix_pos)
        cle_scale = None
        if self.scale is not None:
            cle_scale = [float(self.scale.min()), float(self.scale.max())]
            if cle_scale != [1.0, 1.0]:  # every scale 1: CLE left the channels as they were
                notes.insert(0, "rescaled by CLE per channel (s %s..%s): SQNR and cosine in the float model's "
                                "scale, ranges in the quantized graph's" % tuple(_scale_text(*cle_scale)))
        return LayerSensitivity(
            node=p.name, float_node=p.float_node.name, float_target=p.float_target, op=p.op,
            fix_pos=p.fix_pos, bitwidth=p.bitwidth, shape=self.shape, elements=self.n,
            sqnr_db=sqnr, cosine=cosine,
            float_min=self.f_min, float_max=self.f_max, graph_min=self.g_min, graph_max=self.g_max,
            range_min=-half * lsb, range_max=(half - 1) * lsb,
            clipped_fraction=self.clipped / self.n if self.n else 0.0,
            cle_rescaled=self.scale is not None, cle_scale=cle_scale, notes=notes,
        )


def _scale_text(lo: float, hi: float) -> List[str]:
    """The CLE scale range as text with the digits that tell its ends apart (``1..1`` said nothing: 0.9996..1.002)."""
    for digits in range(3, 10):
        a, b = "%.*g" % (digits, lo), "%.*g" % (digits, hi)
        if a != b or lo == hi:
            return [a, b]
    return [repr(lo), repr(hi)]
