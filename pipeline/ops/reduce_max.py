"""The maximum over a dim with its indices (``x.max(dim)``, ``torch.max(x, dim)``): nndct's ``nndct_max``
(``pytorch_nndct/parse/op_dispatcher.py``, ``max``: a ``TorchPermuteInvarOp`` of type MAX), a quantizable
node (``nndct_graph/nndctgraph_holder.py``, QUANTIZABLE_OPS) with two outputs, values and indices: torch.jit
traces ``aten::max`` with two outputs and indexing them is no op of the trace. Its quant_info entry has one
pair per output, the indices' without a fix position (``[[8, 6], [8, null]]``: an int64 tensor nndct never
quantizes). The simulation runs torch's call and quantizes the values. The xmodel writer writes XIR
``reduction_max`` of the values (``xop_creator.py``: ``to_xir("reduction_max")``), a permute-invariant op: with
``keepdim`` it keeps the rank and takes the NHWC layout, its axis moved (``attr_transform.py``,
``reduce_op_attr_transform_fn``); without, it changes the rank and runs in NCHW after a sink transpose. The
ONNX exporter refuses it. ``x.max()`` and ``torch.max(a, b)`` give one tensor: they stay float operators
(``aten::max``), which the stages take or refuse for their own reasons."""
from typing import Any, Dict, Sequence

import torch

from .dpu_support import unknown
from .record import Absent, DpuRule, OpRecord, OpSpec
from .refusal import Known, NOT_YET, ONNX, REAL_QUANTIZER
from .sim_support import TORCH
from .xir_support import IN, OpDef, XirOp, attr, fail, one, op_input, req, shape_info, with_info
from .xmodel_support import XmodelForm, simple

MAX = "nndct_max"

MAX_DIM = Known(
    what="max over a dim (values and indices)", kind=NOT_YET, stops=frozenset((ONNX,)), several=True,
    real="the real quantizer writes it as XIR reduction_max",
    instead=REAL_QUANTIZER + "; calibration and test here are not affected")



def _lower_max(lo: Any, node: Any) -> Dict[str, Any]:
    """The deploy attributes of ``max(input, dim, keepdim)``: ``axis`` the dim made non-negative
    (``deploy_optimizer.py``), ``keep_dims``."""
    args = lo.call_args(node)
    rank = lo.values[node.fx_node.args[0]].dim()
    return {"axis": [int(args["dim"]) % rank], "keep_dims": bool(args["keepdim"])}


def _rewrite_axis(node: Any, order: Sequence[int]) -> None:
    """Each reduced axis moved with the layout ``order`` (``reduce_op_attr_transform_fn``)."""
    node.attrs["axis"] = [list(order).index(a) for a in node.attrs["axis"]]


def _shape_reduction_max(op: Any) -> Any:
    """XIR's shape inference of ``reduction_max`` (``shape_inference.cpp``): the ``axis`` dims removed, kept as
    1 with ``keep_dims``; an input ``shape_info`` (constant sizes) becomes its maximum, for one axis or axes
    from 0."""
    dims, axes = list(op_input(op).shape), attr(op, "axis", "int32_vec")
    if any(not -len(dims) <= a < len(dims) for a in axes):
        raise fail(op, "axis %s out of range for input %s" % (axes, dims))
    marked = {a % len(dims) for a in axes}
    keep = attr(op, "keep_dims", "bool")
    out = [1 if i in marked else d for i, d in enumerate(dims) if keep or i not in marked]
    info = shape_info(op_input(op))
    if info is None:
        return out, {}
    if not axes or len(axes) != 1 and axes[0] != 0:
        raise fail(op, "axis %s cannot fold shape_info %s" % (axes, info))
    return with_info(out, [max([0] + info)])


def _run_reduction_max(run: Any, op: Any, ins: Any) -> Any:
    """``torch.amax`` over ``axis`` in the simulation's memory layout (the values of ``torch.max(x, dim)``:
    the same maximum), the reduced dims dropped unless ``keep_dims``."""
    y = run.in_model_layout(one(ins), list(op.attr("axis")), lambda t, a: torch.amax(t, a, keepdim=True))
    return y if op.attr("keep_dims") else y.reshape(op.shape)


RECORD = OpRecord(
    family="reduce_max",
    specs={MAX: OpSpec("dpu", True, False, False)},
    several={"aten::max": (MAX, 2)},
    signatures={MAX: (("input", "dim", "keepdim"), {"keepdim": False})},
    approximation=Absent("torch's own call is the DPU's arithmetic: a maximum is exact"),
    source="nndct_shared/base/key_names.py (MAX), pytorch_nndct/parse/op_dispatcher.py (max), "
           "nndct_shared/nndct_graph/nndctgraph_holder.py (QUANTIZABLE_OPS), "
           "pytorch_nndct/quantization/torch_qstrategy.py (create_quant_config)",
    onnx={MAX: Absent("not written yet: the ONNX exporter has no lowering for max over a dim")},
    dpu_rule={MAX: DpuRule(("max",), unknown)},  # not modelled: the inspector says so (an xmodel's reduction_max)
    xmodel={MAX: XmodelForm(_lower_max, simple("reduction_max", ("axis", "keep_dims")), layout_rewrite=_rewrite_axis)},
    xir_ops={"reduction_max": XirOp(OpDef("reduction_max", IN, (req("axis", "int32_vec"), req("keep_dims", "bool")),
                                          _shape_reduction_max), _run_reduction_max, "max")},
    traced={MAX: ("max",)},
    refusals={torch.max: MAX_DIM, "max": MAX_DIM},
    sim={MAX: TORCH},
)
