"""Element-wise arithmetic of tensors (``nndct_elemwise_add``, ``nndct_elementwise_sub`` (nndct's
spelling), ``nndct_rsub`` (a number minus a tensor: torch traces ``c - x`` as ``rsub(x, c)``),
``nndct_elemwise_mul``, ``nndct_elemwise_div``). Add and mul run on the DPU; sub, rsub and div are
quantized float operators. A Python number operand becomes an ``nndct_const`` node, numbered first."""
import operator
from typing import Any, Callable

import torch

from .dpu_support import DPU, Fix, Verdict, cpu_verdict, unknown
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec

ADD = "nndct_elemwise_add"
SUB = "nndct_elementwise_sub"  # sic: nndct's spelling
RSUB = "nndct_rsub"
MULTIPLY = "nndct_elemwise_mul"
DIV = "nndct_elemwise_div"
BINARY_TYPES = (ADD, SUB, RSUB, MULTIPLY, DIV)


def dpu_eltwise(node: Any, ctx: Any) -> Verdict:
    """Element-wise add and multiply of two feature maps of the same shape on the eltwise engine
    (DPUCV2DX8G: its ALU)."""
    kind = "add" if node.op == "add" else "mult"
    if node.attrs.get("tensor_operands") != 2:
        return unknown(node, ctx, "an element-wise {} with a constant operand".format(kind))
    engine = ctx.target.engines.eltwise_for(kind)
    if engine is None:
        return cpu_verdict("{} does not support eltwise {}.".format(ctx.target.name, kind.upper()))
    shapes = [ctx.nodes[name].shape for name in node.inputs]
    if len(set(shapes)) != 1:
        return cpu_verdict("DPU eltwise {} needs two inputs of the same shape; got {} "
                    "(broadcasting is not supported).".format(kind, " and ".join(map(str, shapes))),
                    fixes=[Fix("make both operands the same shape in the model (e.g. the smaller one made by a "
                               "layer of the full size) instead of broadcasting.", exact=False)])
    return Verdict(DPU)


_DPU_Q = OpSpec("dpu", True, False, False)
_FLOAT_Q = OpSpec("float", True, False, False)


def _onnx_binary(op_type: str) -> Callable[[Any, Any, Any], str]:
    """The form of a binary op: ONNX ``op_type`` of the two operands, a Python number as a float32 scalar."""
    def form(b: Any, node: Any, mod: None) -> str:
        if b.static(node.kwargs.get("alpha", 1)) != 1 or node.kwargs.get("rounding_mode") is not None:
            raise Unsupported("alpha != 1 or a rounding_mode")
        a, c = arg(node, 0, "input"), arg(node, 1, "other")
        return b.op(op_type, [b.operand(a, node.name + "/a"), b.operand(c, node.name + "/b")], node.name)
    return form


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
    onnx={ADD: _onnx_binary("Add"), SUB: _onnx_binary("Sub"), MULTIPLY: _onnx_binary("Mul"), DIV: _onnx_binary("Div"),
          RSUB: Absent("no call of the lowered model is an rsub: ``c - x`` is operator.sub, written as Sub with "
                       "the number as a constant")},
    dpu_rule={ADD: DpuRule(("add",), dpu_eltwise), MULTIPLY: DpuRule(("mul",), dpu_eltwise),
              SUB: Absent("a float operator of the quantizer"), RSUB: Absent("a float operator of the quantizer"),
              DIV: Absent("a float operator of the quantizer")},
)
