"""Softmax (``nndct_softmax``): a quantized float operator."""
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_support import Verdict, cpu_verdict, tail_fix
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec

SOFTMAX = "nndct_softmax"


def _onnx_softmax(b: Any, node: Any, mod: Optional[nn.Softmax]) -> str:
    """Softmax, the standard op, along the dim."""
    dim = mod.dim if mod is not None else b.static(arg(node, 1, "dim"))
    if dim is None:
        raise Unsupported("softmax without dim")
    return b.op("Softmax", [b.tensor(node.args[0])], node.name, axis=int(dim) % len(b.shape(node.args[0])))


def dpu_softmax(node: Any, ctx: Any) -> Verdict:
    """Softmax is not a DPU engine op; Vitis AI runs it on the CPU (or a separate softmax IP)."""
    return cpu_verdict("softmax can't be assigned to DPU: it runs on the CPU or on a separate softmax IP "
                "next to the DPU.", fixes=[tail_fix(node, ctx)])


RECORD = OpRecord(
    family="softmax",
    specs={SOFTMAX: OpSpec("float", True, False, False)},
    modules={nn.Softmax: SOFTMAX},
    functions={torch.softmax: SOFTMAX, F.softmax: SOFTMAX},
    methods={"softmax": SOFTMAX},
    signatures={SOFTMAX: (("input", "dim"), {"dim": None})},
    approximation=Absent("a float operator on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
    onnx={SOFTMAX: _onnx_softmax},
    dpu_rule={SOFTMAX: DpuRule(("softmax",), dpu_softmax, True)},
)
