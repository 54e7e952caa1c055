"""Concatenation along one axis (``nndct_concat``): ``torch.cat``."""
from typing import Any

import torch

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .onnx_form import arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import INS, OpDef, TO_NCHW, TO_NHWC, XirOp, attr, fail, req
from .xmodel_support import XmodelForm, rewrite_axis, simple

CONCAT = "nndct_concat"


def _onnx_cat(b: Any, node: Any, mod: None) -> str:
    """Concat along the dim (negative dims counted from the output's rank)."""
    tensors = arg(node, 0, "tensors")
    dim = int(b.static(arg(node, 1, "dim", 0)))
    return b.op("Concat", [b.tensor(t) for t in tensors], node.name, axis=dim % len(b.shape(node)))


def dpu_concat(node: Any, ctx: Any) -> Verdict:
    """Concatenation stays on the DPU unless an input comes from the CPU and it is not a
    channel-wise concatenation of 4-D tensors (vai_q_pytorch ``nndct_shared/inspector/
    device_allocator.py``)."""
    from_cpu = [name for name in node.inputs if not ctx.on_dpu(name)]
    if not from_cpu:
        return Verdict(DPU)
    if len(node.inputs) == len(from_cpu):
        return cpu_verdict("All input of concat are on CPU.", fixes=[follows(n) for n in from_cpu])
    if node.shape is None or len(node.shape) != 4 or node.attrs["dim"] % 4 != 1:
        return cpu_verdict("One of the inputs ({}) is on the CPU, and this is not a channel-wise "
                    "concatenation of 4-D tensors.".format(", ".join(from_cpu)), fixes=[follows(n) for n in from_cpu])
    return Verdict(DPU)


def _lower_concat(lo, node) -> dict:
    """The concatenated dimension (``axis``, as the call gives it; ``deploy`` makes it positive)."""
    return {"axis": lo.call_args(node)["dim"]}


def _shape_concat(op):
    """The inputs joined along ``axis``; every other dim must match ``input[0]``'s."""
    ins = op.input_list()
    first = list(ins[0].shape)
    axis = attr(op, "axis", "int32")
    axis = axis + len(first) if axis < 0 else axis
    for other in ins:
        if len(other.shape) < len(first) or not 0 <= axis < len(other.shape):
            raise fail(op, "input shape %s does not fit axis %d" % (list(other.shape), axis))
        if any(other.shape[d] != first[d] for d in range(len(first)) if d != axis):
            raise fail(op, "input shapes %s and %s differ off axis %d" % (first, list(other.shape), axis))
    return [sum(o.shape[axis] for o in ins) if d == axis else n for d, n in enumerate(first)], {}


def _run_concat(run, op, ins):
    """``torch.cat`` along ``axis``; inputs all held in NCHW memory are concatenated there."""
    xs, axis = ins["input"], op.attr("axis")
    held = [run.model_layout(x) for x in xs]
    if len({p for _, p in held}) == 1 and held[0][1] == TO_NCHW:  # all in NCHW memory: concatenate there
        y = torch.cat([t for t, _ in held], TO_NCHW.index(axis % 4))
        return y.permute(TO_NHWC)
    return torch.cat(xs, axis)


RECORD = OpRecord(
    family="concat",
    specs={CONCAT: OpSpec("dpu", True, False, False)},
    functions={torch.cat: CONCAT},
    signatures={CONCAT: (("tensors", "dim"), {"dim": 0})},
    approximation=Absent("copies codes (inputs aligned to the output's fix position)"),
    source="nndct_shared/base/key_names.py",
    onnx={CONCAT: _onnx_cat},
    dpu_rule={CONCAT: DpuRule(("concat",), dpu_concat)},
    xmodel={CONCAT: XmodelForm(_lower_concat, simple("concat", ("axis",)), layout_rewrite=rewrite_axis)},
    xir_ops={"concat": XirOp(OpDef("concat", INS, (req("axis", "int32"),), _shape_concat), _run_concat, "concat")},
    traced={CONCAT: ("cat",)},
    roles={"operand_list": (CONCAT,)},
    refusals={},
    sim={CONCAT: TORCH},
)
