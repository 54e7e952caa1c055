"""``x.expand(...)`` (``nndct_expand``): a float operator in nndct's warning, joining its parent's group."""
from typing import Any, List

import torch

from .onnx_form import Unsupported, arg
from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import CustomKernel
from .xmodel_support import XmodelForm, custom, no_attrs

EXPAND = "nndct_expand"


def _onnx_expand(b: Any, node: Any, mod: None) -> str:
    """``x.expand(n, -1, ...)`` where only batch-size-1 dimensions grow with the batch (ViT's class
    token): an Expand to the recorded shape whose batch dimension is the model input's (copies, no
    arithmetic)."""
    x = arg(node, 0, "self")
    shape = list(b.shape(node))
    batch = b.batch_dims(node)
    if len(batch) > 1 or any(shape[i] != 1 for i in batch) or any(i in b.batch_dims(x) for i in batch):
        raise Unsupported("only an expand whose one batch-sized dimension is 1 at batch 1")
    if not batch:
        return b.op("Expand", [b.tensor(x), b.ints(node.name + "/shape", shape)], node.name)
    first = next(iter(b.input_names.values()))
    n = b.op("Shape", [first], node.name + "/input_shape")
    n = b.op("Slice", [n, b.ints(node.name + "/zero", [0]), b.ints(node.name + "/one", [1])], node.name + "/batch")
    parts = [b.ints(node.name + "/dim%d" % i, [d]) if i not in batch else n for i, d in enumerate(shape)]
    target = b.op("Concat", parts, node.name + "/shape", axis=0)
    return b.op("Expand", [b.tensor(x), target], node.name)


def _expand_kernel(op: Any, xs: List[torch.Tensor]) -> torch.Tensor:
    """``nndct_expand``: the first input (the tensor) expanded to the op's output dims; the other inputs
    are the traced sizes (``nndct_shape``), which give those dims at the file's batch."""
    return xs[0].expand([int(d) for d in op.shape])


RECORD = OpRecord(
    family="expand",
    specs={EXPAND: OpSpec("float", False, False, True)},
    methods={"expand": EXPAND},
    approximation=Absent("repeats values, computes none"),
    source="nndct_shared/base/key_names.py",
    onnx={EXPAND: _onnx_expand},
    dpu_rule={EXPAND: Absent("a float operator of the quantizer")},
    # the custom op nndct_expand on the tensor and the traced sizes, the class token as its float const
    # (observed: tests/data/refused_real/expand_cls; nndct's custom_xop)
    xmodel={EXPAND: XmodelForm(no_attrs, custom, traced_sizes=True, param_operands=True)},
    xir_ops=Absent("a custom op (nndct_expand: a type XIR does not define)"),
    custom_kernels={EXPAND: CustomKernel(_expand_kernel, True)},
    traced={EXPAND: ("expand",)},
    refusals={},
    sim={EXPAND: TORCH},
)
