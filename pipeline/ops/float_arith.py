"""Comparison and remainder: ``x == y`` (``nndct_equal``) and ``x % c`` (``aten::remainder``: nndct has no
type for it; ``c`` becomes a const node). Float operators."""
import operator

import torch

from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH
from .xmodel_support import XmodelForm, custom, no_attrs

EQUAL = "nndct_equal"
REMAINDER = "aten::remainder"

_FLOAT = OpSpec("float", False, False, False)

RECORD = OpRecord(
    family="float_arith",
    specs={EQUAL: _FLOAT, REMAINDER: _FLOAT},
    functions={operator.eq: EQUAL, torch.eq: EQUAL, operator.mod: REMAINDER, torch.remainder: REMAINDER},
    methods={"eq": EQUAL},
    roles={"arithmetic": (REMAINDER,), "const_operand": (REMAINDER,)},
    approximation=Absent("float operators on the CPU"),
    source="nndct_shared/base/key_names.py",
    onnx={EQUAL: Absent("a comparison gives a bool tensor; the exporter writes float32 tensors only"),
          REMAINDER: Absent("not written yet: ONNX Mod of floats (fmod=1) is C's fmod, torch's remainder takes "
                             "the divisor's sign")},
    dpu_rule={EQUAL: Absent("a float operator of the quantizer"),
              REMAINDER: Absent("a float operator of the quantizer")},
    xmodel={EQUAL: Absent("not written yet: the xmodel writer has no XIR form for it"),
            REMAINDER: XmodelForm(no_attrs, custom)},
    xir_ops=Absent("a custom op (aten::remainder: a type XIR does not define)"),
    custom_kernels={REMAINDER: Absent("the file carries no divisor of its own: the caller's float_ops (the "
                                      "simulation's call) compute it")},
    traced={},  # each type traced under its own name
    refusals={},
    sim=dict.fromkeys((EQUAL, REMAINDER), TORCH),
)
