"""``x.mean(dims)`` (``aten::mean``): nndct has no type for it; a float operator."""
from typing import Any

import torch

from .dpu_support import Verdict, unknown
from .onnx_form import Unsupported, arg
from .pool import dpu_pool
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xmodel_support import XmodelForm, custom, no_attrs

MEAN = "aten::mean"


def _onnx_mean(b: Any, node: Any, mod: None) -> str:
    """``mean(dim, keepdim)`` as ReduceSum then Div by the count: torch's sum and division, exact
    on quantized inputs (their partial sums are exact in any order)."""
    rank = len(b.shape(node.args[0]))
    dim = b.static(arg(node, 1, "dim", None))
    dims = list(range(rank)) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    axes = sorted(int(d) % rank for d in dims)
    keep = int(bool(b.static(arg(node, 2, "keepdim", False))))
    if node.kwargs.get("dtype") is not None:
        raise Unsupported("mean with a dtype")
    count = 1
    for a in axes:
        count *= b.shape(node.args[0])[a]
    total = b.op("ReduceSum", [b.tensor(node.args[0]), b.ints(node.name + "/axes", axes)], node.name + "/sum",
                 keepdims=keep)
    return b.op("Div", [total, b.scalar(node.name + "/count", float(count))], node.name)


def dpu_mean(node: Any, ctx: Any) -> Verdict:
    """A mean over the spatial dimensions of a 4-D tensor is a global average pool; any other mean
    is not modelled."""
    src = ctx.producer(node)
    dims = sorted(d % 4 for d in node.attrs.get("dim", [])) if src.shape and len(src.shape) == 4 else []
    if dims == [2, 3]:
        return dpu_pool(node, ctx)
    return unknown(node, ctx)


RECORD = OpRecord(
    family="mean",
    specs={MEAN: OpSpec("float", False, False, False)},
    functions={torch.mean: MEAN},
    methods={"mean": MEAN},
    approximation=Absent("a float operator on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
    onnx={MEAN: _onnx_mean},
    dpu_rule={MEAN: DpuRule(("mean",), dpu_mean)},
    xmodel={MEAN: XmodelForm(no_attrs, custom)},  # a custom op: XIR's reduction_mean is not what nndct writes
    xir_ops=Absent("a custom op (aten::mean: a type XIR does not define; the interpreter's own)"),
    traced={MEAN: ("mean",)},
    refusals={},
    sim={MEAN: TORCH},
)
