"""PReLU (``nndct_prelu``): a DPU activation whose slopes are a parameter. nndct's module quantizes the
slopes in its own forward, once, as a ``param`` tensor (their own fix position in quant_info.json
``param``: diffs search, std_round, like every parameter), runs ``F.prelu`` on its input with the
quantized slopes and quantizes the output (``deephi_PReLU`` in ``pytorch_nndct/nn/modules/prelu.py``).
It is in nndct's QUANTIZABLE_OPS (``nndct_shared/nndct_graph/nndctgraph_holder.py``) and no ``SoftFuse``
command groups it with its producer, so the conv before it keeps its own output fix position.

The parser (``pytorch_nndct/parse/op_dispatcher.py`` ``prelu``) makes it from torch.jit's
``aten::prelu(input, weight)``: ``nn.PReLU`` and ``F.prelu`` alike, the weight bound as the node's
parameter ``weight``, attribute ``num_parameters = weight.shape[0]``. The xmodel op is XIR ``prelu``
(``nndct_shared/compile/xop_creator.py``: ``to_xir("prelu")``, the default form): inputs ``input`` and
``weight`` (the slopes' const and its fix), attribute ``num_parameters``."""
from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_activation import activation
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import ArgDef, IN, OpDef, REQUIRED, XirOp, like_input, one
from .xmodel_support import XmodelForm

PRELU = "nndct_prelu"


def simulate(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The node's float32 output as nndct's module computes it: ``F.prelu(x, weight)`` on the (already
    quantized) input with the quantized slopes ``weight`` (shape ``(num_parameters,)``, 1 or the channels
    of dimension 1). A new tensor; ``x`` is not written."""
    return F.prelu(x, weight)


def _lower_prelu(lo: Any, node: Any) -> Dict[str, Any]:
    """``num_parameters``: the slopes' count (``op_dispatcher.prelu``: ``weight.shape[0]``)."""
    return {"num_parameters": int(lo.graph.parameter(node.param_names["weights"]).shape[0])}


def _create_prelu(w: Any, node: Any) -> None:
    """XIR ``prelu`` (``xop_creator.py``'s default creator): the data input and the bound slopes as input
    ``weight``, attribute ``num_parameters``."""
    w.with_params(node, "prelu", {"num_parameters": node.attrs["num_parameters"]})


def _run_prelu(run: Any, op: Any, ins: Any) -> torch.Tensor:
    """XIR ``prelu`` on NHWC data: ``x`` where ``x >= 0``, else ``x * weight`` (one slope, or one per channel:
    the last axis)."""
    x, w = one(ins), one(ins, "weight")
    return torch.where(x >= 0, x, torch.mul(x, w))


RECORD = OpRecord(
    family="prelu",
    specs={PRELU: OpSpec("dpu", True, False, False)},
    modules={nn.PReLU: PRELU},
    functions={F.prelu: PRELU, torch.prelu: PRELU},
    signatures={PRELU: (("input", "weight"), {})},
    roles={"norm": (PRELU,)},
    approximation=Absent("the slopes are quantized as a parameter (their own fix position) and the output at "
                         "its own: exact fix point on the DPU's ALU, nothing else approximated"),
    source="pytorch_nndct/nn/modules/prelu.py, pytorch_nndct/parse/op_dispatcher.py, "
           "nndct_shared/nndct_graph/nndctgraph_holder.py, nndct_shared/compile/xop_creator.py",
    onnx={PRELU: Absent("not written yet: ONNX Runtime's PRelu can give a zero another sign than torch where a "
                        "slope is negative, so an exact form needs its own care")},
    dpu_rule={PRELU: DpuRule(("prelu",), activation)},
    xmodel={PRELU: XmodelForm(_lower_prelu, _create_prelu)},
    xir_ops={"prelu": XirOp(OpDef("prelu", IN + (ArgDef("weight", REQUIRED),), (), like_input), _run_prelu, "prelu")},
    traced={PRELU: ("prelu",)},
    refusals={},
    sim={PRELU: TORCH},
)
