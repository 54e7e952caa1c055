"""``x.expand(...)`` (``nndct_expand``): a float operator in nndct's warning, joining its parent's group."""
from typing import Any

from .onnx_form import Unsupported, arg
from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH

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


RECORD = OpRecord(
    family="expand",
    specs={EXPAND: OpSpec("float", False, False, True)},
    methods={"expand": EXPAND},
    approximation=Absent("repeats values, computes none"),
    source="nndct_shared/base/key_names.py",
    onnx={EXPAND: _onnx_expand},
    dpu_rule={EXPAND: Absent("a float operator of the quantizer")},
    xmodel={EXPAND: Absent("not written yet: the xmodel writer has no XIR form for it")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={},  # each type traced under its own name
    refusals={},
    sim={EXPAND: TORCH},
)
