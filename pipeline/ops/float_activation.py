"""Activations that run in float on the CPU (``nndct_sigmoid``, ``nndct_tanh``, ``aten::silu``,
``nndct_clamp``; ``nndct_GELU``, which nndct quantizes): quantized before a conv, left in float as the
model's output (docs/arithmetic.md#float-operators)."""
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_activation import where_it_runs
from .dpu_support import Fix, Verdict, cpu_verdict, tail_fix
from .record import Absent, DpuRule, OpRecord, OpSpec

SIGMOID = "nndct_sigmoid"
TANH = "nndct_tanh"
SILU = "aten::silu"
CLAMP = "nndct_clamp"
GELU = "nndct_GELU"


# CPU-only activations and the conversion the quantizer offers for each (docs/arithmetic.md#optional-conversions).
_CONVERSIONS = {
    "silu": ("hswish", "SiLU -> HardSwish (quant config key convert_silu_to_hswish)"),
    "sigmoid": ("hsigmoid", "sigmoid -> HardSigmoid (option --nndct_convert_sigmoid_to_hsigmoid)"),
}


# The DPU activation nearest to each CPU-only one, and the module that computes it (the fix).
_NEAREST = {"silu": ("hswish", "nn.SiLU() -> nn.Hardswish()  # or F.silu(x) -> F.hardswish(x)"),
            "sigmoid": ("hsigmoid", "nn.Sigmoid() -> nn.Hardsigmoid()  # or torch.sigmoid(x) -> F.hardsigmoid(x)"),
            "gelu": ("hswish", "nn.GELU() -> nn.Hardswish()  # a different curve: retrain")}


def cpu_activation(node: Any, ctx: Any) -> Verdict:
    """sigmoid, SiLU, tanh, GELU: in no engine's nonlinear or ALU types of any target here, so on
    the CPU; where the quantizer offers a conversion, the note says whether the converted op would
    run on the DPU of this target."""
    reason = "{} can't be assigned to DPU: no engine of {} has it (nonlinear types: {}).".format(
        node.op, ctx.target.name, ", ".join(ctx.target.engines.conv.nonlinear))
    fixes = [tail_fix(node, ctx)]
    if node.op in _NEAREST:
        replacement, code = _NEAREST[node.op]
        where = where_it_runs(replacement, node, ctx)
        if where is not None:
            fixes.insert(0, Fix("replace it with the DPU's {}: the op then {} (a piecewise-linear approximation: "
                                "check the accuracy).".format(replacement, where), code, exact=False))
    conversion = _CONVERSIONS.get(node.op)
    if conversion is None:
        return cpu_verdict(reason, fixes=fixes)
    replacement, text = conversion
    where = where_it_runs(replacement, node, ctx) or "would still run on the CPU"
    return cpu_verdict(reason, changes=["the quantizer offers {}; after it, the op {} on {} (accuracy "
                                 "changes: check it).".format(text, where, ctx.target.name)], fixes=fixes)


_FLOAT = OpSpec("float", False, False, False)

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
    dpu_rule={SIGMOID: DpuRule(("sigmoid",), cpu_activation, True), TANH: DpuRule(("tanh",), cpu_activation, True),
              SILU: DpuRule(("silu",), cpu_activation, True), CLAMP: Absent("a float operator of the quantizer"),
              GELU: DpuRule(("gelu",), cpu_activation, True)},
)
