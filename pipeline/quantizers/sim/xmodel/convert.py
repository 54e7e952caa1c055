"""Deploy graph -> XIR graph: the ops the real quantizer creates for each nndct node, in its order.

Restates ``XirCompiler.do_compile`` (``nndct_shared/compile/xir_compiler.py``) and the per-type
creators of ``nndct_shared/compile/xop_creator.py`` (Vitis-AI 3.5; docs/xmodel.md#ops): first one
``const`` + ``fix`` pair per parameter, node by node (a transposed conv's weights flipped in H and
W), then every node in deploy-graph order. A tensor with a fix position gets a ``fix`` op named
``<op>_fix`` (``fix_point`` = its fix_pos, ``bit_width``, ``if_signed`` true, ``round_mode``
"DPU_ROUND"); op names are the nndct names with every character outside [0-9A-Za-z] made ``_``.
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ....errors import ExportError
from .... import fixpoint
from .... import ops as t
from .devgraph import Graph, Node
from ....ops.hard_sigmoid import HARD_SIGMOID_SCALE as DPU_HARD_SIGMOID_SCALE
from ....ops.pool import avgpool_dpu_scale
from .layout import PERMUTE
from ....xir.xgraph import XGraph, XOp, formal_name

FixTable = Dict[str, Tuple[int, int]]  # nndct tensor or node name -> (bit_width, fix_pos)
PAD_MODES = {0: "FLOOR", 1: "CEIL", 2: "SAME", 3: "VALID"}
HARD_SIGMOID_SCALE = 6.0 * DPU_HARD_SIGMOID_SCALE  # nndct's hsigmoid/hswish multiplier (xop_creator.py)


class _Writer:
    def __init__(self, graph: Graph, params: FixTable, outputs: FixTable) -> None:
        self.graph = graph
        self.params = params
        self.outputs = outputs
        self.x = XGraph(graph.name)

    # ---------------------------------------------------------------- helpers (xgraph.py in nndct)
    def fix(self, op: XOp, key: str, table: FixTable) -> XOp:
        if key not in table:
            return op
        bit_width, fix_pos = table[key]
        return self.x.create_op(op.name + "_fix", "fix", {"fix_point": fix_pos, "bit_width": bit_width,
                                                          "round_mode": "DPU_ROUND", "if_signed": True},
                                {"input": [op]})

    def fixed_const(self, name: str, data: np.ndarray) -> XOp:
        op = self.x.create_const_op(formal_name(name), np.asarray(data, dtype=np.float32))
        return self.fix(op, name, _merged(self.params, self.outputs))

    def fixed_op(self, name: str, type_: str, attrs: Optional[Dict[str, Any]] = None,
                 inputs: Optional[Dict[str, List[XOp]]] = None) -> XOp:
        op = self.x.create_op(formal_name(name), type_, attrs, inputs)
        return self.fix(op, name, _merged(self.params, self.outputs))

    def op_of(self, name: str) -> XOp:
        """The op standing for an nndct node or tensor: its fix op if it has one (``get_op_by_name``)."""
        formal = formal_name(name)
        op = self.x.get_op(formal + "_fix") or self.x.get_op(formal)
        if op is None:
            raise ExportError("xmodel: %r has no op yet (the deploy graph is out of order)" % name)
        return op

    def data_inputs(self, node: Node) -> List[XOp]:
        return [self.op_of(tensor.node.name) for tensor in node.in_tensors]

    # ---------------------------------------------------------------- the graph
    def write(self) -> XGraph:
        for node in self.graph.nodes:
            for kind, tensor in node.params.items():
                if self.x.get_op(formal_name(tensor.name) + "_fix") or self.x.get_op(formal_name(tensor.name)):
                    continue
                data = tensor.data
                if node.type in (t.CONVTRANSPOSE2D, t.DEPTHWISE_CONVTRANSPOSE2D) and kind == "weights":
                    data = np.ascontiguousarray(np.flip(data, (1, 2)))
                self.fixed_const(tensor.name, data)
        for node in self.graph.nodes:
            creator = CREATORS.get(node.type, _custom)
            creator(self, node)
        return self.x


def _merged(params: FixTable, outputs: FixTable) -> FixTable:
    merged = dict(params)
    merged.update(outputs)
    return merged


# -------------------------------------------------------------------- creators (xop_creator.py)
def _data(w: _Writer, node: Node) -> None:
    shape = node.out.shape or [1]
    w.fixed_op(node.name, "data", {"shape": list(shape), "data_type": "FLOAT32"})


def _const(w: _Writer, node: Node) -> None:
    data = np.asarray(node.attrs["data"], dtype=np.float32)
    if data.ndim == 0:
        data = data.reshape(1)
    if node.transpose_out_order:
        data = np.transpose(data, node.transpose_out_order)
    w.fixed_const(node.name, data)


def _with_params(w: _Writer, node: Node, type_: str, attrs: Dict[str, Any]) -> None:
    inputs = {kind: [w.op_of(tensor.name)] for kind, tensor in node.params.items()}
    inputs["input"] = w.data_inputs(node)
    w.fixed_op(node.name, type_, attrs, inputs)


def _conv(type_: str) -> Callable[[_Writer, Node], None]:
    def create(w: _Writer, node: Node) -> None:
        a = node.attrs
        _with_params(w, node, type_, {"kernel": a["kernel"], "stride": a["stride"], "dilation": a["dilation"],
                                      "pad_mode": PAD_MODES[a["pad_mode"]], "pad": a["pad"], "group": a["group"],
                                      "bias_term": a["bias_term"], "in_dim": a["in_dim"], "out_dim": a["out_dim"]})
    return create


def _simple(type_: str, keys: Tuple[str, ...] = ()) -> Callable[[_Writer, Node], None]:
    def create(w: _Writer, node: Node) -> None:
        attrs = {k: node.attrs[k] for k in keys} or None
        w.fixed_op(node.name, type_, attrs, {"input": w.data_inputs(node)})
    return create


def _binary(type_: str) -> Callable[[_Writer, Node], None]:
    def create(w: _Writer, node: Node) -> None:
        inputs = w.data_inputs(node)
        if node.type == t.RSUB:  # nndct's convert_rsub_to_sub: rsub(x, c) is written as sub(c, x)
            inputs = inputs[::-1]
        w.fixed_op(node.name, type_, None, {"input": inputs})
    return create


def _slice(w: _Writer, node: Node) -> None:
    a = node.attrs  # nndct's StridedSlice carries all five TensorFlow masks; it never sets the last three
    w.fixed_op(node.name, "strided_slice", {"begin": a["begin"], "end": a["end"], "strides": a["strides"],
                                            "begin_mask": a["begin_mask"], "end_mask": a["end_mask"],
                                            "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0},
               {"input": w.data_inputs(node)})


def _pad(w: _Writer, node: Node) -> None:
    a = node.attrs  # a pad the deploy graph could not fold into its consumer (deploy._fuse_pads)
    w.fixed_op(node.name, "pad", {"paddings": a["pad_with"], "mode": a["mode"],
                                  "constant_values": a["constant_values"]}, {"input": w.data_inputs(node)})


def _maxpool(w: _Writer, node: Node) -> None:
    a = node.attrs
    w.fixed_op(node.name, "maxpool2d", {"kernel": a["kernel"], "stride": a["stride"], "pad": a["pad"],
                                        "pad_mode": PAD_MODES[a["pad_mode"]], "global": a["global"]},
               {"input": w.data_inputs(node)})


def _avgpool(w: _Writer, node: Node) -> None:
    a = node.attrs
    kernel_w, kernel_h = a["kernel"]
    scale = avgpool_dpu_scale(kernel_h, kernel_w)
    w.fixed_op(node.name + "_i0", "avgpool2d",
               {"kernel": a["kernel"], "stride": a["stride"], "pad": a["pad"], "pad_mode": PAD_MODES[a["pad_mode"]],
                "global": a["global"], "count_include_pad": a["count_include_pad"]},
               {"input": w.data_inputs(node)})
    w.fixed_const(node.name + "_i1", np.array([scale], dtype=np.float32))
    w.fixed_op(node.name, "mul", None, {"input": [w.op_of(node.name + "_i0"), w.op_of(node.name + "_i1")]})


def _dense(w: _Writer, node: Node) -> None:
    inputs = {"input": w.data_inputs(node) + [w.op_of(node.params["weights"].name)]}
    if "bias" in node.params:
        inputs["bias"] = [w.op_of(node.params["bias"].name)]
    w.fixed_op(node.name, "matmul", {"transpose_a": False, "transpose_b": True}, inputs)


def _scale(w: _Writer, node: Node) -> None:
    inputs = {"scale": [w.op_of(node.params["weights"].name)], "bias": [w.op_of(node.params["bias"].name)],
              "input": w.data_inputs(node)}
    w.fixed_op(node.name, "scale", {}, inputs)


def _pack(w: _Writer, node: Node, what: str, items: List[int]) -> XOp:
    consts = [w.fixed_const("%s_%s_attr[%d]" % (node.name, what, i), np.array([item], dtype=np.float32))
              for i, item in enumerate(items)]
    return w.fixed_op("%s_%s_i0" % (node.name, what), "stack", {"axis": 0}, {"input": consts})


def _reshape(w: _Writer, node: Node) -> None:
    shape_op = _pack(w, node, "shape", node.attrs["shape"])
    w.fixed_op(node.name, "reshape", None, {"shape": [shape_op], "input": w.data_inputs(node)})


def _resize(w: _Writer, node: Node) -> None:
    a = node.attrs
    attrs = {"align_corners": a["align_corners"], "half_pixel_centers": a["half_pixel_centers"], "mode": a["mode"]}
    if all(s == 0 for s in a["size"]):
        attrs["scale"] = a["scale"]
        w.fixed_op(node.name, "resize", attrs, {"input": w.data_inputs(node)})
    else:
        size_op = _pack(w, node, "size", a["size"])
        w.fixed_op(node.name, "resize", attrs, {"size": [size_op], "input": w.data_inputs(node)})


def _hsigmoid_part(w: _Writer, node: Node) -> XOp:
    return w.fixed_op(node.name + "_i0", "hard-sigmoid", None, {"input": w.data_inputs(node)})


def _hsigmoid(w: _Writer, node: Node) -> None:
    _hsigmoid_part(w, node)
    w.fixed_const(node.name + "_i1", np.array([HARD_SIGMOID_SCALE], dtype=np.float32))
    w.fixed_op(node.name, "mul", None, {"input": [w.op_of(node.name + "_i0"), w.op_of(node.name + "_i1")]})


def _hswish(w: _Writer, node: Node) -> None:
    # nndct names the multiplier's const and mul with the raw node name (no formal_name)
    x = w.data_inputs(node)[0]
    sigmoid = _hsigmoid_part(w, node)
    const = w.x.create_const_op(node.name + "_i1", np.array([HARD_SIGMOID_SCALE], dtype=np.float32))
    mul = w.x.create_op(node.name + "_mul", "mul", None, {"input": [sigmoid, const]})
    if node.name in w.outputs:
        bit_width = w.outputs[node.name][0]
        mul = w.x.create_op(mul.name + "_fix", "fix", {"fix_point": bit_width - 1, "bit_width": bit_width,
                                                       "round_mode": "DPU_ROUND", "if_signed": True},
                            {"input": [mul]})
    w.fixed_op(node.name, "mul", None, {"input": [mul, x]})


def _prelu(w: _Writer, node: Node) -> None:
    # to_xir("prelu"): the default creator, the bound slopes as input "weight" (xop_creator.default_xop)
    _with_params(w, node, "prelu", {"num_parameters": node.attrs["num_parameters"]})


def _custom(w: _Writer, node: Node) -> None:
    # custom_xop: every input tensor in order, a parameter tensor as its const (aten::_convolution_mode: x, weight,
    # bias)
    params = [w.op_of(tensor.name) for tensor in node.params.values()]
    w.fixed_op(node.name, node.type, {"shape": list(node.out.shape or [1]), "data_type": "FLOAT32"},
               {"input": w.data_inputs(node) + params})


CREATORS = {
    t.INPUT: _data,
    t.CONST: _const,
    t.CONV2D: _conv("conv2d"),
    t.DEPTHWISE_CONV2D: _conv("depthwise-conv2d"),
    t.CONVTRANSPOSE2D: _conv("transposed-conv2d"),
    t.DEPTHWISE_CONVTRANSPOSE2D: _conv("transposed-depthwise-conv2d"),
    t.DENSE: _dense,
    t.BATCH_NORM: _scale,
    t.RELU: _simple("relu"),
    t.RELU6: _simple("relu6"),
    t.LEAKY_RELU: _simple("leaky-relu", ("alpha",)),
    t.PRELU: _prelu,
    t.SIGMOID: _simple("sigmoid"),
    t.TANH: _simple("tanh"),
    t.GELU: _simple("gelu", ("approximate",)),
    t.SOFTMAX: _simple("softmax", ("axis",)),
    t.MAX_POOL: _maxpool,
    t.AVG_POOL: _avgpool,
    t.RESHAPE: _reshape,
    t.CONCAT: _simple("concat", ("axis",)),
    PERMUTE: _simple("transpose", ("order",)),
    t.STRIDED_SLICE: _slice,
    t.RESIZE: _resize,
    t.PAD: _pad,
    t.HSIGMOID: _hsigmoid,
    t.HSWISH: _hswish,
    t.ADD: _binary("add"),
    t.SUB: _binary("sub"),
    t.RSUB: _binary("sub"),
    t.MULTIPLY: _binary("mul"),
    t.DIV: _binary("div"),
}  # type: Dict[str, Callable[[_Writer, Node], None]]


def write(graph: Graph, params: FixTable, outputs: FixTable) -> XGraph:
    """The XGraph the real quantizer builds from a deploy graph.

    Args:
        graph: the optimized deploy graph (``deploy.optimize``).
        params: parameter tensor name (``<Class>::conv1.weight``) -> (bit_width, fix_pos).
        outputs: nndct node name -> (bit_width, fix_pos) for every quantized node output.

    Raises:
        ExportError: the graph refers to an op before creating it.
        xir.errors.XGraphError: an op XIR's definitions refuse (a missing attribute, a shape mismatch).
    """
    return _Writer(graph, params, outputs).write()
