"""Activations that run in float on the CPU (``nndct_sigmoid``, ``nndct_tanh``, ``aten::silu``,
``nndct_clamp``; ``nndct_GELU``, which nndct quantizes): quantized before a conv, left in float as the
model's output (docs/arithmetic.md#float-operators)."""
import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
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
)
