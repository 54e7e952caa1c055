"""Arithmetic on traced sizes (``nndct_shape`` for ``x.size()``, ``x.dim()``, ``x.numel()``;
``nndct_floor_divide``; an int divided with ``rounding_mode="trunc"``, which torch traces as
``aten::div``, e.g. ``nn.MultiheadAttention``'s head_dim): Python ints, never quantized."""
import operator

import torch

from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH
from .xmodel_support import XmodelForm, custom, no_attrs

SHAPE = "nndct_shape"
FLOOR_DIVIDE = "nndct_floor_divide"
TRUNC_DIV = "aten::div"


def trunc_div(a: int, b: int) -> int:
    """``a / b`` rounded toward zero, for Python ints (``aten::div`` with ``rounding_mode="trunc"``): the
    call the inlined attention makes for its head size."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_SHAPE = OpSpec("shape", False, False, False)

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
    xmodel={SHAPE: Absent("folded: evaluated on the example into the attributes that use it"),
            FLOOR_DIVIDE: Absent("folded: evaluated on the example into the attributes that use it"),
            TRUNC_DIV: XmodelForm(no_attrs, custom)},
    xir_ops=Absent("folded, or a custom op (aten::div: a type XIR does not define)"),
    traced={},  # each type traced under its own name
    refusals={},
    sim=dict.fromkeys((SHAPE, FLOOR_DIVIDE, TRUNC_DIV), TORCH),
)
