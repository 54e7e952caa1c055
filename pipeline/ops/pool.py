"""Max, average and adaptive average pooling (``nndct_maxpool``, ``nndct_avgpool``,
``nndct_adaptive_avg_pool2d``). The DPU divides an average by a multiply and a shift; the quantizer
reproduces the factor (``pytorch_nndct/nn/modules/avgpool.py``, ``adaptive_avgpool.py``;
docs/arithmetic.md#average-pool-correction)."""
import math

import torch.nn.functional as F
from torch import nn

from .record import OpRecord, OpSpec

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

_DPU_Q = OpSpec("dpu", True, False, False)

RECORD = OpRecord(
    family="pool",
    specs={MAX_POOL: _DPU_Q, AVG_POOL: _DPU_Q, ADAPTIVEAVGPOOL2D: _DPU_Q},
    modules={nn.MaxPool2d: MAX_POOL, nn.AvgPool2d: AVG_POOL, nn.AdaptiveAvgPool2d: ADAPTIVEAVGPOOL2D},
    functions={F.max_pool2d: MAX_POOL, F.avg_pool2d: AVG_POOL, F.adaptive_avg_pool2d: ADAPTIVEAVGPOOL2D},
    signatures={
        MAX_POOL: (("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                   {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False}),
        AVG_POOL: (("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                    "divisor_override"),
                   {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                    "divisor_override": None}),
        ADAPTIVEAVGPOOL2D: (("input", "output_size"), {}),
    },
    approximation="an average multiplied by avgpool_dpu_scale(kh, kw): the DPU's 1/k as m / 2**s",
    source="pytorch_nndct/nn/modules/avgpool.py, adaptive_avgpool.py",
)
