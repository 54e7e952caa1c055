"""LeakyReLU (``nndct_leaky_relu``): the DPU's slope is 26/256 whatever the model says; the quantizer
forces it (``pytorch_nndct/nn/modules/leaky_relu.py``; docs/arithmetic.md#leakyrelu-slope)."""
import torch.nn.functional as F
from torch import nn

from .record import OpRecord, OpSpec

LEAKY_RELU = "nndct_leaky_relu"
LEAKY_SLOPE = 0.1015625  # 26 / 256

RECORD = OpRecord(
    family="leaky_relu",
    specs={LEAKY_RELU: OpSpec("dpu", False, False, True)},
    modules={nn.LeakyReLU: LEAKY_RELU},
    functions={F.leaky_relu: LEAKY_RELU},
    signatures={LEAKY_RELU: (("input", "negative_slope"), {"negative_slope": 0.01})},
    approximation="negative slope 26/256 = 0.1015625 (LEAKY_SLOPE), whatever the model's",
    source="pytorch_nndct/nn/modules/leaky_relu.py",
)
