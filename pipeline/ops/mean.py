"""``x.mean(dims)`` (``aten::mean``): nndct has no type for it; a float operator."""
from typing import Any, List

import torch

from .dpu_support import Verdict, unknown
from .onnx_form import Unsupported, arg
from .pool import dpu_pool
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import CustomKernel
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


def _mean_kernel(op: Any, xs: List[torch.Tensor]) -> torch.Tensor:
    """``aten::mean`` without the model (the interpreter's fallback where the caller gives no ``float_ops``):
    over the dims the output drops. Equal ranks (keepdim): the dims that are 1 in the output and not in the
    input. Fewer dims: input and output dims matched left to right, each input dim that does not match the
    next output dim reduced (``[1, 8, 14, 14] -> [1, 8]`` is the mean over dims 2 and 3).

    Raises:
        ValueError: the dims reduced cannot be told from the output's (the caller then passes float_ops).
    """
    x = xs[0]
    dims, out = list(x.shape), list(op.shape)
    if len(out) == len(dims):
        reduce = [i for i, (a, b) in enumerate(zip(dims, out)) if b == 1 and a != 1]
        return torch.mean(x, reduce, keepdim=True) if reduce else x
    reduce, j = [], 0
    for i, d in enumerate(dims):
        if j < len(out) and d == out[j] and len(dims) - i > len(out) - j - 1:
            j += 1
        else:
            reduce.append(i)
    if j != len(out):
        raise ValueError("cannot tell which dims of %s give %s; pass float_ops" % (dims, out))
    return torch.mean(x, reduce)


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
    xir_ops=Absent("a custom op (aten::mean: a type XIR does not define; custom_kernels)"),
    custom_kernels={MEAN: CustomKernel(_mean_kernel, False)},  # the caller's float_ops first: the exact dims
    traced={MEAN: ("mean",)},
    refusals={},
    sim={MEAN: TORCH},
)
