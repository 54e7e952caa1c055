"""Arithmetic on traced sizes (``nndct_shape`` for ``x.size()``, ``x.dim()``, ``x.numel()``;
``nndct_floor_divide``; an int divided with ``rounding_mode="trunc"``, which torch traces as
``aten::div``, e.g. ``nn.MultiheadAttention``'s head_dim): Python ints, never quantized."""
import operator
from typing import Any, Dict, List

import torch

from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import CustomKernel
from .xmodel_support import XmodelForm, custom, custom_with_attrs, no_attrs

SHAPE = "nndct_shape"
FLOOR_DIVIDE = "nndct_floor_divide"
TRUNC_DIV = "aten::div"


def trunc_div(a: int, b: int) -> int:
    """``a / b`` rounded toward zero, for Python ints (``aten::div`` with ``rounding_mode="trunc"``): the
    call the inlined attention makes for its head size."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_SHAPE = OpSpec("shape", False, False, False)


def _lower_shape(lo: Any, node: Any) -> Dict[str, Any]:
    """A size read written as an op (only where its consumer takes sizes as tensors,
    ``XmodelForm.traced_sizes``): nndct's ``axis`` and the INT32 ``data_type`` its ``custom_xop`` writes
    (observed: ``tests/data/refused_real/expand_cls``, ``{axis 0, data_type INT32, shape [1]}``)."""
    if node.size_axis is None:
        raise lo.unsupported(node, "a size read of no one dimension taken as a tensor (only x.shape[i] and "
                                   "x.size(i) are written)")
    rank = lo.values[node.inputs[0].fx_node].dim()
    return {"axis": int(node.size_axis) % rank, "data_type": "INT32"}


def _size_kernel(op: Any, xs: List[torch.Tensor]) -> torch.Tensor:
    """``nndct_shape``: the input's size along ``axis`` (the file's dims), as a 1-element tensor."""
    return torch.tensor([float(xs[0].shape[int(op.attr("axis"))])], dtype=torch.float32)


RECORD = OpRecord(
    family="shape",
    specs={SHAPE: _SHAPE, FLOOR_DIVIDE: _SHAPE, TRUNC_DIV: _SHAPE},
    functions={trunc_div: TRUNC_DIV, operator.floordiv: FLOOR_DIVIDE, torch.floor_divide: FLOOR_DIVIDE},
    methods={"size": SHAPE, "dim": SHAPE, "numel": SHAPE},
    roles={"arithmetic": (FLOOR_DIVIDE, TRUNC_DIV)},
    approximation=Absent("Python integers, never on the DPU"),
    source="nndct_shared/base/key_names.py",
    onnx={op: Absent("a Python int, no tensor: read as a constant by the nodes that use it")
          for op in (SHAPE, FLOOR_DIVIDE, TRUNC_DIV)},
    dpu_rule={SHAPE: Absent("a Python int from sizes, no tensor"),
              FLOOR_DIVIDE: Absent("a Python int from sizes, no tensor"),
              TRUNC_DIV: Absent("a Python int from sizes, no tensor")},
    # shape arithmetic is evaluated on the example and folded into the attributes that use it (nndct's
    # constant folding); a trunc division of tensors is a custom op
    # (a size read some consumer takes as a tensor is written as the custom op nndct_shape: lower.size_kept)
    xmodel={SHAPE: XmodelForm(_lower_shape, custom_with_attrs),
            FLOOR_DIVIDE: Absent("folded: evaluated on the example into the attributes that use it"),
            TRUNC_DIV: XmodelForm(no_attrs, custom)},
    xir_ops=Absent("folded, or a custom op (aten::div: a type XIR does not define)"),
    custom_kernels={SHAPE: CustomKernel(_size_kernel, True),
                    TRUNC_DIV: Absent("the file carries no rounding mode: the caller's float_ops (the "
                                      "simulation's call) compute it")},
    traced={SHAPE: ("size",)},  # x.shape[i] is traced as aten::size
    refusals={},
    sim=dict.fromkeys((SHAPE, FLOOR_DIVIDE, TRUNC_DIV), TORCH),
)
