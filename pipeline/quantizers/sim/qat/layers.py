"""The trainable conv/linear layer of QAT: float weights, an optional BatchNorm2d trained beside the
conv (simulated folding), and the TQT quantizers of the folded weight and bias (docs/qat.md#bn-folding).

Follows the real quantizer's ``QuantizedConvBatchNorm2d`` / ``QuantizedConv2d`` / ``QuantizedLinear``
(vai_q_pytorch 3.5 ``nn/quantization/modules/conv_fused.py``, ``conv.py``, ``linear.py``), which
adapt Krishnamoorthi, "Quantizing deep convolutional networks for efficient inference", arXiv
1806.08342, section 3.2.2:

- training with BN not frozen: an extra float conv gives the batch mean and (biased) variance,
  which update the running statistics (momentum, unbiased variance);
  ``y = conv(x, Q_w(W * gamma / sigma_run)) * (sigma_run / sigma_batch) + Q_b(beta - gamma * mu_batch / sigma_batch)``;
- BN frozen (``freeze_bn_stats``) or eval: ``y = conv(x, Q_w(W * s), Q_b(beta - gamma * (mu_run - b) / sigma_run))``
  with ``s = gamma / sigma_run``: the folded conv.

``exact`` (the ``exact_deploy`` mode): in the second case the weight and bias take the VALUES of the
deploy-time fold (``pipeline.fx.rewrites.fold_bn_params``, nndct's numpy order of operations), the
gradient still flowing through the formula above, so the eval-mode layer computes exactly what the
deployed model computes.
"""
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from ....errors import QuantizationError
from ....fx.rewrites import fold_bn_params
from .tqt import PARAM, TQTQuantizer


class ShippedValue(torch.autograd.Function):
    """``shipped`` as the value, the gradient to ``surrogate`` (same shape)."""

    @staticmethod
    def forward(ctx: Any, shipped: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
        return shipped.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):  # type: ignore[override]
        return None, grad


