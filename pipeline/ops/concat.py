"""Concatenation along one axis (``nndct_concat``): ``torch.cat``."""
from typing import Any

import torch

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .onnx_form import arg
from .record import Absent, DpuRule, OpRecord, OpSpec

CONCAT = "nndct_concat"


def _onnx_cat(b: Any, node: Any, mod: None) -> str:
    """Concat along the dim (negative dims counted from the output's rank)."""
    tensors = arg(node, 0, "tensors")
    dim = int(b.static(arg(node, 1, "dim", 0)))
    return b.op("Concat", [b.tensor(t) for t in tensors], node.name, axis=dim % len(b.shape(node)))


def dpu_concat(node: Any, ctx: Any) -> Verdict:
    """Concatenation stays on the DPU unless an input comes from the CPU and it is not a
    channel-wise concatenation of 4-D tensors (vai_q_pytorch ``nndct_shared/inspector/
    device_allocator.py``)."""
    from_cpu = [name for name in node.inputs if not ctx.on_dpu(name)]
    if not from_cpu:
        return Verdict(DPU)
    if len(node.inputs) == len(from_cpu):
        return cpu_verdict("All input of concat are on CPU.", fixes=[follows(n) for n in from_cpu])
    if node.shape is None or len(node.shape) != 4 or node.attrs["dim"] % 4 != 1:
        return cpu_verdict("One of the inputs ({}) is on the CPU, and this is not a channel-wise "
                    "concatenation of 4-D tensors.".format(", ".join(from_cpu)), fixes=[follows(n) for n in from_cpu])
    return Verdict(DPU)


RECORD = OpRecord(
    family="concat",
    specs={CONCAT: OpSpec("dpu", True, False, False)},
    functions={torch.cat: CONCAT},
    signatures={CONCAT: (("tensors", "dim"), {"dim": 0})},
    approximation=Absent("copies codes (inputs aligned to the output's fix position)"),
    source="nndct_shared/base/key_names.py",
    onnx={CONCAT: _onnx_cat},
    dpu_rule={CONCAT: DpuRule(("concat",), dpu_concat)},
)
