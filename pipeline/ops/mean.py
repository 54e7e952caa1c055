"""``x.mean(dims)`` (``aten::mean``): nndct has no type for it; a float operator."""
from typing import Any

import torch

from .dpu_support import Verdict, unknown
from .pool import dpu_pool
from .record import Absent, DpuRule, OpRecord, OpSpec

MEAN = "aten::mean"


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
    dpu_rule={MEAN: DpuRule(("mean",), dpu_mean)},
)
