"""Ops that view data in a new shape (``nndct_flatten``, ``nndct_reshape``, ``nndct_contiguous``,
``nndct_squeeze``, ``nndct_unsqueeze``): never their own fix position, they defer to their producer."""
from typing import Any, Optional

import torch
from torch import nn

from .dpu_support import DPU, Fix, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, alias
from .record import Absent, DpuRule, OpRecord, OpSpec

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
)
