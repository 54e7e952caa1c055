"""Hardsigmoid and Hardswish (``nndct_hsigmoid``, ``nndct_hswish``). The DPU computes
``relu6(x + 3) * 2731/16384`` for 1/6, and a Hardswish multiplies ``x`` by that hard sigmoid rounded
half up at fix position 7, 8 bits (``pytorch_nndct/nn/modules/hsigmoid.py``, ``hswish.py``;
docs/arithmetic.md)."""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import fixpoint
from .dpu_activation import activation
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import SimForm
from .xir_support import IN, OpDef, XirOp, like_input, unary
from .xmodel_support import XmodelForm, no_attrs

HSIGMOID = "nndct_hsigmoid"
HSWISH = "nndct_hswish"
HARD_SIGMOID_SCALE = 2731.0 / 16384.0  # the DPU's 1/6
HSWISH_FIX_POS = 7  # the hard sigmoid inside a Hardswish is rounded at this fix position, 8 bits

_DPU_Q = OpSpec("dpu", True, False, False)


XMODEL_HARD_SIGMOID_SCALE = 6.0 * HARD_SIGMOID_SCALE  # nndct's hsigmoid/hswish multiplier (xop_creator.py)


def _hsigmoid_part(w, node):
    return w.fixed_op(node.name + "_i0", "hard-sigmoid", None, {"input": w.data_inputs(node)})


def _create_hsigmoid(w, node) -> None:
    """XIR ``hard-sigmoid`` ``<node>_i0`` times a const ``<node>_i1`` of :data:`XMODEL_HARD_SIGMOID_SCALE`
    (``xop_creator.py`` ``hsigmoid``)."""
    _hsigmoid_part(w, node)
    w.fixed_const(node.name + "_i1", np.array([XMODEL_HARD_SIGMOID_SCALE], dtype=np.float32))
    w.fixed_op(node.name, "mul", None, {"input": [w.op_of(node.name + "_i0"), w.op_of(node.name + "_i1")]})


def _create_hswish(w, node) -> None:
    """``x`` times the hard sigmoid: ``hard-sigmoid`` ``<node>_i0``, a ``mul`` ``<node>_mul`` by the const
    ``<node>_i1`` (both named with the raw node name, as nndct does), its fix at ``bit_width - 1`` when the
    node's output has one, then the ``mul`` by ``x`` (``xop_creator.py`` ``hswish``)."""
    x = w.data_inputs(node)[0]
    sigmoid = _hsigmoid_part(w, node)
    const = w.x.create_const_op(node.name + "_i1", np.array([XMODEL_HARD_SIGMOID_SCALE], dtype=np.float32))
    mul = w.x.create_op(node.name + "_mul", "mul", None, {"input": [sigmoid, const]})
    if node.name in w.outputs:
        bit_width = w.outputs[node.name][0]
        mul = w.fix_op(mul, bit_width, bit_width - 1)
    w.fixed_op(node.name, "mul", None, {"input": [mul, x]})


def dpu_hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """nndct's DPU hardsigmoid: ``relu6(x + 3) * 2731/16384`` (float32; ``hsigmoid.py``)."""
    return F.relu6(torch.add(x, 3.0)) * HARD_SIGMOID_SCALE


def dpu_hard_swish(x: torch.Tensor) -> torch.Tensor:
    """nndct's DPU hardswish: ``x * Q7(relu6(x + 3) * 2731/16384)``, Q7 = half_up at fix_pos 7, 8 bits
    (``hswish.py``)."""
    return torch.mul(x, fixpoint.fake_quant(dpu_hard_sigmoid(x), HSWISH_FIX_POS, 8, "half_up"))


def _lower_hard_sigmoid(lo, swish: bool):
    """The lowered model's hard sigmoid written out: add 3, clamp to [0, 6], multiply by 2731/16384; a
    Hardswish rounds it at fix_pos 7 and multiplies ``x`` by it."""
    a = lo.call(torch.add, lo.x, 3.0)
    b = lo.call(torch.clamp, a, 0.0, 6.0)
    value = lo.call(torch.mul, b, HARD_SIGMOID_SCALE)
    if swish:
        d = lo.call(fixpoint.fake_quant, value, HSWISH_FIX_POS, 8, "half_up")
        value = lo.call(torch.mul, lo.x, d)
    return value, True


SIM = {HSWISH: SimForm(lambda s: (dpu_hard_swish(s.x), True), lambda lo: _lower_hard_sigmoid(lo, True)),
       HSIGMOID: SimForm(lambda s: (dpu_hard_sigmoid(s.x), True), lambda lo: _lower_hard_sigmoid(lo, False))}


def xir_hard_sigmoid(x):
    """XIR's ``hard-sigmoid``: ``relu6(x + 3) / 6``."""
    return torch.div(torch.clamp(torch.add(x, 3.0), 0.0, 6.0), 6.0)


def _const_input(op) -> bool:
    """A const op, or a fix of one."""
    while op.type == "fix":
        op = op.inputs["input"][0]
    return op.type == "const"


def hard_sigmoid_mul(run, op, ins):
    """The writer's hsigmoid/hswish pair ``mul(hard-sigmoid(x), c)`` (``c`` a 1-element const or its
    fix) as the simulation computes it: ``torch.mul(torch.clamp(torch.add(x, 3.0), 0.0, 6.0),
    float32(c / 6))`` with ``x`` the hard-sigmoid's input; None for any other op (the ``mul`` kernel
    asks first)."""
    srcs = op.inputs.get("input", [])
    if op.type != "mul" or len(srcs) != 2:
        return None
    for i in (0, 1):
        sig, const = srcs[i], srcs[1 - i]
        if sig.type == "hard-sigmoid" and _const_input(const) and ins["input"][1 - i].numel() == 1:
            x = run.values[sig.inputs["input"][0].name]
            scale = float(np.float32(float(ins["input"][1 - i].reshape(-1)[0]) / 6.0))
            return torch.mul(torch.clamp(torch.add(x, 3.0), 0.0, 6.0), scale)
    return None


RECORD = OpRecord(
    family="hard_sigmoid",
    specs={HSWISH: _DPU_Q, HSIGMOID: _DPU_Q},
    modules={nn.Hardswish: HSWISH, nn.Hardsigmoid: HSIGMOID},
    functions={F.hardswish: HSWISH, F.hardsigmoid: HSIGMOID},
    approximation="1/6 as 2731/16384 (HARD_SIGMOID_SCALE); in a Hardswish the hard sigmoid is rounded half "
                  "up at fix_pos 7 (HSWISH_FIX_POS), 8 bits",
    source="pytorch_nndct/nn/modules/hsigmoid.py, hswish.py",
    onnx={op: Absent("the lowered model writes it out as the DPU computes it (an add, a relu6, "
                     "a multiply by 2731/16384, a quantization point): those nodes are written")
          for op in (HSWISH, HSIGMOID)},
    dpu_rule={HSWISH: DpuRule(("hswish",), activation), HSIGMOID: DpuRule(("hsigmoid",), activation)},
    xmodel={HSWISH: XmodelForm(no_attrs, _create_hswish), HSIGMOID: XmodelForm(no_attrs, _create_hsigmoid)},
    xir_ops={"hard-sigmoid": XirOp(OpDef("hard-sigmoid", IN, (), like_input), unary(xir_hard_sigmoid), "hsigmoid")},
    traced={HSWISH: ("hardswish",), HSIGMOID: ("hardsigmoid",)},
    roles={"adaquant_act": (HSWISH, HSIGMOID)},
    refusals={},
    sim=SIM,
)
