"""Matrix products of two tensors (``nndct_matmul``): ``x @ y``, ``torch.matmul``."""
import operator
from typing import Any, Dict

import torch

from .dpu_support import Verdict, cpu_verdict
from .onnx_form import arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xmodel_support import XmodelForm

MATMUL = "nndct_matmul"


def _onnx_matmul(b: Any, node: Any, mod: None) -> str:
    """``a @ b`` (torch.matmul, Tensor.matmul): MatMul, the same broadcasting rules."""
    return b.op("MatMul", [b.tensor(arg(node, 0, "input")), b.tensor(arg(node, 1, "other"))], node.name)


def _lower_matmul(lo: Any, node: Any) -> Dict[str, bool]:
    """nndct's ``Matmul`` attributes (``operator_definition.py``), both False; the deploy graph's
    ``fuse_transpose_matmul`` sets ``transpose_b`` where a last-two-dims transpose feeds the second operand
    (``quantizers/sim/xmodel/deploy.py``)."""
    return {"transpose_a": False, "transpose_b": False}


def _create_matmul(w: Any, node: Any) -> None:
    """XIR ``matmul`` of the two operands (``xop_creator.py`` ``default_xop``: each input fixed, the node's
    ``transpose_a``/``transpose_b``, no bias); XIR's op and its interpreter kernel are the dense unit's."""
    w.fixed_op(node.name, "matmul", {"transpose_a": bool(node.attrs["transpose_a"]),
                                     "transpose_b": bool(node.attrs["transpose_b"])},
               {"input": w.data_inputs(node)})


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
    xmodel={MATMUL: XmodelForm(_lower_matmul, _create_matmul)},
    xir_ops=Absent("XIR matmul is held by the dense unit (its definition, shape inference and kernel)"),
    traced={MATMUL: ("matmul",)},
    refusals={},
    sim={MATMUL: TORCH},
)
