"""Comparison, remainder, negation and reciprocal: ``x == y`` (``nndct_equal``), ``x % c`` (``aten::remainder``:
nndct has no type for it; ``c`` becomes a const node), ``-x`` (``nndct_neg``: XIR ``neg``) and ``x.reciprocal()``
(``aten::reciprocal``, also what torch traces for ``c / x``: ``x.reciprocal() * c``,
``fx.rewrites.reciprocal_divisions``). Float operators (nndct's ``DPUPartition`` keeps ``nndct_neg`` on the
CPU)."""
import operator
from typing import Any

import torch

from .onnx_form import arg
from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, OpDef, XirOp, custom_def, like_input, one, unary
from .xmodel_support import XmodelForm, custom, no_attrs, simple

EQUAL = "nndct_equal"
REMAINDER = "aten::remainder"
NEG = "nndct_neg"
RECIPROCAL = "aten::reciprocal"

_FLOAT = OpSpec("float", False, False, False)


def _onnx_neg(b: Any, node: Any, mod: None) -> str:
    """Neg."""
    return b.op("Neg", [b.tensor(node.args[0])], node.name)


def _onnx_reciprocal(b: Any, node: Any, mod: None) -> str:
    """``1 / x`` as ONNX Reciprocal: an IEEE float32 division, the bits of torch's ``reciprocal``."""
    return b.op("Reciprocal", [b.tensor(arg(node, 0, "input"))], node.name)


def _run_reciprocal(run: Any, op: Any, ins: Any) -> Any:
    """The custom op ``aten::reciprocal``, run by the interpreter without the model: ``1 / x`` of its one
    input, float32, the bits of torch's call in any layout (element-wise)."""
    return torch.reciprocal(one(ins))


RECORD = OpRecord(
    family="float_arith",
    specs={EQUAL: _FLOAT, REMAINDER: _FLOAT, NEG: _FLOAT, RECIPROCAL: _FLOAT},
    functions={operator.eq: EQUAL, torch.eq: EQUAL, operator.mod: REMAINDER, torch.remainder: REMAINDER,
               operator.neg: NEG, torch.neg: NEG, torch.reciprocal: RECIPROCAL},
    methods={"eq": EQUAL, "neg": NEG, "reciprocal": RECIPROCAL},
    roles={"arithmetic": (REMAINDER,), "const_operand": (REMAINDER,)},
    approximation=Absent("float operators on the CPU"),
    source="nndct_shared/base/key_names.py",
    onnx={EQUAL: Absent("a comparison gives a bool tensor; the exporter writes float32 tensors only"),
          REMAINDER: Absent("not written yet: ONNX Mod of floats (fmod=1) is C's fmod, torch's remainder takes "
                             "the divisor's sign"),
          NEG: _onnx_neg, RECIPROCAL: _onnx_reciprocal},
    dpu_rule={EQUAL: Absent("a float operator of the quantizer"),
              REMAINDER: Absent("a float operator of the quantizer"), NEG: Absent("a float operator of the quantizer"),
              RECIPROCAL: Absent("a float operator of the quantizer")},
    # the custom op nndct_equal on the tensor operand, the number it is compared with not in the file
    # (tests/data/corpus_real/tv_swin: Swin's mask == 0)
    xmodel={EQUAL: XmodelForm(no_attrs, custom),
            REMAINDER: XmodelForm(no_attrs, custom), NEG: XmodelForm(no_attrs, simple("neg")),
            RECIPROCAL: XmodelForm(no_attrs, custom)},
    xir_ops={"neg": XirOp(OpDef("neg", IN, (), like_input), unary(torch.neg), "neg"),
             RECIPROCAL: XirOp(custom_def(RECIPROCAL), _run_reciprocal, RECIPROCAL)},  # custom: a float op
    custom_kernels={EQUAL: Absent("the file carries no value compared with: the caller's float_ops (the "
                                  "simulation's call) compute it"),
                    REMAINDER: Absent("the file carries no divisor of its own: the caller's float_ops (the "
                                      "simulation's call) compute it")},
    traced={NEG: ("neg",), EQUAL: ("eq",)},
    refusals={},
    sim=dict.fromkeys((EQUAL, REMAINDER, NEG, RECIPROCAL), TORCH),
)
