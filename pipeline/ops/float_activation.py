"""Activations that run in float on the CPU (``nndct_sigmoid``, ``nndct_tanh``, ``aten::silu``,
``nndct_clamp``; ``nndct_GELU``, which nndct quantizes): quantized before a conv, left in float as the
model's output (docs/arithmetic.md#float-operators)."""
import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xir_support import IN, OpDef, XirOp, like_input, one, unary
from .xmodel_support import XmodelForm, custom, no_attrs, simple

SIGMOID = "nndct_sigmoid"
TANH = "nndct_tanh"
SILU = "aten::silu"
CLAMP = "nndct_clamp"
GELU = "nndct_GELU"

_FLOAT = OpSpec("float", False, False, False)


def _lower_gelu(lo, node) -> dict:
    """``approximate`` quoted, as nndct writes it (``'none'`` or ``'tanh'``)."""
    m = lo.module(node)
    approximate = m.approximate if m is not None else lo.call_args(node)["approximate"]
    return {"approximate": "'%s'" % approximate}


def _run_gelu(run, op, ins):
    """``F.gelu`` with ``approximate`` (``'none'`` or ``'tanh'``, quotes included as nndct writes it)."""
    approximate = str(op.attr("approximate", "none")).strip("'\"")
    return F.gelu(one(ins), approximate=approximate)


RECORD = OpRecord(
    family="float_activation",
    specs={SIGMOID: _FLOAT, TANH: _FLOAT, SILU: _FLOAT, CLAMP: _FLOAT, GELU: OpSpec("float", True, False, False)},
    modules={nn.Sigmoid: SIGMOID, nn.Tanh: TANH, nn.GELU: GELU, nn.SiLU: SILU},
    functions={torch.sigmoid: SIGMOID, F.sigmoid: SIGMOID, torch.tanh: TANH, F.tanh: TANH, F.gelu: GELU,
               F.silu: SILU, torch.clamp: CLAMP, torch.clip: CLAMP},
    methods={"sigmoid": SIGMOID, "tanh": TANH, "clamp": CLAMP, "clip": CLAMP},
    signatures={GELU: (("input", "approximate"), {"approximate": "none"})},
    approximation=Absent("float operators on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
    # silu and clamp: custom ops (types XIR does not define), as the real quantizer writes them
    xmodel={SIGMOID: XmodelForm(no_attrs, simple("sigmoid")), TANH: XmodelForm(no_attrs, simple("tanh")),
            SILU: XmodelForm(no_attrs, custom), CLAMP: XmodelForm(no_attrs, custom),
            GELU: XmodelForm(_lower_gelu, simple("gelu", ("approximate",)))},
    xir_ops={"sigmoid": XirOp(OpDef("sigmoid", IN, (), like_input), unary(torch.sigmoid), "sigmoid"),
             "tanh": XirOp(OpDef("tanh", IN, (), like_input), unary(torch.tanh), "tanh"),
             "gelu": XirOp(OpDef("gelu", IN, (), like_input), _run_gelu, "gelu")},
    traced={SIGMOID: ("sigmoid",), TANH: ("tanh",), GELU: ("gelu",), CLAMP: ("clamp",), SILU: ("silu",)},
)
