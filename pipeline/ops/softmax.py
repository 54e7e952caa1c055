"""Softmax (``nndct_softmax``): a quantized float operator."""
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_support import Verdict, cpu_verdict, tail_fix
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, OpDef, XirOp, like_input, one, req
from .xmodel_support import XmodelForm, rewrite_axis, simple

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


def _lower_softmax(lo, node) -> dict:
    """The softmax's dimension (``axis``), from the module or the call."""
    m = lo.module(node)
    return {"axis": m.dim if m is not None else lo.call_args(node)["dim"]}


def _run_softmax(run, op, ins):
    """``F.softmax`` over ``axis``, in the simulation's memory layout."""
    return run.in_model_layout(one(ins), [op.attr("axis")], lambda t, a: F.softmax(t, a[0]))


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
    xmodel={SOFTMAX: XmodelForm(_lower_softmax, simple("softmax", ("axis",)), layout_rewrite=rewrite_axis)},
    xir_ops={"softmax": XirOp(OpDef("softmax", IN, (req("axis", "int32"),), like_input), _run_softmax, "softmax")},
    traced={SOFTMAX: ("softmax",)},
    refusals={},
    sim={SOFTMAX: TORCH},
)
