"""LeakyReLU (``nndct_leaky_relu``): the DPU's slope is 26/256 whatever the model says; the quantizer
forces it (``pytorch_nndct/nn/modules/leaky_relu.py``; docs/arithmetic.md#leakyrelu-slope)."""
import torch.nn.functional as F
from torch import nn

from .record import OpRecord, OpSpec
from .xir_support import IN, OpDef, XirOp, like_input, req, unary
from .xmodel_support import XmodelForm, simple

LEAKY_RELU = "nndct_leaky_relu"
LEAKY_SLOPE = 0.1015625  # 26 / 256


def _lower_leaky_relu(lo, node) -> dict:
    """The slope nndct forces on every LeakyReLU (``alpha``: :data:`LEAKY_SLOPE`)."""
    return {"alpha": LEAKY_SLOPE}


RECORD = OpRecord(
    family="leaky_relu",
    specs={LEAKY_RELU: OpSpec("dpu", False, False, True)},
    modules={nn.LeakyReLU: LEAKY_RELU},
    functions={F.leaky_relu: LEAKY_RELU},
    signatures={LEAKY_RELU: (("input", "negative_slope"), {"negative_slope": 0.01})},
    approximation="negative slope 26/256 = 0.1015625 (LEAKY_SLOPE), whatever the model's",
    source="pytorch_nndct/nn/modules/leaky_relu.py",
    xmodel={LEAKY_RELU: XmodelForm(_lower_leaky_relu, simple("leaky-relu", ("alpha",)))},
    xir_ops={"leaky-relu": XirOp(OpDef("leaky-relu", IN, (req("alpha", "float"),), like_input),
                                 unary(F.leaky_relu, "alpha"), "leaky_relu")},
    traced={LEAKY_RELU: ("leaky_relu",)},
)
