"""Axis reorders (``nndct_permute``, ``nndct_transpose``). A transpose is not in nndct's
``QUANTIZABLE_OPS`` and joins its producer's group (``SoftFuseTranspose``)."""
import torch

from .record import Absent, OpRecord, OpSpec
from .xir_support import IN, OpDef, XirOp, attr, one, op_input, req, unsupported
from .xmodel_support import XmodelForm, custom, simple

PERMUTE = "nndct_permute"
TRANSPOSE = "nndct_transpose"


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
    # a transpose: deploy.optimize makes it a permute before the writer runs
    xmodel={PERMUTE: XmodelForm(_lower_permute, simple("transpose", ("order",))),
            TRANSPOSE: XmodelForm(_lower_transpose, custom)},
    xir_ops={"transpose": XirOp(OpDef("transpose", IN, (req("order", "int32_vec"),), _shape_transpose),
                                lambda run, op, ins: one(ins).permute(list(op.attr("order"))), "permute")},
    traced={PERMUTE: ("permute",), TRANSPOSE: ("transpose",)},
)
