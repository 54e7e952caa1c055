"""Matrix products of two tensors (``nndct_matmul``): ``x @ y``, ``torch.matmul``."""
import operator
from typing import Any

import torch

from .dpu_support import Verdict, cpu_verdict
from .onnx_form import arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .refusal import Known, NOT_YET, REAL_QUANTIZER, XMODEL
from .sim_support import TORCH

MATMUL = "nndct_matmul"

# a product of two tensors: the xmodel writer has no XIR matmul yet (a product by a weight is a dense)
MATMUL_ROW = Known(
    what="matmul of two tensors", kind=NOT_YET, stops=frozenset((XMODEL,)), several=False,
    real="the real quantizer writes it as XIR matmul",
    instead=REAL_QUANTIZER + "; the ONNX exports carry it")


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
    xmodel={MATMUL: Absent("not written yet: the real quantizer writes it as XIR matmul (refusals: MATMUL_ROW)")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it yet"),
    traced={},  # each type traced under its own name
    refusals={operator.matmul: MATMUL_ROW, torch.matmul: MATMUL_ROW, "matmul": MATMUL_ROW},
    sim={MATMUL: TORCH},
)
