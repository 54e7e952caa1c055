"""Matrix products of two tensors (``nndct_matmul``): ``x @ y``, ``torch.matmul``."""
import operator
from typing import Any

import torch

from .record import Absent, OpRecord, OpSpec
from .onnx_form import arg

MATMUL = "nndct_matmul"

def _onnx_matmul(b: Any, node: Any, mod: None) -> str:
    """``a @ b`` (torch.matmul, Tensor.matmul): MatMul, the same broadcasting rules."""
    return b.op("MatMul", [b.tensor(arg(node, 0, "input")), b.tensor(arg(node, 1, "other"))], node.name)


RECORD = OpRecord(
    family="matmul",
    specs={MATMUL: OpSpec("dpu", True, False, False)},
    functions={operator.matmul: MATMUL, torch.matmul: MATMUL},
    methods={"matmul": MATMUL},
    approximation=Absent("integer products, exact fixed point"),
    source="nndct_shared/base/key_names.py",
    onnx={MATMUL: _onnx_matmul},
)
