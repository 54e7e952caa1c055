"""Concatenation along one axis (``nndct_concat``): ``torch.cat``."""
from typing import Any

import torch

from .record import Absent, OpRecord, OpSpec
from .onnx_form import arg

CONCAT = "nndct_concat"

def _onnx_cat(b: Any, node: Any, mod: None) -> str:
    """Concat along the dim (negative dims counted from the output's rank)."""
    tensors = arg(node, 0, "tensors")
    dim = int(b.static(arg(node, 1, "dim", 0)))
    return b.op("Concat", [b.tensor(t) for t in tensors], node.name, axis=dim % len(b.shape(node)))


RECORD = OpRecord(
    family="concat",
    specs={CONCAT: OpSpec("dpu", True, False, False)},
    functions={torch.cat: CONCAT},
    signatures={CONCAT: (("tensors", "dim"), {"dim": 0})},
    approximation=Absent("copies codes (inputs aligned to the output's fix position)"),
    source="nndct_shared/base/key_names.py",
    onnx={CONCAT: _onnx_cat},
)
