"""Matrix products of two tensors (``nndct_matmul``): ``x @ y``, ``torch.matmul``."""
import operator
from typing import Any

import torch

from .dpu_support import Verdict, cpu_verdict
from .onnx_form import arg
from .record import Absent, DpuRule, OpRecord, OpSpec

MATMUL = "nndct_matmul"


def _onnx_matmul(b: Any, node: Any, mod: None) -> str:
    """``a @ b`` (torch.matmul, Tensor.matmul): MatMul, the same broadcasting rules."""
    return b.op("MatMul", [b.tensor(arg(node, 0, "input")), b.tensor(arg(node, 1, "other"))], node.name)


def dpu_matmul(node: Any, ctx: Any) -> Verdict:
    """A product of two feature maps (attention's ``q @ k^T``, ``attn @ v``): the conv engines take
    their second operand from weights, not from another layer's output."""
    return cpu_verdict("matmul can't be assigned to DPU: it multiplies two feature maps, and {} takes the "
                "second operand of a product from weights only.".format(ctx.target.name))


RECORD = OpRecord(
    family="matmul",
    specs={MATMUL: OpSpec("dpu", True, False, False)},
    functions={operator.matmul: MATMUL, torch.matmul: MATMUL},
    methods={"matmul": MATMUL},
    approximation=Absent("integer products, exact fixed point"),
    source="nndct_shared/base/key_names.py",
    onnx={MATMUL: _onnx_matmul},
    dpu_rule={MATMUL: DpuRule(("matmul",), dpu_matmul)},
    xmodel={MATMUL: Absent("not written yet: the real quantizer writes it as XIR matmul (fx/refusals.py MATMUL)")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it yet"),
    traced={},  # each type traced under its own name
)
