"""Ops that view data in a new shape (``nndct_flatten``, ``nndct_reshape``, ``nndct_contiguous``,
``nndct_squeeze``, ``nndct_unsqueeze``): never their own fix position, they defer to their producer."""
import math
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

from .dpu_support import DPU, Fix, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, alias
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import (ArgDef, IN, INS, OPTIONAL, OpDef, SHAPE_INFO, XirOp, attr, const_ints, fail, one, op_input,
                          opt, req, shape_info, unsupported, with_info)
from .xmodel_support import XmodelForm, custom, no_attrs

FLATTEN = "nndct_flatten"
RESHAPE = "nndct_reshape"
CONTIGUOUS = "nndct_contiguous"
SQUEEZE = "nndct_squeeze"
UNSQUEEZE = "nndct_unsqueeze"


def _onnx_reshape(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """flatten / view / reshape / squeeze / unsqueeze: Reshape to the recorded output shape, -1 at the one
    dimension that follows the batch size."""
    target = list(b.shape(node))
    batch = b.batch_dims(node)
    if len(batch) > 1:
        raise Unsupported("the batch size reaches %d output dimensions" % len(batch))
    for i in batch:
        target[i] = -1
    return b.op("Reshape", [b.tensor(node.args[0]), b.ints(node.name + "/shape", target)], node.name)

def nhwc_permute(node: Any, ctx: Any) -> Verdict:
    """A reshape/flatten/view of a 4-D NCHW feature map: XIR holds it NHWC, so the quantizer inserts
    a permute NHWC -> NCHW in front (docs/targets.md#xir-is-nhwc). When C or H x W is 1 the two orders agree and no
    data moves; a tensor already permuted in the model needs nothing. Followed by a dense layer
    alone, the permute merges into the dense; otherwise it and the reshape go to the CPU."""
    src = ctx.producer(node)
    if src.shape is None or len(src.shape) != 4 or src.op in ("permute", "transpose"):
        return Verdict(DPU)
    if src.shape[1] == 1 or src.shape[2] * src.shape[3] == 1:
        return Verdict(DPU, [], ["PyTorch's NCHW order equals XIR's NHWC order here ({}: C or H x W"
                                 " is 1), so the layout change moves no data.".format(list(src.shape))])
    note = ("quantizer inserts a permute to convert data layout from 'NHWC' to 'NCHW' before this "
            "{} (input {} {}).".format(node.op, src.name, list(src.shape)))
    users = ctx.consumers[node.name]
    if len(users) == 1 and ctx.nodes[users[0]].op == "dense":
        return Verdict(DPU, [], [note, "the permute merges into the following dense {!r}, which "
                                       "reads its weights in NHWC order.".format(users[0])])
    return cpu_verdict("Try to assign permute(order=(0, 3, 1, 2)) + {} to DPU failed: the DPU has no engine "
                "to reorder a {} feature map from NHWC to NCHW.".format(node.op, list(src.shape)),
                notes=[note, "to keep it on the DPU, flatten in NHWC order: "
                             "x.permute(0, 2, 3, 1).reshape(x.shape[0], -1) (the next layer then sees "
                             "the elements in another order: retrain, or permute its weights), or "
                             "pool to 1 x 1 first."],
                fixes=[Fix("flatten in XIR's NHWC order; the next layer then reads the elements in another order "
                           "(permute a dense layer's weights to match, or retrain), or pool to 1 x 1 first.",
                           "torch.flatten(x, 1) -> x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)", exact=False)])


def view_contiguity_note(node: Any) -> Optional[str]:
    """``view`` on a tensor that may be non-contiguous: it works only while the strides fit the
    new shape, and fails with other input sizes; ``reshape`` and ``flatten`` always work."""
    origin = node.attrs.get("input_may_be_noncontiguous_from")
    if node.op != "view" or origin is None:
        return None
    return ("'view' on a tensor that may be non-contiguous (it comes from {!r}): it works for this "
            "input shape only because the strides happen to fit; use .reshape() or .flatten().".format(origin))


def dpu_reshape(node: Any, ctx: Any) -> Verdict:
    """reshape, view and flatten: on the DPU when their input is (real message "The input of
    reshape is not on DPU."), subject to the NHWC permute rule, with the view contiguity note."""
    src = ctx.producer(node)
    view_note = view_contiguity_note(node)
    if not ctx.on_dpu(src.name):
        verdict = cpu_verdict("The input of reshape is not on DPU.", fixes=[follows(src.name)])
    else:
        verdict = nhwc_permute(node, ctx)
    if view_note:
        verdict.notes.append(view_note)
    return verdict


def _lower_flatten(lo, node) -> dict:
    """start_dim and end_dim; ``deploy.optimize`` makes the node a reshape."""
    m = lo.module(node)
    a = {"start_dim": m.start_dim, "end_dim": m.end_dim} if m is not None else lo.call_args(node)
    return {"start_dim": a["start_dim"], "end_dim": a["end_dim"]}


def _lower_reshape(lo, node) -> dict:
    """The target shape (``shape``), traced sizes evaluated on the example."""
    return {"shape": lo.shape_args(node)}


def _lower_squeeze(lo, node) -> dict:
    """squeeze / unsqueeze: the dim given (None: every dim of size 1, squeeze only). ``deploy.optimize``
    makes the node a reshape to its output shape, as nndct's ``convert_reshapelike_to_reshape`` does
    (role ``reshape_like``), so this attribute never reaches the file."""
    fx_node = node.fx_node
    dim = fx_node.args[1] if len(fx_node.args) > 1 else fx_node.kwargs.get("dim")
    return {"dim": lo.value(dim)}


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
    onnx={FLATTEN: _onnx_reshape, RESHAPE: _onnx_reshape, CONTIGUOUS: alias, SQUEEZE: _onnx_reshape,
          UNSQUEEZE: _onnx_reshape},
    dpu_rule={FLATTEN: DpuRule(("flatten",), dpu_reshape), RESHAPE: DpuRule(("reshape", "view"), dpu_reshape),
              CONTIGUOUS: Absent("removed before deployment: the inspector re-links its readers to its input"),
              UNSQUEEZE: DpuRule(("unsqueeze",), dpu_reshape), SQUEEZE: DpuRule(("squeeze",), dpu_reshape)},
    # flatten, squeeze, unsqueeze and contiguous: deploy.optimize makes the first three reshapes (role
    # reshape_like) and removes contiguous before the writer runs
    xmodel={FLATTEN: XmodelForm(_lower_flatten, custom),
            RESHAPE: XmodelForm(_lower_reshape, _create_reshape, layout_rewrite=_rewrite_shape, param_operands=True),
            CONTIGUOUS: XmodelForm(no_attrs, custom),
            UNSQUEEZE: XmodelForm(_lower_squeeze, custom),
            SQUEEZE: XmodelForm(_lower_squeeze, custom)},
    custom_kernels={FLATTEN: Absent("never written as a custom op: deploy.optimize makes it a reshape first"),
                    CONTIGUOUS: Absent("never written: deploy.optimize removes it first"),
                    UNSQUEEZE: Absent("never written as a custom op: deploy.optimize makes it a reshape first"),
                    SQUEEZE: Absent("never written as a custom op: deploy.optimize makes it a reshape first")},
    xir_ops={"reshape": XirOp(OpDef("reshape", IN + (ArgDef("shape", OPTIONAL),), (opt("shape", "int32_vec", [0]),),
                                    _shape_reshape), lambda run, op, ins: one(ins).reshape(op.shape), "reshape"),
             "stack": XirOp(OpDef("stack", INS, (req("axis", "int32"),), _shape_stack),
                            lambda run, op, ins: torch.stack(ins["input"], op.attr("axis")), "stack")},
    traced={FLATTEN: ("flatten",), RESHAPE: ("view", "reshape"), CONTIGUOUS: ("contiguous",),
            UNSQUEEZE: ("unsqueeze",), SQUEEZE: ("squeeze",)},
    refusals={},
    sim=dict.fromkeys((FLATTEN, RESHAPE, CONTIGUOUS, UNSQUEEZE, SQUEEZE), TORCH),
    # nndct's deploy graph makes these a reshape to their output shape (``convert_reshapelike_to_reshape``)
    roles={"reshape_like": (FLATTEN, SQUEEZE, UNSQUEEZE)},
)
