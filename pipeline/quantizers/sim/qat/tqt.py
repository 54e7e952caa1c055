"""TQT: the learnable power-of-two threshold of every quantized tensor in QAT (docs/qat.md#tqt).

One quantizer per quantized tensor (a parameter, the network input, a node's output): a scalar
parameter ``log_threshold`` (log2 of the threshold t), per tensor, symmetric. For bit width b::

    fix_pos = b - 1 - ceil(log_threshold)
    q(x)    = clamp(R(x * 2**fix_pos), -2**(b-1), 2**(b-1) - 1) * 2**-fix_pos

R is std_round for parameters and half_up for inputs and outputs: ``pipeline.fixpoint``,
the rounding PTQ uses, so equal fix positions give equal numbers. The backward is the real
quantizer's hand-written one (``TQTQuantize.backward`` in vai_q_pytorch 3.5
``nn/quantization/ops/tqt_ops.py``; Jain et al., "Trained Quantization Thresholds", arXiv
1903.08066, eqs. 7-8), operation for operation, so the gradients carry the same bits: its rounding
sends positive ties to even (``torch.round``) and negative ties toward zero, which is neither
forward rule.

The first forward with quantization on ("warm-up") sets ``log_threshold`` from that batch: the
mean-plus-3-sigma rule for parameters, the KL-J histogram search (Settle et al., arXiv 1805.07941,
Algorithm 1) for activations, in numpy as the real quantizer computes them (``TQTQuantizer.
_init_threshold`` in ``nn/quantization/modules/tqt.py``). Under ``torch.distributed`` the
threshold of rank 0 is broadcast, so every rank starts from the same one (the real quantizer
lets each rank warm up on its own batch).
"""
import math
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from ....errors import QuantizationError
from .... import fixpoint

PARAM, INPUT, OUTPUT = "param", "input", "output"
ROUNDING = {PARAM: "std_round", INPUT: "half_up", OUTPUT: "half_up"}


