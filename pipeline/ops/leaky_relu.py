"""LeakyReLU (``nndct_leaky_relu``): the DPU's slope is 26/256 whatever the model says; the quantizer
forces it (``pytorch_nndct/nn/modules/leaky_relu.py``; docs/arithmetic.md#leakyrelu-slope)."""
from typing import Any, Optional

import torch.nn.functional as F
from torch import nn

from .record import OpRecord, OpSpec
from .onnx_form import arg

LEAKY_RELU = "nndct_leaky_relu"
LEAKY_SLOPE = 0.1015625  # 26 / 256

def _onnx_leaky_relu(b: Any, node: Any, mod: Optional[nn.LeakyReLU]) -> str:
    """LeakyRelu with the model's slope (the lowered model's module or argument: already the DPU's)."""
    slope = mod.negative_slope if mod is not None else b.static(arg(node, 1, "negative_slope", 0.01))
    return b.op("LeakyRelu", [b.tensor(node.args[0])], node.name, alpha=float(slope))


RECORD = OpRecord(
    family="leaky_relu",
    specs={LEAKY_RELU: OpSpec("dpu", False, False, True)},
    modules={nn.LeakyReLU: LEAKY_RELU},
    functions={F.leaky_relu: LEAKY_RELU},
    signatures={LEAKY_RELU: (("input", "negative_slope"), {"negative_slope": 0.01})},
    approximation="negative slope 26/256 = 0.1015625 (LEAKY_SLOPE), whatever the model's",
    source="pytorch_nndct/nn/modules/leaky_relu.py",
    onnx={LEAKY_RELU: _onnx_leaky_relu},
)
