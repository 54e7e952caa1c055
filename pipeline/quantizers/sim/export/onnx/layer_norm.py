"""ONNX of ``nn.LayerNorm`` (the lowered model's layer norms) as torch's CPU kernel computes it, step
for step, so that ONNX Runtime gives torch's float32 bits (both flavours write it the same way). The
layer norm unit's ONNX form (``pipeline/ops/layer_norm.py``) calls it through the builder
(``Builder.layer_norm_kernel``, ``Builder.layer_norm_rows``).

torch's float32 layer norm on the CPU (``LayerNormKernelImpl``, ``aten/src/ATen/native/cpu``)
computes, per row of the ``N`` normalized elements, in one of two ways (``KERNELS``):

1. mean and variance with ``RowwiseMoments``: a Welford update per lane over 8 lanes (element
   ``i`` in lane ``i % 8``, the ``N // 8`` full groups of 8) in chunks of 16 groups, each chunk
   merged into a cascade of partial moments (``AddMomentsVec``, pairwise by chunk index), then a
   scalar Welford over the ``N % 8`` tail, then the 8 lanes merged into it one by one
   (``AddMoments``); ``var = m2 / N``; ``rstd = 1 / sqrt(var + eps)`` (a correctly rounded root);
2. ``CENTERED`` (torch 2; measured bit for bit against torch 2.13 on AVX2 and AVX-512 machines):
   ``t = (x - mean) * rstd``, ``y = t * gamma + beta`` (``(x - mean) * rstd + beta`` without gamma,
   ``t * gamma + 0`` without beta). Its builds contract some ``a * b + c`` into one fused
   multiply-add (one rounding): the per-group Welford updates, both updates of the scalar lane
   merge, the variance update of the cascade merge and the final ``t * gamma + beta``; not the mean
   update of the cascade merge nor the scalar tail (each measured, rows of 1 to 2100 elements);
3. ``SCALE_BIAS`` (torch 1.13, the Vitis AI 3.5 image's; measured bit for bit against torch 1.13.1's
   AVX2 and AVX-512 kernels, rows of 1 to 2100 elements, with and without gamma and beta; its moments
   also on rows of up to 4100): the moments with no
   step contracted (its ``AddMomentsVec`` adds ``m2_add + ((delta * delta) * c) * m0`` to ``m2``),
   then ``scale = rstd``, ``bias = -rstd * mean``, ``y = (x * scale + bias) * gamma + beta`` with
   both steps fused (gamma 1 and beta 0 where absent).

ONNX has no FMA operator: ``fma`` below computes ``a * b`` exactly in float64, adds
``c`` (TwoSum keeps the error of that addition exactly) and rounds to float32, correcting the one
case where rounding twice differs from rounding once (the float64 sum exactly halfway between two
float32 values and the dropped error nonzero): an exact FMA for finite values.

The same algorithm runs on torch tensors (``TorchOps``) and as ONNX nodes (``OnnxOps``); before a
layer norm is written, the torch run of each kernel is compared with ``F.layer_norm`` on probe rows
of the node's size, weights and eps (``check_kernel``) and the one that matches is written; a torch
whose kernel is neither (the non-vectorized ``ATEN_CPU_CAPABILITY=default`` build of either torch,
which contracts nothing) is refused with that reason rather than written inexactly. The graph is unrolled: about 45 ONNX nodes per group of 8 elements.
"""
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from .....cpu import cpu_capability
from .....ops.onnx_form import Unsupported

if TYPE_CHECKING:  # annotations only: the builder calls this module
    from .builder import Builder

LANES = 8  # float lanes of torch's Vectorized<float> in the kernels measured (AVX2 and AVX-512 alike)
CENTERED = "centered"  # torch 2 (2.13 measured), AVX2 and AVX-512 builds
SCALE_BIAS = "scale_bias"  # torch 1.13 (1.13.1 measured), AVX2 and AVX-512 builds
KERNELS = (CENTERED, SCALE_BIAS)  # in the order check_kernel tries them
CHUNK = 16  # RowwiseMoments' kChunkSize: groups of LANES per cascade chunk
PROBE_ROWS = 256


def _f32(v: float) -> np.float32:
    return np.float32(v)


