"""Ops that view data in a new shape (``nndct_flatten``, ``nndct_reshape``, ``nndct_contiguous``,
``nndct_squeeze``, ``nndct_unsqueeze``): never their own fix position, they defer to their producer."""
import math

import numpy as np
import torch
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xir_support import (IN, INS, OPTIONAL, SHAPE_INFO, ArgDef, OpDef, XirOp, attr, const_ints, fail, one, op_input,
                          opt, req, shape_info, unsupported, with_info)
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


def _rewrite_shape(node, order) -> None:
    """The target ``shape`` permuted with the layout ``order`` (``attr_transform.py``)."""
    shape = node.attrs["shape"]
    node.attrs["shape"] = [shape[d] for d in order]


def _create_reshape(w, node) -> None:
    """XIR ``reshape`` with a ``shape`` input: one const per dim, stacked (``xop_creator.py`` ``reshape``)."""
    shape_op = pack(w, node, "shape", node.attrs["shape"])
    w.fixed_op(node.name, "reshape", None, {"shape": [shape_op], "input": w.data_inputs(node)})


def pack(w, node, what: str, items):
    """``items`` as consts ``<node>_<what>_attr[i]`` stacked into XIR ``stack`` ``<node>_<what>_i0``
    (a reshape's shape, a resize's size; ``xop_creator.py``'s ``_pack``). Returns the stack op."""
    consts = [w.fixed_const("%s_%s_attr[%d]" % (node.name, what, i), np.array([item], dtype=np.float32))
              for i, item in enumerate(items)]
    return w.fixed_op("%s_%s_i0" % (node.name, what), "stack", {"axis": 0}, {"input": consts})


def _shape_reshape(op):
    """The target from the ``shape`` input (its const data, else its ``shape_info``) or the ``shape``
    attribute; -1 takes the remaining element count, 0 keeps the input's dim."""
    dims = list(op_input(op).shape)
    if op.inputs.get("shape"):
        src = op.inputs["shape"][0]
        if "data" in src.attrs:
            target = const_ints(op, src)
        elif SHAPE_INFO in src.tensor_attrs:
            target = shape_info(src)
        else:
            raise unsupported(op, "shape input %r has neither data nor shape_info" % src.name)
    else:
        target = list(attr(op, "shape", "int32_vec"))
    if any(t == 0 and i >= len(dims) for i, t in enumerate(target)):
        raise unsupported(op, "target %s keeps a dim input %s lacks" % (target, dims))
    count = math.prod(dims)
    rest = count // math.prod(t for t in target if t > 0)
    out = [rest if t < 0 else dims[i] if t == 0 else t for i, t in enumerate(target)]
    if math.prod(out) != count:
        raise fail(op, "input %s (%d elements) cannot take shape %s" % (dims, count, target))
    return out, {}


def _shape_stack(op):
    """``input[0]``'s dims with the input count inserted at ``axis``; ``shape_info``: the inputs'
    ``shape_info`` or const data, concatenated in input order."""
    dims, axis = list(op_input(op).shape), attr(op, "axis", "int32")
    if not 0 <= axis <= len(dims):
        raise unsupported(op, "axis %d for input %s" % (axis, dims))
    info = []
    for src in op.input_list():
        own = shape_info(src)
        info += own if own is not None else const_ints(op, src)
    return with_info(dims[:axis] + [len(op.input_list())] + dims[axis:], info)


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
    xmodel={FLATTEN: XmodelForm(_lower_flatten, custom),
            RESHAPE: XmodelForm(_lower_reshape, _create_reshape, layout_rewrite=_rewrite_shape),
            CONTIGUOUS: XmodelForm(no_attrs, custom),
            UNSQUEEZE: Absent("not written yet: the xmodel writer has no XIR form for it"),
            SQUEEZE: Absent("not written yet: the xmodel writer has no XIR form for it")},
    xir_ops={"reshape": XirOp(OpDef("reshape", IN + (ArgDef("shape", OPTIONAL),), (opt("shape", "int32_vec", [0]),),
                                    _shape_reshape), lambda run, op, ins: one(ins).reshape(op.shape), "reshape"),
             "stack": XirOp(OpDef("stack", INS, (req("axis", "int32"),), _shape_stack),
                            lambda run, op, ins: torch.stack(ins["input"], op.attr("axis")), "stack")},
    traced={FLATTEN: ("flatten",), RESHAPE: ("view", "reshape"), CONTIGUOUS: ("contiguous",)},
)
