"""The pools' simulation (``record.OpRecord.sim``): the average pools' DPU factor (``pytorch_nndct/nn/modules/
avgpool.py``, ``adaptive_avg_pool.py``; docs/arithmetic.md#average-pool-correction), the adaptive pool nndct
leaves unquantized, and calibration's fast non-overlapping max pool."""
import math
from typing import Any, Optional, Tuple

import torch
from torch import nn

from ..record import pair
from ..sim_support import SimForm, opaque_call

MAX_POOL = "nndct_maxpool"
AVG_POOL = "nndct_avgpool"
ADAPTIVEAVGPOOL2D = "nndct_adaptive_avg_pool2d"


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


def avgpool_kernel(module: Optional[nn.Module], fx_node: Any) -> Tuple[int, int]:
    """Kernel size (kh, kw) of an AvgPool2d call: its module's, or the functional call's ``kernel_size``."""
    if module is not None:
        return pair(module.kernel_size)
    return pair(fx_node.kwargs.get("kernel_size", fx_node.args[1] if len(fx_node.args) > 1 else None))


def adaptive_output_size(module: Optional[nn.Module], fx_node: Any) -> Any:
    """The output size of an adaptive average pool call (module or functional), as written."""
    if module is not None:
        return module.output_size
    return fx_node.kwargs.get("output_size", fx_node.args[1] if len(fx_node.args) > 1 else None)