class TorchOps:
    """The algorithm's steps on float32 torch tensors (the probe that checks the kernel)."""

    def col(self, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        return x[:, start:stop]

    def const(self, v: np.float32) -> torch.Tensor:
        return torch.tensor(float(v), dtype=torch.float32)

    def sub(self, a, b):
        return a - b

    def add(self, a, b):
        return a + b

    def mul(self, a, b):
        return a * b

    def div(self, a, b):
        # a true division: torch divides by a 0-d tensor as a product with its reciprocal
        return a / (b.expand(a.shape) if b.dim() == 0 else b)

    def sqrt(self, a):
        # correctly rounded (float64's root rounded to float32 is); torch's float32 sqrt on the CPU
        # can be an ulp off
        return torch.sqrt(a.double()).float()

    def zeros_like(self, a):
        return a - a

    def fma(self, a, b, c):
        s = a.double() * b.double()  # exact: 24 + 24 bits
        c = c.double()
        t = s + c
        bp = t - s
        e = (s - (t - bp)) + (c - bp)  # TwoSum: s + c == t + e exactly
        r = t.float()
        d = t - r.double()  # exact
        r2 = r.double() + 2 * d  # the other float32 neighbour when t is halfway
        halfway = (d != 0) & (r2.float().double() == r2)
        return torch.where(halfway & (e * d > 0), r2.float(), r)


class OnnxOps:
    """The same steps as ONNX nodes of ``b``; tensors are ONNX names, names start with ``prefix``."""

    def __init__(self, b: "Builder", prefix: str) -> None:
        self.b = b
        self.prefix = prefix
        self.count = 0

    def _name(self, what: str) -> str:
        self.count += 1
        return "%s/%s_%d" % (self.prefix, what, self.count)

    def _op(self, op_type: str, inputs, **attrs) -> str:
        return self.b.op(op_type, inputs, self._name(op_type.lower()), **attrs)

    def col(self, x: str, start: int, stop: int) -> str:
        b = self.b
        return self._op("Slice", [x, b.ints(self._name("start"), [start]), b.ints(self._name("stop"), [stop]),
                                  b.ints(self.prefix + "/axes", [1])])

    def const(self, v: np.float32) -> str:
        return self.b.scalar(self._name("const"), float(v))

    def _double(self, v: float) -> str:
        return self.b.init(self._name("dconst"), np.array(v, dtype=np.float64))

    def sub(self, a, b):
        return self._op("Sub", [a, b])

    def add(self, a, b):
        return self._op("Add", [a, b])

    def mul(self, a, b):
        return self._op("Mul", [a, b])

    def div(self, a, b):
        return self._op("Div", [a, b])

    def sqrt(self, a):
        from onnx import TensorProto
        root = self._op("Sqrt", [self._op("Cast", [a], to=TensorProto.DOUBLE)])
        return self._op("Cast", [root], to=TensorProto.FLOAT)

    def zeros_like(self, a):
        return self._op("Sub", [a, a])

    def fma(self, a, b, c):
        from onnx import TensorProto
        dbl, flt = TensorProto.DOUBLE, TensorProto.FLOAT
        s = self._op("Mul", [self._op("Cast", [a], to=dbl), self._op("Cast", [b], to=dbl)])
        c = self._op("Cast", [c], to=dbl)
        t = self._op("Add", [s, c])
        bp = self._op("Sub", [t, s])
        e = self._op("Add", [self._op("Sub", [s, self._op("Sub", [t, bp])]), self._op("Sub", [c, bp])])
        r = self._op("Cast", [t], to=flt)
        d = self._op("Sub", [t, self._op("Cast", [r], to=dbl)])
        r2 = self._op("Add", [self._op("Cast", [r], to=dbl), self._op("Mul", [d, self._double(2.0)])])
        r2f = self._op("Cast", [r2], to=flt)
        zero = self._double(0.0)
        halfway = self._op("And", [self._op("Not", [self._op("Equal", [d, zero])]),
                                   self._op("Equal", [self._op("Cast", [r2f], to=dbl), r2])])
        up = self._op("Greater", [self._op("Mul", [e, d]), zero])
        return self._op("Where", [self._op("And", [halfway, up]), r2f, r])


def _mad(ops: Any, fused: bool, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c``: one rounding where the kernel contracts it (``fused``), else two."""
    return ops.fma(a, b, c) if fused else ops.add(ops.mul(a, b), c)


def _add_moments(ops: Any, fused: bool, m0_add: int, m1_add: Any, m2_add: Any, m0: int, m1: Any, m2: Any):
    """``AddMoments`` (the scalar merge of a lane into the row's moments): merge ``(m0_add,
    m1_add, m2_add)`` into ``(m0, m1, m2)``: ``m1 + c * delta``, ``(m2_add + (delta * delta * c) * m0) + m2``,
    the two ``a * b + c`` fused where ``fused`` (torch 2's builds)."""
    n = m0 + m0_add
    c = _f32(0) if n == 0 else _f32(_f32(m0_add) / _f32(n))
    delta = ops.sub(m1_add, m1)
    m1 = _mad(ops, fused, ops.const(c), delta, m1)
    ddc = ops.mul(ops.mul(delta, delta), ops.const(c))
    m2 = ops.add(_mad(ops, fused, ddc, ops.const(_f32(m0)), m2_add), m2)
    return n, m1, m2


def _add_moments_vec(ops: Any, kernel: str, m0_add: int, m1_add: Any, m2_add: Any, m0: int, m1: Any, m2: Any):
    """``AddMomentsVec`` (the 8-lane merge of the cascade): ``m1 + c * delta`` unfused; torch 2:
    ``(m2 + m2_add) + (delta * c) * (delta * m0)`` with the last step fused; torch 1.13:
    ``m2 + (m2_add + ((delta * delta) * c) * m0)``, nothing fused."""
    n = m0 + m0_add
    c = _f32(0) if n == 0 else _f32(_f32(m0_add) / _f32(n))
    delta = ops.sub(m1_add, m1)
    m1 = ops.add(m1, ops.mul(ops.const(c), delta))
    if kernel == CENTERED:
        m2 = ops.fma(ops.mul(delta, ops.const(c)), ops.mul(delta, ops.const(_f32(m0))), ops.add(m2, m2_add))
    else:
        m2 = ops.add(m2, ops.add(m2_add, ops.mul(ops.mul(ops.mul(delta, delta), ops.const(c)), ops.const(_f32(m0)))))
    return n, m1, m2


def _ceil_log2(x: int) -> int:
    """torch's ``utils::CeilLog2`` (x - 1 for x <= 2)."""
    return x - 1 if x <= 2 else (x - 1).bit_length()


def _lane_moments(ops: Any, kernel: str, x: Any, groups: int):
    """``RowwiseMoments``' vectorized part: the 8-lane moments of the first ``groups * 8``
    elements of each row, chunk by chunk (a Welford update per group of 8, fused in torch 2's
    kernel), the chunks merged through the cascade's stack. Returns (m1, m2), each (M, 8)."""
    fused = kernel == CENTERED
    zeros = ops.zeros_like(ops.col(x, 0, LANES))
    chunks = -(-groups // CHUNK)
    depth = _ceil_log2(chunks)
    stack = [(0, zeros, zeros) for _ in range(max(depth, 1))]
    for i in range(chunks):
        m1 = m2 = zeros
        for j in range(min(CHUNK, groups - i * CHUNK)):
            start = (i * CHUNK + j) * LANES
            xj = ops.col(x, start, start + LANES)
            d = ops.sub(xj, m1)
            m1 = _mad(ops, fused, d, ops.const(_f32(_f32(1) / _f32(j + 1))), m1)
            m2 = _mad(ops, fused, d, ops.sub(xj, m1), m2)
        stack[0] = _add_moments_vec(ops, kernel, min(CHUNK, groups - i * CHUNK), m1, m2, *stack[0])
        mask, level = i + 1, 1
        while level < depth and mask & 1 == 0:
            stack[level] = _add_moments_vec(ops, kernel, *stack[level - 1], *stack[level])
            stack[level - 1] = (0, zeros, zeros)
            mask >>= 1
            level += 1
    for level in range(1, depth):
        stack[0] = _add_moments_vec(ops, kernel, *stack[level], *stack[0])
    return stack[0][1], stack[0][2]


def layer_norm_rows(ops: Any, x: Any, n_elems: int, gamma: Any, beta: Any, eps: float, kernel: str = CENTERED) -> Any:
    """The kernel's float32 layer norm of the rows of ``x`` (M, n_elems) with ``gamma``/``beta``
    ((n_elems,) or None) on ``ops`` (TorchOps or OnnxOps); returns y (M, n_elems), a new tensor
    (TorchOps) or the name of the last node (OnnxOps).

    Args:
        kernel: which of torch's CPU kernels to follow (``KERNELS``, module docstring):
            ``CENTERED`` (torch 2) or ``SCALE_BIAS`` (torch 1.13); ``check_kernel`` says which this
            torch runs.

    Raises:
        ValueError: an unknown ``kernel``.
    """
    if kernel not in KERNELS:
        raise ValueError("layer_norm_rows: kernel must be one of %s, got %r" % (", ".join(KERNELS), kernel))
    fused = kernel == CENTERED
    groups = n_elems // LANES
    if groups:
        lane_m1, lane_m2 = _lane_moments(ops, kernel, x, groups)
    m0 = 0
    m1 = m2 = ops.zeros_like(ops.col(x, 0, 1))
    for i in range(groups * LANES, n_elems):
        xi = ops.col(x, i, i + 1)
        d = ops.sub(xi, m1)
        m0 += 1
        m1 = ops.add(m1, ops.div(d, ops.const(_f32(m0))))
        m2 = ops.add(m2, ops.mul(d, ops.sub(xi, m1)))  # not contracted (measured, both kernels)
    if groups:
        for lane in range(LANES):
            m0, m1, m2 = _add_moments(ops, fused, groups, ops.col(lane_m1, lane, lane + 1),
                                      ops.col(lane_m2, lane, lane + 1), m0, m1, m2)
    var = ops.div(m2, ops.const(_f32(n_elems)))
    rstd = ops.div(ops.const(_f32(1)), ops.sqrt(ops.add(var, ops.const(_f32(eps)))))
    if kernel == SCALE_BIAS:  # torch 1.13: (x * rstd + (-rstd * mean)) * gamma + beta, both steps fused
        bias = ops.mul(ops.sub(ops.zeros_like(rstd), rstd), m1)  # -rstd exactly: rstd > 0
        v = ops.fma(x, rstd, bias)
        if gamma is not None and beta is not None:
            return ops.fma(v, gamma, beta)
        if gamma is not None:  # fma(v, gamma, 0): the product rounded, -0 made +0
            return ops.add(ops.mul(v, gamma), ops.zeros_like(v))
        return ops.add(v, ops.zeros_like(v) if beta is None else beta)  # fma(v, 1, beta)
    centered = ops.sub(x, m1)
    if gamma is None and beta is not None:  # the kernel's gamma of 1 folds into the fused step
        return ops.fma(centered, rstd, beta)
    t = ops.mul(centered, rstd)
    if gamma is not None and beta is not None:
        return ops.fma(t, gamma, beta)
    if gamma is not None:  # + 0: a product of -0 is +0 in the kernel
        return ops.add(ops.mul(t, gamma), ops.zeros_like(t))
    return t


def check_kernel(n_elems: int, gamma: Optional[torch.Tensor], beta: Optional[torch.Tensor], eps: float) -> str:
    """Which of ``KERNELS`` this torch's CPU ``F.layer_norm`` computes: the first whose
    ``layer_norm_rows`` on torch tensors gives ``F.layer_norm``'s bits on probe rows (8-bit codes at
    a few fix positions, fixed seed) of this size, weights and eps.

    Raises:
        Unsupported: none does (``ATEN_CPU_CAPABILITY=default``, a torch not measured), with the torch
            version and CPU capability.
    """
    g = torch.Generator().manual_seed(n_elems)
    codes = torch.randint(-128, 128, (PROBE_ROWS, n_elems), generator=g).float()
    x = codes * torch.pow(2.0, -torch.randint(0, 8, (PROBE_ROWS, 1), generator=g).float())
    with torch.no_grad():
        want = F.layer_norm(x, (n_elems,), gamma, beta, eps)
        for kernel in KERNELS:
            got = layer_norm_rows(TorchOps(), x, n_elems, gamma, beta, eps, kernel)
            if torch.equal(want.view(torch.int32), got.view(torch.int32)):
                return kernel
    raise Unsupported("this torch's CPU layer_norm kernel (torch %s, capability %s) computes otherwise than "
                      "both the exact ONNX lowering reproduces (torch 2's and torch 1.13's vectorized, FMA-contracted "
                      "ones)" % (torch.__version__, cpu_capability()))
