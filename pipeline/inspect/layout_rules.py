"""DPU assignment rules for layout: reshape/view/flatten of a 4-D feature map (XIR holds it NHWC,
docs/targets.md#xir-is-nhwc), permute and transpose (sources in ``pipeline.inspect.rules``'
docstring: layout)."""
from typing import Optional

from pipeline.inspect.trace import OpNode
from pipeline.inspect.verdict import DPU, Context, Fix, Verdict, cpu_verdict, follows


def nhwc_permute(node: OpNode, ctx: Context) -> Verdict:
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


def view_contiguity_note(node: OpNode) -> Optional[str]:
    """``view`` on a tensor that may be non-contiguous: it works only while the strides fit the
    new shape, and fails with other input sizes; ``reshape`` and ``flatten`` always work."""
    origin = node.attrs.get("input_may_be_noncontiguous_from")
    if node.op != "view" or origin is None:
        return None
    return ("'view' on a tensor that may be non-contiguous (it comes from {!r}): it works for this "
            "input shape only because the strides happen to fit; use .reshape() or .flatten().".format(origin))


def reshape(node: OpNode, ctx: Context) -> Verdict:
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


def permute(node: OpNode, ctx: Context) -> Verdict:
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
