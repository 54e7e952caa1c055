"""Softmax (``nndct_softmax``): a quantized float operator."""
import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xir_support import IN, OpDef, XirOp, like_input, one, req
from .xmodel_support import XmodelForm, rewrite_axis, simple

SOFTMAX = "nndct_softmax"


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
    xmodel={SOFTMAX: XmodelForm(_lower_softmax, simple("softmax", ("axis",)), layout_rewrite=rewrite_axis)},
    xir_ops={"softmax": XirOp(OpDef("softmax", IN, (req("axis", "int32"),), like_input), _run_softmax, "softmax")},
    traced={SOFTMAX: ("softmax",)},
)
