"""LeakyReLU (``nndct_leaky_relu``): the DPU's slope is 26/256 whatever the model says; the quantizer
forces it (``pytorch_nndct/nn/modules/leaky_relu.py``; docs/arithmetic.md#leakyrelu-slope)."""
from typing import Any, Optional

import torch.nn.functional as F
from torch import nn

from .dpu_activation import activation
from .dpu_support import Fix, Verdict
from .onnx_form import arg
from .record import DpuRule, OpRecord, OpSpec
from .sim_support import SimForm
from .xir_support import IN, OpDef, XirOp, like_input, req, unary
from .xmodel_support import XmodelForm, simple

LEAKY_RELU = "nndct_leaky_relu"
LEAKY_SLOPE = 0.1015625  # 26 / 256


def _onnx_leaky_relu(b: Any, node: Any, mod: Optional[nn.LeakyReLU]) -> str:
    """LeakyRelu with the model's slope (the lowered model's module or argument: already the DPU's)."""
    slope = mod.negative_slope if mod is not None else b.static(arg(node, 1, "negative_slope", 0.01))
    return b.op("LeakyRelu", [b.tensor(node.args[0])], node.name, alpha=float(slope))

def leaky_relu_slope_note(node: Any) -> Optional[str]:
    """The slope change the quantizer makes: every LeakyReLU gets slope 26/256 (docs/arithmetic.md#leakyrelu-slope)."""
    slope = node.attrs["negative_slope"]
    if slope == LEAKY_SLOPE:
        return None
    return ("negative_slope {} -> 26/256 = {} on the DPU: the quantizer forces this slope "
            "(with a warning) and the simulation uses it; retrain with "
            "nn.LeakyReLU(26 / 256) to keep float and DPU alike.".format(slope, LEAKY_SLOPE))


def leaky_relu_slope_fix(node: Any) -> Optional[Fix]:
    """The slope 26/256 in the float model, so that float and DPU compute the same function."""
    slope = node.attrs["negative_slope"]
    if slope == LEAKY_SLOPE:
        return None
    return Fix("use the DPU's slope 26/256 in the float model (the DPU computes that slope whatever the model "
               "says).", "nn.LeakyReLU({}) -> nn.LeakyReLU(0.1015625)  # 26 / 256".format(slope), exact=False)


def dpu_leaky_relu(node: Any, ctx: Any) -> Verdict:
    """LeakyReLU: an activation (``dpu_activation.activation``) with the slope 26/256 the quantizer
    forces (the change, and the fix that makes float and DPU agree)."""
    return activation(node, ctx, changes=[leaky_relu_slope_note(node)], fixes=[leaky_relu_slope_fix(node)])


def _lower_leaky_relu(lo, node) -> dict:
    """The slope nndct forces on every LeakyReLU (``alpha``: :data:`LEAKY_SLOPE`)."""
    return {"alpha": LEAKY_SLOPE}


def _run_leaky_relu(s):
    """nndct's LeakyReLU: the slope forced to :data:`LEAKY_SLOPE` (``leaky_relu.py``)."""
    return F.leaky_relu(s.x, LEAKY_SLOPE), True


def _lower_leaky_relu_module(lo):
    """The lowered model's ``nn.LeakyReLU(LEAKY_SLOPE)``."""
    return lo.call_module(nn.LeakyReLU(LEAKY_SLOPE)), True


RECORD = OpRecord(
    family="leaky_relu",
    specs={LEAKY_RELU: OpSpec("dpu", False, False, True)},
    modules={nn.LeakyReLU: LEAKY_RELU},
    functions={F.leaky_relu: LEAKY_RELU, F.leaky_relu_: LEAKY_RELU},  # op_dispatcher.leaky_relu_: the same op
    signatures={LEAKY_RELU: (("input", "negative_slope"), {"negative_slope": 0.01})},
    approximation="negative slope 26/256 = 0.1015625 (LEAKY_SLOPE), whatever the model's",
    source="pytorch_nndct/nn/modules/leaky_relu.py",
    onnx={LEAKY_RELU: _onnx_leaky_relu},
    dpu_rule={LEAKY_RELU: DpuRule(("leaky_relu",), dpu_leaky_relu)},
    xmodel={LEAKY_RELU: XmodelForm(_lower_leaky_relu, simple("leaky-relu", ("alpha",)))},
    xir_ops={"leaky-relu": XirOp(OpDef("leaky-relu", IN, (req("alpha", "float"),), like_input),
                                 unary(F.leaky_relu, "alpha"), "leaky_relu")},
    traced={LEAKY_RELU: ("leaky_relu",)},
    roles={"fresh_output": (LEAKY_RELU,)},
    refusals={},
    sim={LEAKY_RELU: SimForm(_run_leaky_relu, _lower_leaky_relu_module)},
)
