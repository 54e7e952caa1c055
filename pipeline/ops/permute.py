"""Axis reorders (``nndct_permute``, ``nndct_transpose``). A transpose is not in nndct's
``QUANTIZABLE_OPS`` and joins its producer's group (``SoftFuseTranspose``)."""
from typing import Any

import torch

from .dpu_support import DPU, Verdict, cpu_verdict
from .onnx_form import arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, OpDef, XirOp, attr, one, op_input, req, unsupported
from .xmodel_support import XmodelForm, custom, simple

PERMUTE = "nndct_permute"
TRANSPOSE = "nndct_transpose"


def _onnx_permute(b: Any, node: Any, mod: None) -> str:
    """Transpose by the dims (given as one sequence or one by one)."""
    if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)):
        dims = node.args[1]
    else:
        dims = node.args[1:] or arg(node, 1, "dims")
    rank = len(b.shape(node))
    perm = [int(d) % rank for d in b.static(tuple(dims))]
    return b.op("Transpose", [b.tensor(node.args[0])], node.name, perm=perm)


def _onnx_transpose(b: Any, node: Any, mod: None) -> str:
    """Transpose swapping dim0 and dim1."""
    rank = len(b.shape(node))
    d0, d1 = (int(b.static(arg(node, i, n))) % rank for i, n in ((1, "dim0"), (2, "dim1")))
    perm = list(range(rank))
    perm[d0], perm[d1] = d1, d0
    return b.op("Transpose", [b.tensor(node.args[0])], node.name, perm=perm)

def dpu_permute(node: Any, ctx: Any) -> Verdict:
    """permute(0, 2, 3, 1) of a 4-D DPU feature map is XIR's own NHWC order: no data moves, and it
    cancels the permute the quantizer would insert before a reshape (docs/targets.md#xir-is-nhwc). Other permutes
    and transposes move data; no engine of these targets does that."""
    src = ctx.producer(node)
    order = node.attrs.get("order")
    if (order == [0, 2, 3, 1] and src is not None and ctx.on_dpu(src.name)
            and src.shape is not None and len(src.shape) == 4):
        return Verdict(DPU, [], ["permute(0, 2, 3, 1) of a feature map is XIR's NHWC order: no data "
                                 "moves, and a following reshape needs no inserted permute."])
    return cpu_verdict("{} can't be assigned to DPU: it moves data in memory ({}), and {} has no engine "
                "for that.".format(node.op, order or node.attrs.get("dims"), ctx.target.name))


def _lower_permute(lo, node) -> dict:
    """The permutation (``order``)."""
    return {"order": lo.shape_args(node)}


def _lower_transpose(lo, node) -> dict:
    """The two swapped dims (``dims``); ``deploy.optimize`` makes the node a permute."""
    a = lo.call_args(node)
    return {"dims": [a["dim0"], a["dim1"]]}


def _shape_transpose(op):
    """The input's dims in ``order``."""
    dims, order = list(op_input(op).shape), attr(op, "order", "int32_vec")
    if any(not 0 <= o < len(dims) for o in order):
        raise unsupported(op, "order %s of input %s" % (order, dims))
    return [dims[o] for o in order], {}


RECORD = OpRecord(
    family="permute",
    specs={PERMUTE: OpSpec("layout", False, True, True), TRANSPOSE: OpSpec("layout", False, False, True)},
    functions={torch.permute: PERMUTE, torch.transpose: TRANSPOSE},
    methods={"permute": PERMUTE, "transpose": TRANSPOSE},
    signatures={TRANSPOSE: (("input", "dim0", "dim1"), {})},
    approximation=Absent("moves no value"),
    source="nndct_shared/quantization/commander.py (SoftFuseTranspose)",
    onnx={PERMUTE: _onnx_permute, TRANSPOSE: _onnx_transpose},
    dpu_rule={PERMUTE: DpuRule(("permute",), dpu_permute), TRANSPOSE: DpuRule(("transpose",), dpu_permute)},
    # a transpose: deploy.optimize makes it a permute before the writer runs
    xmodel={PERMUTE: XmodelForm(_lower_permute, simple("transpose", ("order",))),
            TRANSPOSE: XmodelForm(_lower_transpose, custom)},
    custom_kernels={TRANSPOSE: Absent("never written as a custom op: deploy.optimize makes it a permute first")},
    xir_ops={"transpose": XirOp(OpDef("transpose", IN, (req("order", "int32_vec"),), _shape_transpose),
                                lambda run, op, ins: one(ins).permute(list(op.attr("order"))), "permute")},
    traced={PERMUTE: ("permute",), TRANSPOSE: ("transpose",)},
    refusals={},
    sim=dict.fromkeys((PERMUTE, TRANSPOSE), TORCH),
)