def adaptive_scale(in_hw: Tuple[int, int], output_size: Any) -> Optional[float]:
    """The DPU factor of an adaptive average pool, or None when it stays unquantized.

    Args:
        in_hw: input (H, W).
        output_size: the pool's output size (int, pair, or pair with None entries).
    """
    out = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    out = tuple(in_hw[i] if o is None else int(o) for i, o in enumerate(out))
    if any(in_hw[i] % out[i] for i in range(2)):
        return None
    return avgpool_dpu_scale(in_hw[0] // out[0], in_hw[1] // out[1])


@opaque_call
def dpu_adaptive_factor(value: torch.Tensor, x: torch.Tensor, output_size: Any, whole: bool) -> torch.Tensor:
    """An adaptive average pool's output ``value`` times its DPU factor, decided from its input ``x`` (NCHW) as
    each forward sees it: the QAT trainable model's pool (``SimForm.train``).

    ``whole``: the real QAT's ``DPUAdaptiveAvgPool2d.forward`` (``pytorch_nndct/nn/quantization/modules/
    pooling.py``, the module ``ReplacePooling2d`` puts in place of an ``nn.AdaptiveAvgPool2d``): the factor of
    a kernel of the whole input (H, W), whatever the output size (it prints "DPU only supports
    output_size=1" for another), and never a plain average. Else nndct's test-mode rule
    (``deephi_AdaptiveAvgPool2d.forward``, :func:`adaptive_scale`): the factor of ``input // output``, or none
    where the output size does not divide the input's.

    Returns:
        ``value`` itself for a factor of 1.0 (or none), else a new float32 tensor ``value * factor``.
    """
    in_hw = (int(x.shape[-2]), int(x.shape[-1]))
    scale = avgpool_dpu_scale(*in_hw) if whole else adaptive_scale(in_hw, output_size)
    return value if scale is None or scale == 1.0 else value * scale


def tiled_max_pool(m: nn.MaxPool2d, x: Any) -> Optional[torch.Tensor]:
    """``m(x)`` for a non-overlapping max pool (stride == kernel, no padding or dilation), as the
    elementwise maximum of the ``kh * kw`` strided views of ``x``; None for any other pool.

    The values are exactly ``F.max_pool2d``'s (a maximum is exact; NaN propagates in both),
    several times faster on the CPU for small windows, whose NCHW kernel is scalar. The one
    possible difference is the sign of a zero when ``+0.0`` and ``-0.0`` tie in a window; every
    pool output reaches a quantization point (``fake_quant`` gives ``+0.0`` for both) before any
    use that could tell them apart, so calibration results are unchanged. Used in calibration
    only; the lowered test-mode model keeps ``nn.MaxPool2d``.

    Args:
        m: the MaxPool2d module.
        x: its input; not modified.

    Returns:
        A new contiguous float32 tensor (N, C, H // kh, W // kw), or None: another pool, or an
        input that is not a plain contiguous float32 NCHW tensor.
    """
    kh, kw = pair(m.kernel_size)
    stride = pair(m.stride if m.stride is not None else m.kernel_size)
    if (stride != (kh, kw) or kh * kw < 2 or pair(m.padding) != (0, 0) or pair(m.dilation) != (1, 1)
            or m.ceil_mode or m.return_indices or not isinstance(x, torch.Tensor) or x.dim() != 4
            or x.dtype != torch.float32):
        return None
    # plain NCHW only, where F.max_pool2d's output is plain NCHW too; a channels_last (or
    # ambiguous: C == 1, H == W == 1) input keeps F.max_pool2d and its output layout, which
    # later reductions depend on
    if not x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
        return None
    ho, wo = int(x.shape[2]) // kh, int(x.shape[3]) // kw
    if ho == 0 or wo == 0:
        return None
    views = [x[:, :, i:ho * kh:kh, j:wo * kw:kw] for i in range(kh) for j in range(kw)]
    out = torch.maximum(views[0], views[1])  # a new contiguous (N, C, ho, wo) tensor
    for view in views[2:]:
        torch.maximum(out, view, out=out)
    return out


def _run_maxpool(s):
    """Calibration: a module's non-overlapping pool as :func:`tiled_max_pool`; any other, torch's call."""
    out = tiled_max_pool(s.module, s.x) if s.module is not None else None
    return (out, True) if out is not None else None


def _lower_maxpool(lo):
    """Test mode: torch's own pool."""
    return lo.copy(), True


def _run_avgpool(s):
    """torch's average times :func:`avgpool_dpu_scale` of the kernel (``deephi_AvgPool2d``)."""
    kh, kw = avgpool_kernel(s.module, s.fx_node)
    return s.torch() * avgpool_dpu_scale(kh, kw), True


def _lower_avgpool(lo):
    return lo.mul(lo.copy(), avgpool_dpu_scale(*avgpool_kernel(lo.module, lo.fx_node))), True


def _run_adaptive(s):
    """torch's average times the DPU factor; where the output size does not divide the input's, the
    plain average, unquantized (``deephi_AdaptiveAvgPool2d.forward``)."""
    out = s.torch()
    scale = adaptive_scale((int(s.x.shape[2]), int(s.x.shape[3])), adaptive_output_size(s.module, s.fx_node))
    return (out, False) if scale is None else (out * scale, True)


def _lower_adaptive(lo):
    value = lo.copy()
    shape = lo.input_shape
    scale = adaptive_scale((int(shape[2]), int(shape[3])), adaptive_output_size(lo.module, lo.fx_node))
    return (value, False) if scale is None else (lo.mul(value, scale), True)


def _train_adaptive(lo):
    """QAT: the factor decided on every forward (:func:`dpu_adaptive_factor`); the real QAT's whole-input rule
    for a module (``ReplacePooling2d`` replaces modules only), quantized always (its output quantizer); the
    test-mode rule for ``exact_deploy`` and for ``F.adaptive_avg_pool2d``, quantized where the test-mode model
    quantizes it on the example."""
    out = adaptive_output_size(lo.module, lo.fx_node)
    shape = lo.input_shape
    whole = lo.trainable == "real" and lo.module is not None
    value = lo.call(dpu_adaptive_factor, lo.copy(), lo.x, out, whole)
    return value, whole or adaptive_scale((int(shape[2]), int(shape[3])), out) is not None


SIM = {MAX_POOL: SimForm(_run_maxpool, _lower_maxpool), AVG_POOL: SimForm(_run_avgpool, _lower_avgpool),
       ADAPTIVEAVGPOOL2D: SimForm(_run_adaptive, _lower_adaptive, train=_train_adaptive)}
