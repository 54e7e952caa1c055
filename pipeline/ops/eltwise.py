"""Element-wise arithmetic of tensors (``nndct_elemwise_add``, ``nndct_elementwise_sub`` (nndct's
spelling), ``nndct_rsub`` (a number minus a tensor: torch traces ``c - x`` as ``rsub(x, c)``),
``nndct_elemwise_mul``, ``nndct_elemwise_div``). Add and mul run on the DPU; sub, rsub and div are
quantized float operators. A Python number operand becomes an ``nndct_const`` node, numbered first."""
import operator

import torch

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import XmodelForm, no_attrs

ADD = "nndct_elemwise_add"
SUB = "nndct_elementwise_sub"  # sic: nndct's spelling
RSUB = "nndct_rsub"
MULTIPLY = "nndct_elemwise_mul"
DIV = "nndct_elemwise_div"
BINARY_TYPES = (ADD, SUB, RSUB, MULTIPLY, DIV)

_DPU_Q = OpSpec("dpu", True, False, False)
_FLOAT_Q = OpSpec("float", True, False, False)


def _create_binary(type_: str):
    """The creator of XIR ``type_`` on the node's two operands (``xop_creator.py``); nndct's
    ``convert_rsub_to_sub`` writes ``rsub(x, c)`` as ``sub(c, x)``."""
    def create(w, node) -> None:
        inputs = w.data_inputs(node)
        if node.type == RSUB:
            inputs = inputs[::-1]
        w.fixed_op(node.name, type_, None, {"input": inputs})
    return create


RECORD = OpRecord(
    family="eltwise",
    specs={ADD: _DPU_Q, MULTIPLY: _DPU_Q, SUB: _FLOAT_Q, RSUB: _FLOAT_Q, DIV: _FLOAT_Q},
    functions={torch.add: ADD, operator.add: ADD, operator.iadd: ADD, torch.sub: SUB, operator.sub: SUB,
               operator.isub: SUB, torch.mul: MULTIPLY, operator.mul: MULTIPLY, operator.imul: MULTIPLY,
               torch.div: DIV, operator.truediv: DIV, operator.itruediv: DIV},
    methods={"add": ADD, "sub": SUB, "mul": MULTIPLY, "div": DIV},
    roles={"arithmetic": (ADD, SUB, MULTIPLY, DIV), "binary": BINARY_TYPES, "const_operand": BINARY_TYPES},
    approximation=Absent("add and mul are exact on aligned codes; sub, rsub and div run in float"),
    source="nndct_shared/base/key_names.py, nndct_shared/optimization/optimizer.py",
    xmodel={ADD: XmodelForm(no_attrs, _create_binary("add")), MULTIPLY: XmodelForm(no_attrs, _create_binary("mul")),
            SUB: XmodelForm(no_attrs, _create_binary("sub")), RSUB: XmodelForm(no_attrs, _create_binary("sub")),
            DIV: XmodelForm(no_attrs, _create_binary("div"))},
)
