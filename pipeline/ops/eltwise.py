"""Element-wise arithmetic of tensors (``nndct_elemwise_add``, ``nndct_elementwise_sub`` (nndct's
spelling), ``nndct_rsub`` (a number minus a tensor: torch traces ``c - x`` as ``rsub(x, c)``),
``nndct_elemwise_mul``, ``nndct_elemwise_div``). Add and mul run on the DPU; sub, rsub and div are
quantized float operators. A Python number operand becomes an ``nndct_const`` node, numbered first."""
import operator
from typing import Any, Callable

import torch

from .dpu_support import DPU, Fix, Verdict, cpu_verdict, unknown
from .hard_sigmoid import hard_sigmoid_mul
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import (INS, OpDef, XirOp, broadcast, cdiv, const_ints, fail, fold, op_input, shape_info,
                          unsupported, with_info)
from .xmodel_support import XmodelForm, no_attrs

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


def _create_binary(type_: str):
    """The creator of XIR ``type_`` on the node's two operands (``xop_creator.py``); nndct's
    ``convert_rsub_to_sub`` writes ``rsub(x, c)`` as ``sub(c, x)``."""
    def create(w, node) -> None:
        inputs = w.data_inputs(node)
        if node.type == RSUB:
            inputs = inputs[::-1]
        w.fixed_op(node.name, type_, None, {"input": inputs})
    return create


def _shape_mul(op):
    """mul: broadcast; when ``input[0]`` has ``shape_info``, the element-wise product of it and the data
    of the last const input (an empty ``shape_info`` when their lengths differ)."""
    dims, _ = broadcast(op)
    info = shape_info(op_input(op))
    if info is None:
        return dims, {}
    factors = []
    for src in op.input_list():
        if "data" in src.attrs:
            factors = const_ints(op, src)
    return with_info(dims, [a * b for a, b in zip(info, factors)] if len(info) == len(factors) else [])


def _shape_div(op):
    """div: broadcast; when ``input[0]`` has ``shape_info``, it divided (C++ integer division) by the data
    of ``input[1]``, one value for all or one per entry."""
    dims, _ = broadcast(op)
    info = shape_info(op_input(op))
    if info is None:
        return dims, {}
    base = const_ints(op, op_input(op, "input", 1))
    if len(base) == 1:
        base = base * len(info)
    elif len(base) != len(info):
        raise fail(op, "shape_info %s and divisor %s differ in length" % (info, base))
    if 0 in base:
        raise unsupported(op, "shape_info divided by zero")
    return with_info(dims, [cdiv(a, b) for a, b in zip(info, base)])


_run_mul_fold = fold(torch.mul)


def _run_mul(run, op, ins):
    """torch.mul folded over the inputs; the writer's hsigmoid/hswish pair as the simulation computes it
    (:func:`hard_sigmoid.hard_sigmoid_mul`)."""
    pair = hard_sigmoid_mul(run, op, ins)
    return pair if pair is not None else _run_mul_fold(run, op, ins)


RECORD = OpRecord(
    family="eltwise",
    specs={ADD: _DPU_Q, MULTIPLY: _DPU_Q, SUB: _FLOAT_Q, RSUB: _FLOAT_Q, DIV: _FLOAT_Q},
    functions={torch.add: ADD, operator.add: ADD, operator.iadd: ADD, torch.sub: SUB, operator.sub: SUB,
               operator.isub: SUB, torch.mul: MULTIPLY, operator.mul: MULTIPLY, operator.imul: MULTIPLY,
               torch.div: DIV, operator.truediv: DIV, operator.itruediv: DIV},
    # ``x.add_(y)``: nndct's parser takes ``aten::add_`` for ``aten::add`` (``OpCreator.op_convert_map``), and
    # its add runs out of place (sim/ops.py OUT_OF_PLACE_METHODS)
    methods={"add": ADD, "add_": ADD, "sub": SUB, "mul": MULTIPLY, "div": DIV},
    roles={"arithmetic": (ADD, SUB, MULTIPLY, DIV), "binary": BINARY_TYPES, "const_operand": BINARY_TYPES},
    approximation=Absent("add and mul are exact on aligned codes; sub, rsub and div run in float"),
    source="nndct_shared/base/key_names.py, nndct_shared/optimization/optimizer.py",
    onnx={ADD: _onnx_binary("Add"), SUB: _onnx_binary("Sub"), MULTIPLY: _onnx_binary("Mul"), DIV: _onnx_binary("Div"),
          RSUB: Absent("no call of the lowered model is an rsub: ``c - x`` is operator.sub, written as Sub with "
                       "the number as a constant")},
    dpu_rule={ADD: DpuRule(("add",), dpu_eltwise), MULTIPLY: DpuRule(("mul",), dpu_eltwise),
              SUB: Absent("a float operator of the quantizer"), RSUB: Absent("a float operator of the quantizer"),
              DIV: Absent("a float operator of the quantizer")},
    xmodel={op: XmodelForm(no_attrs, _create_binary(x), param_operands=True)
            for op, x in ((ADD, "add"), (MULTIPLY, "mul"), (SUB, "sub"), (RSUB, "sub"), (DIV, "div"))},
    xir_ops={"add": XirOp(OpDef("add", INS, (), broadcast), fold(torch.add), "add"),
             "sub": XirOp(OpDef("sub", INS, (), broadcast), fold(torch.sub), "sub"),
             "mul": XirOp(OpDef("mul", INS, (), _shape_mul), _run_mul, "mul"),
             "div": XirOp(OpDef("div", INS, (), _shape_div), fold(torch.div), "div")},
    traced={ADD: ("add",), SUB: ("sub",), RSUB: ("rsub",), MULTIPLY: ("mul",), DIV: ("div",)},
    refusals={},
    sim=dict.fromkeys((ADD, MULTIPLY, SUB, RSUB, DIV), TORCH),
)