class QatLayer(nn.Module):
    """One conv (``nn.Conv2d``, ``nn.ConvTranspose2d``) or ``nn.Linear`` for QAT (module docstring).

    Args:
        float_module: the float layer (copied; the caller's is never touched).
        bn: the BatchNorm2d folded into it at deploy time, or None (copied).
        bitwidth: bit width of its weight and bias.
        exact: see the module docstring.

    Attributes (state_dict keys): ``weight``, ``bias`` (None without one), ``bn.*`` (with a BN),
    ``weight_quantizer.*``, ``bias_quantizer.*`` (present when a bias ships: the layer's own or
    the folded BN's). ``bn_frozen``, ``conv_bn_fused``: the switches.

    Input/output: float32 tensors as the float layer takes and returns them.

    Raises:
        QuantizationError: a conv with a padding mode other than zeros.
    """

    def __init__(self, float_module: nn.Module, bn: Optional[nn.BatchNorm2d], bitwidth: int, exact: bool) -> None:
        super().__init__()
        if isinstance(float_module, (nn.Conv2d, nn.ConvTranspose2d)) and float_module.padding_mode != "zeros":
            raise QuantizationError("QAT: conv with padding_mode=%r; the quantizer's QAT trains zero-padded convs "
                                    "only: pad with an explicit nn.ZeroPad2d/F.pad or padding_mode='zeros'"
                                    % float_module.padding_mode)
        self.kind = type(float_module).__name__
        self.hyper = {k: getattr(float_module, k) for k in
                      ("stride", "padding", "dilation", "groups", "output_padding") if hasattr(float_module, k)}
        self.weight = nn.Parameter(float_module.weight.detach().clone())
        self.bias = None if float_module.bias is None else nn.Parameter(float_module.bias.detach().clone())
        self.bn = None if bn is None else _copy_bn(bn)
        self.exact = exact
        self.weight_quantizer = TQTQuantizer(bitwidth, PARAM)
        self.bias_quantizer = TQTQuantizer(bitwidth, PARAM) if (self.bias is not None or bn is not None) else None
        self.bn_frozen = False
        self.conv_bn_fused = False
        self.no_stat_update = False  # set for a pass that must not move the running statistics
        self.out_dim = 1 if self.kind == "ConvTranspose2d" else 0

    def _op(self, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
        h = self.hyper
        if self.kind == "Conv2d":
            return F.conv2d(x, w, b, h["stride"], h["padding"], h["dilation"], h["groups"])
        if self.kind == "ConvTranspose2d":
            return F.conv_transpose2d(x, w, b, h["stride"], h["padding"], h["output_padding"], h["groups"],
                                      h["dilation"])
        return F.linear(x, w, b)

    def _per_channel(self, c: torch.Tensor, rank: int, dim: int) -> torch.Tensor:
        shape = [1] * rank
        shape[dim] = -1
        return c.view(*shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        if bn is None or self.conv_bn_fused:
            b = None if self.bias is None else self.bias_quantizer(self.bias)
            return self._op(x, self.weight_quantizer(self.weight), b)
        gamma, beta = bn.weight, bn.bias
        rank = self.weight.dim()
        if self.training and not self.bn_frozen:
            batch_mean, batch_var = self._batch_stats(self._op(x, self.weight, None))
            recip_sigma_batch = torch.rsqrt(batch_var + bn.eps)
            with torch.no_grad():
                running_sigma = torch.sqrt(bn.running_var + bn.eps)
            w_q = self.weight_quantizer(self.weight * self._per_channel(gamma / running_sigma, rank, self.out_dim))
            recip_c = self._per_channel(running_sigma * recip_sigma_batch, x.dim(), 1)
            b_q = self._per_channel(self.bias_quantizer(beta - gamma * batch_mean * recip_sigma_batch), x.dim(), 1)
            y = self._op(x, w_q, None)
            return y.mul_(recip_c).add_(b_q)
        with torch.no_grad():
            recip_running_sigma = torch.rsqrt(bn.running_var + bn.eps)
        w = self.weight * self._per_channel(gamma * recip_running_sigma, rank, self.out_dim)
        mean_corrected = bn.running_mean - (self.bias if self.bias is not None else 0)
        b = beta - gamma * mean_corrected * recip_running_sigma
        if self.exact:
            w_ship, b_ship = self.folded()
            w, b = ShippedValue.apply(w_ship, w), ShippedValue.apply(b_ship, b)
        return self._op(x, self.weight_quantizer(w), self.bias_quantizer(b))

    def _batch_stats(self, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        bn = self.bn
        c = bn.num_features
        flat = y.transpose(0, 1).contiguous().view(c, -1)
        batch_mean = flat.mean(1)
        batch_var = flat.var(1, unbiased=False)
        if self.no_stat_update:
            return batch_mean, batch_var
        bn.num_batches_tracked += 1
        with torch.no_grad():
            biased_batch_mean = batch_mean + (self.bias if self.bias is not None else 0)
            n = y.numel() / c
            corrected_var = batch_var * (n / float(n - 1))
            momentum = bn.momentum
            if momentum is None:
                momentum = 1. / float(bn.num_batches_tracked)
            bn.running_mean.mul_(1 - momentum).add_(momentum * biased_batch_mean)
            bn.running_var.mul_(1 - momentum).add_(momentum * corrected_var)
        return batch_mean, batch_var

    def folded(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """The weight and bias the deployed model computes from this layer's float values (BN folded
        as the deploy-time capture folds it), detached."""
        with torch.no_grad():
            w, b = fold_bn_params(self.weight.detach(), None if self.bias is None else self.bias.detach(),
                                  self.bn, self.out_dim)
        return w, b

    def freeze_bn_stats(self) -> None:
        """Train on with the running statistics (the folded conv); they stop moving."""
        self.bn_frozen = True

    def fuse_conv_bn(self) -> None:
        """Fold the BN into ``weight`` and ``bias`` for good (deploy-time fold); the layer is then a
        plain quantized conv. ``to_deployable`` refuses a model after this."""
        if self.bn is None or self.conv_bn_fused:
            return
        w, b = self.folded()
        self.weight.data = w
        self.bias = nn.Parameter(b)
        self.conv_bn_fused = True

    def float_state(self) -> Dict[str, torch.Tensor]:
        """The float layer's and its BN's state under their own keys (``weight``, ``bias``,
        ``bn.<name>``), detached copies."""
        out = {"weight": self.weight.detach().clone()}
        if self.bias is not None:
            out["bias"] = self.bias.detach().clone()
        if self.bn is not None:
            out.update(("bn." + k, v.detach().clone()) for k, v in self.bn.state_dict().items())
        return out

    def extra_repr(self) -> str:
        return "%s%s, bn_frozen=%s, exact=%s" % (self.kind, "+BatchNorm2d" if self.bn is not None else "",
                                                  self.bn_frozen, self.exact)


def _copy_bn(bn: nn.Module) -> nn.BatchNorm2d:
    if type(bn) is not nn.BatchNorm2d:
        raise QuantizationError("QAT: %s folded into a conv; QAT trains nn.BatchNorm2d only (the real quantizer "
                                "refuses other BatchNorm classes): use nn.BatchNorm2d" % type(bn).__name__)
    new = nn.BatchNorm2d(bn.num_features, eps=bn.eps, momentum=bn.momentum)
    with torch.no_grad():
        if bn.affine:
            new.weight.copy_(bn.weight)
            new.bias.copy_(bn.bias)
        new.running_mean.copy_(bn.running_mean)
        new.running_var.copy_(bn.running_var)
        new.num_batches_tracked.copy_(bn.num_batches_tracked)
    return new