class TQTFunction(torch.autograd.Function):
    """``q(x)`` with the TQT gradients for ``x`` and ``log_threshold`` (module docstring).

    forward(x, log_threshold (1-element float32), domain (1-element float32, 2**(b-1)), method,
    fix_pos (int: the one ``log_threshold`` gives, or the position that will ship), bitwidth).
    Returns a new tensor; ``x`` is never written.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, logt: torch.Tensor, domain: torch.Tensor, method: str,
                fix_pos: int, bitwidth: int) -> torch.Tensor:
        scale = fixpoint.pow2(-fix_pos) * torch.ones_like(logt)
        quant_max = domain - 1
        quant_min = -domain
        ctx.save_for_backward(x, scale, quant_max, quant_min, logt)
        return fixpoint.fake_quant(x, fix_pos, bitwidth, method)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):  # type: ignore[override]
        # The real backward's values element for element, in fewer passes: x / scale is exact (a power of
        # two); its rounding (torch.round, but negative ties toward zero) is torch.round plus one where a
        # negative tie went down; one where() picks (r - v), n or p, then the real product order
        # ((g * scale) * ln2) * term and the same sum over the whole tensor.
        x, scale, quant_max, quant_min, logt = ctx.saved_tensors
        scaled_x = x / scale
        rounded = torch.round(scaled_x)
        rounded += ((scaled_x - rounded) == 0.5) & (scaled_x < 0)
        is_lt_min = rounded < quant_min
        is_gt_max = rounded > quant_max
        inside = ~(is_lt_min | is_gt_max)
        term = torch.where(inside, rounded - scaled_x, torch.where(is_lt_min, quant_min, quant_max))
        grad_logt = (grad_output * scale * math.log(2) * term).sum().expand_as(logt)
        grad_x = grad_output * inside
        return grad_x, grad_logt, None, None, None, None


def three_sigma(x: np.ndarray) -> float:
    """``|mean(x + 1e-6)| + 3 std(x)``: the parameters' warm-up. The mean and the deviation are numpy's
    float32 reductions (float16 data computed in float32); they are combined in float64, as numpy 1.x
    (the Vitis AI image's) promotes ``3 * float32 scalar``, whatever numpy runs here."""
    y = x.astype(np.float32) if x.dtype == np.float16 else x
    return abs(float(np.mean(y + 1e-6))) + 3 * float(np.std(y))


def kl_j(x: np.ndarray, bitwidth: int) -> Any:
    """The activations' warm-up threshold: a histogram of |x| on [0, max|x|] with numpy's ``'sqrt'``
    bin count; for each candidate bin count i > 2**(b-1), the CDF re-interpolated through 2**(b-1)
    levels; the threshold ``(i + 0.5) * bin_width`` of the least symmetric KL divergence; max|x|
    when there are too few bins. Returns a numpy scalar."""
    mx = np.max(np.abs(x))
    y = x.astype(np.float32) if x.dtype == np.float16 else x
    hist, bin_edges = np.histogram(np.abs(y), 'sqrt', range=(0, mx), density=True)
    hist = hist.astype(x.dtype)
    bin_edges = bin_edges.astype(x.dtype)
    pdf = hist / np.sum(hist)
    cdf = np.cumsum(pdf)
    n = pow(2, bitwidth - 1)
    if n + 1 > len(bin_edges) - 1:
        return bin_edges[-1]
    threshold = []  # type: Any
    d = []  # type: Any
    nonzero = np.nonzero(cdf)
    for i in range(n + 1, len(bin_edges), 1):
        threshold = np.concatenate((threshold, [(i + 0.5) * (bin_edges[1] - bin_edges[0])]))
        p = np.copy(cdf)
        p[i - 1:] = 1
        p_interp = np.interp(np.linspace(0.0, 1.0, n), np.linspace(0.0, 1.0, i), p[:i])
        q_interp = np.interp(np.linspace(0.0, 1.0, i), np.linspace(0.0, 1.0, n), p_interp)
        q = np.copy(p)
        q[:i] = q_interp
        a, b = cdf[nonzero], q[nonzero]
        d = np.concatenate((d, [np.sum((a - b) * np.log2(a / b))]))
    return threshold[np.argmin(d)]


class TQTQuantizer(nn.Module):
    """The quantizer of one tensor (module docstring), with the real ``TQTQuantizer``'s state_dict
    (``log_threshold``, ``bitwidth``, ``warmup_enabled``) and switches.

    Args:
        bitwidth: b (2..16).
        tensor_type: ``"param"`` (std_round, 3-sigma warm-up), ``"input"`` or ``"output"``
            (half_up, KL-J warm-up).

    Attributes:
        log_threshold: ``nn.Parameter`` of shape (1,), float32.
        fix_pos_override: None, or the fix position this quantizer uses instead of its own (the
            ``exact_deploy`` mode sets the one that will ship; the gradient of ``log_threshold``
            is then taken at that position).
        name: the quant_info key it stands for (set by the trainable model).
    """

    def __init__(self, bitwidth: int, tensor_type: str) -> None:
        super().__init__()
        if tensor_type not in ROUNDING:
            raise ValueError("tensor_type must be one of %s, got %r" % (sorted(ROUNDING), tensor_type))
        self.tensor_type = tensor_type
        self.method = ROUNDING[tensor_type]
        self.register_buffer("quant_enabled", torch.tensor([1], dtype=torch.uint8), persistent=False)
        self.register_buffer("bitwidth", torch.tensor([bitwidth], dtype=torch.uint8))
        self.register_buffer("domain", torch.tensor([2 ** (bitwidth - 1)]).float(), persistent=False)
        self.log_threshold = nn.Parameter(torch.tensor([0.0]))
        self.register_buffer("warmup_enabled", torch.tensor([1], dtype=torch.uint8))
        self.fix_pos_override = None  # type: Optional[int]
        self.name = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.quant_enabled[0] == 0:
            return x
        if self.warmup_enabled[0] == 1:
            self.warm_up(x)
        return TQTFunction.apply(x, self.log_threshold, self.domain, self.method, self.fix_pos(),
                                 int(self.bitwidth[0]))

    def warm_up(self, x: torch.Tensor) -> None:
        """Set ``log_threshold`` from ``x`` (module docstring) and end the warm-up; under
        torch.distributed rank 0's value is broadcast to every rank.

        Raises:
            QuantizationError: ``x`` holds NaN or Inf (named; nothing is changed)."""
        bad = int((~torch.isfinite(x.detach())).sum())
        if bad:
            raise QuantizationError("QAT: the warm-up batch of %s holds %d NaN/Inf value(s) of %d, so no threshold can "
                                    "be set from it: check the data (and the model's float output) for NaN/Inf"
                                    % (self.name or self.tensor_type, bad, x.numel()))
        self.warmup_enabled[0] = 0
        data = x.detach().cpu().numpy()
        th = three_sigma(data) if self.tensor_type == PARAM else kl_j(data, int(self.bitwidth[0]))
        self.log_threshold.data[0] = torch.log2(torch.tensor([th], dtype=x.dtype, device=x.device))[0]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.broadcast(self.log_threshold.data, 0)

    def own_fix_pos(self) -> int:
        """``b - 1 - ceil(log_threshold)``: the position ``log_threshold`` gives (quant_info's raw value).

        Raises:
            QuantizationError: ``log_threshold`` is NaN or infinite (the training diverged), naming the tensor.
        """
        value = float(self.log_threshold.detach()[0])
        if not math.isfinite(value):
            raise QuantizationError("QAT: the threshold of %s is %s: the training diverged (lower the thresholds' "
                                    "learning rate, check the loss for NaN); restart from the last good checkpoint"
                                    % (self.name or self.tensor_type, value))
        return int(int(self.bitwidth[0]) - 1 - math.ceil(value))

    def fix_pos(self) -> int:
        """The position the forward uses: ``fix_pos_override`` when set, else ``own_fix_pos()``."""
        return self.own_fix_pos() if self.fix_pos_override is None else self.fix_pos_override

    def import_fix_pos(self, bitwidth: int, fix_pos: int) -> None:
        """Start from a calibration's fix position: ``log_threshold = b - 1 - fix_pos``, no warm-up."""
        if not (isinstance(bitwidth, int) and isinstance(fix_pos, int)):
            raise ValueError("bitwidth and fix position must be integers, got (%r, %r)" % (bitwidth, fix_pos))
        self.bitwidth[0] = bitwidth
        self.log_threshold.data = torch.tensor([bitwidth - 1 - fix_pos], dtype=self.log_threshold.dtype,
                                               device=self.log_threshold.device)
        self.warmup_enabled[0] = 0

    def extra_repr(self) -> str:
        return "%s, bitwidth=%d, rounding=%s" % (self.name or self.tensor_type, int(self.bitwidth[0]), self.method)
