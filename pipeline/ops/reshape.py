"""Ops that view data in a new shape (``nndct_flatten``, ``nndct_reshape``, ``nndct_contiguous``,
``nndct_squeeze``, ``nndct_unsqueeze``): never their own fix position, they defer to their producer."""
import torch
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import XmodelForm, custom, no_attrs

FLATTEN = "nndct_flatten"
RESHAPE = "nndct_reshape"
CONTIGUOUS = "nndct_contiguous"
SQUEEZE = "nndct_squeeze"
UNSQUEEZE = "nndct_unsqueeze"


def _lower_flatten(lo, node) -> dict:
    """start_dim and end_dim; ``deploy.optimize`` makes the node a reshape."""
    m = lo.module(node)
    a = {"start_dim": m.start_dim, "end_dim": m.end_dim} if m is not None else lo.call_args(node)
    return {"start_dim": a["start_dim"], "end_dim": a["end_dim"]}


def _lower_reshape(lo, node) -> dict:
    """The target shape (``shape``), traced sizes evaluated on the example."""
    return {"shape": lo.shape_args(node)}


def _create_reshape(w, node) -> None:
    """XIR ``reshape`` with a ``shape`` input: one const per dim, stacked (``xop_creator.py`` ``reshape``)."""
    shape_op = w.pack(node, "shape", node.attrs["shape"])
    w.fixed_op(node.name, "reshape", None, {"shape": [shape_op], "input": w.data_inputs(node)})


RECORD = OpRecord(
    family="reshape",
    specs={
        FLATTEN: OpSpec("layout", False, True, True),
        RESHAPE: OpSpec("layout", False, True, False),
        CONTIGUOUS: OpSpec("layout", False, True, True),
        UNSQUEEZE: OpSpec("layout", False, True, True),
        SQUEEZE: OpSpec("layout", False, True, True),
    },
    modules={nn.Flatten: FLATTEN},
    functions={torch.flatten: FLATTEN, torch.reshape: RESHAPE, torch.unsqueeze: UNSQUEEZE,
               torch.squeeze: SQUEEZE},
    methods={"flatten": FLATTEN, "view": RESHAPE, "reshape": RESHAPE, "contiguous": CONTIGUOUS,
             "unsqueeze": UNSQUEEZE, "squeeze": SQUEEZE},
    signatures={FLATTEN: (("input", "start_dim", "end_dim"), {"start_dim": 0, "end_dim": -1})},
    approximation=Absent("moves no value"),
    source="nndct_shared/base/key_names.py",
    # flatten and contiguous: deploy.optimize makes a flatten a reshape and removes contiguous before the
    # writer runs
    xmodel={FLATTEN: XmodelForm(_lower_flatten, custom), RESHAPE: XmodelForm(_lower_reshape, _create_reshape),
            CONTIGUOUS: XmodelForm(no_attrs, custom),
            UNSQUEEZE: Absent("not written yet: the xmodel writer has no XIR form for it"),
            SQUEEZE: Absent("not written yet: the xmodel writer has no XIR form for it")},
)
