"""XIR op definitions and shape inference (pipeline/xir/opdefs.py, shapes.py), checked
against the real quantizer's xmodel files (tests/data/golden_xmodel) and against libxir's rules."""
import glob
import os

import numpy as np
import pytest

from pipeline.xir import opdefs, schema
from pipeline.xir.xgraph import XGraph, XGraphError, XOp
from tests.support import DATA

GOLDEN = os.path.join(DATA, "golden_xmodel")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "*", "*", "*", "xmodel", "*_int.xmodel")))


def _case_id(path):
    return "/".join(os.path.relpath(path, GOLDEN).split(os.sep)[:3])


def _nodes(path):
    with open(path, "rb") as f:
        return list(schema.parse_graph(f.read()).op_node)


def _file_attrs(node):
    return {k: schema.attr_python(v) for k, v in node.op_attr.items()}


def _file_tensor_attrs(node):
    return {k: schema.attr_python(v) for k, v in node.output_tensor.tensor_attr.items()}


def test_xmodel_golden_files_present():
    assert len(FILES) == 16


@pytest.mark.parametrize("path", FILES, ids=_case_id)
def test_xmodel_golden_attrs_closed_under_definitions(path):
    """Every file op's attributes are what libxir stores for them: the declared ones keep their kind,
    the undeclared ones have the kind of their Python value, and no default is missing."""
    for node in _nodes(path):
        definition = opdefs.get(node.op_type)
        given = {k: v for k, (_, v) in _file_attrs(node).items()}
        assert opdefs.typed_attrs(definition, node.op_name, given) == _file_attrs(node), node.op_name
        assert [a.name for a in definition.args] == [a.arg_name for a in node.args], node.op_name


@pytest.mark.parametrize("path", FILES, ids=_case_id)
def test_xmodel_golden_shapes_inferred_per_op(path):
    """Shape inference over stand-ins carrying the file's input shapes, tensor attributes and data gives
    each op's output dims and tensor attributes in the file."""
    ops = {}
    for index, node in enumerate(_nodes(path)):
        inputs = {a.arg_name: [ops[n] for n in a.arg_ops] for a in node.args if a.arg_ops}
        op = XOp(node.op_name, node.op_type, _file_attrs(node), inputs, index)
        dims, tensor_attrs = opdefs.infer_shape(opdefs.get(node.op_type), op)
        assert dims == list(node.output_tensor.tensor_dim), node.op_name
        assert tensor_attrs == _file_tensor_attrs(node), node.op_name
        op.shape, op.tensor_attrs = list(node.output_tensor.tensor_dim), _file_tensor_attrs(node)
        ops[node.op_name] = op


@pytest.mark.parametrize("path", FILES, ids=_case_id)
def test_xmodel_golden_ops_rebuilt(path):
    """The file's ops re-created through XGraph (attributes, arguments, chained shape inference) give
    the same op nodes as the file (the node order is xgraph's business, not compared here)."""
    graph = XGraph("g")
    nodes = _nodes(path)
    for node in nodes:
        inputs = {a.arg_name: [graph.get_op(n) for n in a.arg_ops] for a in node.args if a.arg_ops}
        graph.create_op(node.op_name, node.op_type, {k: v for k, (_, v) in _file_attrs(node).items()}, inputs)
    with open(path, "rb") as f:
        expected = sorted(dict(schema.canonical(schema.parse_graph(f.read())))["op_node"])
    rebuilt = sorted(dict(schema.canonical(graph.to_message()))["op_node"])
    assert len(rebuilt) == len(nodes) and rebuilt == expected


# --- definitions, defaults and casts -------------------------------------------------------------------

def _graph_with_input(shape=(1, 8, 8, 3)):
    graph = XGraph("t")
    return graph, graph.create_op("x", "data", {"shape": list(shape), "data_type": "FLOAT32"})


def test_xmodel_opdefs_definition_order_and_kinds():
    conv = opdefs.get("conv2d")
    assert [(a.name, a.occur) for a in conv.args] == [("input", "required"), ("weights", "required"),
                                                      ("bias", "optional")]
    assert {a.name: (a.kind, a.required, a.default) for a in conv.attrs} == {
        "kernel": ("int32_vec", True, None), "stride": ("int32_vec", True, None),
        "dilation": ("int32_vec", False, [1, 1]), "pad_mode": ("string", True, None),
        "pad": ("int32_vec", False, [0, 0, 0, 0]), "group": ("int32", False, 1)}
    assert [a.name for a in opdefs.get("matmul").args] == ["input", "bias"]
    assert opdefs.get("matmul").args[0].occur == "required_and_repeated"
    assert [a.name for a in opdefs.get("resize").args] == ["input", "size"]
    assert {a.name: a.kind for a in opdefs.get("const").attrs} == {"shape": "int32_vec", "data_type": "string",
                                                                   "data": "bytes"}


def test_xmodel_opdefs_custom_type():
    custom = opdefs.get("aten::silu")
    assert custom.type == "aten::silu"
    assert [(a.name, a.occur) for a in custom.args] == [("input", "repeated")]
    assert [(a.name, a.kind, a.required) for a in custom.attrs] == [("shape", "int32_vec", True),
                                                                   ("data_type", "string", True)]
    graph, x = _graph_with_input((1, 4, 4, 8))
    op = graph.create_op("c", "nndct_clamp", {"shape": [1, 4, 4, 8], "data_type": "FLOAT32"}, {"input": [x]})
    assert op.shape == [1, 4, 4, 8] and op.tensor_attrs == {}
    with pytest.raises(XGraphError, match="'c2'.*nndct_clamp.*'shape'"):
        graph.create_op("c2", "nndct_clamp", {"data_type": "FLOAT32"}, {"input": [x]})


def test_xmodel_opdefs_unsupported_built_in_type():
    with pytest.raises(XGraphError, match="conv3d.*not supported"):
        opdefs.get("conv3d")
    assert opdefs.get("upsample").args == (opdefs.ArgDef("input", "repeated"),)  # not an XIR type: custom


def test_xmodel_opdefs_defaults_filled():
    graph, x = _graph_with_input()
    pool = graph.create_op("p", "avgpool2d", {"kernel": [2, 2], "stride": [2, 2], "pad_mode": "FLOOR"},
                           {"input": [x]})
    assert pool.attrs["count_include_invalid"] == ("bool", True)
    assert pool.attrs["count_include_pad"] == ("bool", True)
    assert pool.attrs["global"] == ("bool", False)
    assert pool.attrs["pad"] == ("int32_vec", [0, 0, 0, 0])
    assert pool.shape == [1, 4, 4, 3]
    pool.attrs["pad"][1].append(9)  # a default is the op's own copy
    assert opdefs.typed_attrs(opdefs.get("maxpool2d"), "q", {"kernel": [1, 1], "stride": [1, 1],
                                                             "pad_mode": "FLOOR"})["pad"] == ("int32_vec", [0] * 4)
    assert opdefs.typed_attrs(opdefs.get("scale"), "s", {}) == {"axis": ("int32", -1)}
    assert opdefs.typed_attrs(opdefs.get("reshape"), "r", {}) == {"shape": ("int32_vec", [0])}
    assert opdefs.typed_attrs(opdefs.get("l2_normalize"), "n", {}) == {"axis": ("int32_vec", []),
                                                                       "epsilon": ("double", 1e-12)}


def test_xmodel_opdefs_declared_attrs_cast_to_their_kind():
    assert opdefs.typed_attrs(opdefs.get("leaky-relu"), "l", {"alpha": 1}) == {"alpha": ("float", 1.0)}
    alpha = opdefs.typed_attrs(opdefs.get("leaky-relu"), "l", {"alpha": 0.1})["alpha"]
    assert alpha == ("float", float(np.float32(0.1))) and isinstance(alpha[1], float)
    resize = opdefs.typed_attrs(opdefs.get("resize"), "r", {"mode": "NEAREST", "scale": [2, 2]})
    assert resize["scale"] == ("float_vec", [2.0, 2.0]) and all(isinstance(v, float) for v in resize["scale"][1])
    pool = opdefs.typed_attrs(opdefs.get("maxpool2d"), "p", {"kernel": (3, 3), "stride": [1, 1],
                                                             "pad_mode": "FLOOR", "global": 1})
    assert pool["global"] == ("bool", True) and pool["kernel"] == ("int32_vec", [3, 3])
    fix = opdefs.typed_attrs(opdefs.get("fix"), "f", {"fix_point": np.int64(5), "bit_width": True,
                                                      "round_mode": "DPU_ROUND", "if_signed": 1})
    assert fix == {"fix_point": ("int32", 5), "bit_width": ("int32", 1), "round_mode": ("string", "DPU_ROUND"),
                   "if_signed": ("bool", True)}
    assert type(fix["fix_point"][1]) is int


def test_xmodel_opdefs_undeclared_attrs_take_python_kinds():
    typed = opdefs.typed_attrs(opdefs.get("relu"), "r", {
        "b": True, "i": 3, "f": 0.1, "s": "x", "ints": [1, 2], "floats": [0.5, 1.5], "strs": ["a"],
        "bools": [True, False], "raw": b"\x00\x01"})
    assert typed == {"b": ("bool", True), "i": ("int32", 3), "f": ("double", 0.1), "s": ("string", "x"),
                     "ints": ("int32_vec", [1, 2]), "floats": ("double_vec", [0.5, 1.5]),
                     "strs": ("string_vec", ["a"]), "bools": ("int32_vec", [1, 0]), "raw": ("bytes", b"\x00\x01")}


@pytest.mark.parametrize("attrs, text", [
    ({"alpha": "x"}, "'alpha': cannot store 'x' as float"),
    ({"alpha": 0.1, "k": []}, "'k': cannot store"),
    ({"alpha": 0.1, "k": (1, 2)}, "'k': cannot store"),
    ({"alpha": 0.1, "k": [1, 0.5]}, "'k': cannot store"),
    ({"alpha": 0.1, "k": 2 ** 31}, "'k': cannot store"),
    ({"alpha": 0.1, "k": np.float32(1)}, "'k': cannot store"),
    ({}, "op 'l' \\(leaky-relu\\): required attribute 'alpha' is not set"),
])
def test_xmodel_opdefs_attr_errors(attrs, text):
    with pytest.raises(XGraphError, match=text):
        opdefs.typed_attrs(opdefs.get("leaky-relu"), "l", attrs)


def test_xmodel_opdefs_int_attr_refuses_float():
    with pytest.raises(XGraphError, match="'axis': cannot store 1.0 as int32"):
        opdefs.typed_attrs(opdefs.get("softmax"), "s", {"axis": 1.0})


def test_xmodel_opdefs_check_args():
    graph, x = _graph_with_input()
    conv = opdefs.get("conv2d")
    opdefs.check_args(conv, "c", {"input": [x], "weights": [x]})
    for inputs, text in [({"input": [x]}, "'weights' is REQUIRED but has 0"),
                         ({"input": [x, x], "weights": [x]}, "'input' is REQUIRED but has 2"),
                         ({"input": [x], "weights": [x], "bias": [x, x]}, "'bias' is OPTIONAL but has 2"),
                         ({"input": [x], "weights": [x], "other": [x]}, "no argument 'other'")]:
        with pytest.raises(XGraphError, match="op 'c' \\(conv2d\\): .*" + text):
            opdefs.check_args(conv, "c", inputs)
    with pytest.raises(XGraphError, match="'input' is REQUIRED_AND_REPEATED but has 0"):
        opdefs.check_args(opdefs.get("concat"), "k", {"input": []})
    opdefs.check_args(opdefs.get("aten::mean"), "m", {})


# --- shape inference -----------------------------------------------------------------------------------

def _const(graph, name, values):
    return graph.create_const_op(name, np.array(values, dtype=np.float32))


def test_xmodel_opdefs_stack_and_reshape_through_shape_info():
    graph, x = _graph_with_input((1, 4, 2, 2))
    dims = [_const(graph, "d0", [1.0]), _const(graph, "d1", [16.0])]
    stack = graph.create_op("s", "stack", {"axis": 0}, {"input": dims})
    assert stack.shape == [2, 1] and stack.tensor_attrs == {"shape_info": ("int32_vec", [1, 16])}
    reshaped = graph.create_op("r", "reshape", {"shape": [0]}, {"input": [x], "shape": [stack]})
    assert reshaped.shape == [1, 16] and reshaped.tensor_attrs == {}
    minus = graph.create_op("s2", "stack", {"axis": 0},
                            {"input": [_const(graph, "d2", [2.0]), _const(graph, "d3", [-1.0])]})
    assert minus.tensor_attrs["shape_info"] == ("int32_vec", [2, -1])
    assert graph.create_op("r2", "reshape", {}, {"input": [x], "shape": [minus]}).shape == [2, 8]
    assert graph.create_op("r3", "reshape", {"shape": [0, -1]}, {"input": [x]}).shape == [1, 16]
    with pytest.raises(XGraphError, match="op 'r4' \\(reshape\\).*16 elements"):
        graph.create_op("r4", "reshape", {"shape": [3, -1]}, {"input": [x]})


def test_xmodel_opdefs_shape_info_propagation():
    graph, x = _graph_with_input((1, 8, 8, 3))
    shape = graph.create_op("sh", "shape", {}, {"input": [x]})
    assert shape.shape == [4] and shape.tensor_attrs == {"shape_info": ("int32_vec", [1, 8, 8, 3])}
    mul = graph.create_op("m", "mul", {}, {"input": [shape, _const(graph, "f", [1.0, 2.0, 1.0, 1.0])]})
    assert mul.shape == [4] and mul.tensor_attrs == {"shape_info": ("int32_vec", [1, 16, 8, 3])}
    short = graph.create_op("m2", "mul", {}, {"input": [shape, _const(graph, "g", [2.0])]})
    assert short.tensor_attrs == {"shape_info": ("int32_vec", [])}
    div = graph.create_op("dv", "div", {}, {"input": [shape, _const(graph, "two", [2.0])]})
    assert div.tensor_attrs == {"shape_info": ("int32_vec", [0, 4, 4, 1])}
    cast = graph.create_op("c", "cast", {"data_type": "FLOAT32"}, {"input": [mul]})
    assert cast.tensor_attrs == mul.tensor_attrs
    fix = graph.create_op("fx", "fix", {"fix_point": 0, "bit_width": 8, "round_mode": "DPU_ROUND",
                                        "if_signed": True}, {"input": [shape]})
    assert fix.tensor_attrs == shape.tensor_attrs
    sliced = graph.create_op("ss", "strided_slice", {"begin": [1], "end": [3], "strides": [1]}, {"input": [shape]})
    assert sliced.shape == [2] and sliced.tensor_attrs == {"shape_info": ("int32_vec", [8, 8])}
    total = graph.create_op("rs", "reduction_sum", {"axis": [0], "keep_dims": True}, {"input": [shape]})
    assert total.shape == [1] and total.tensor_attrs == {"shape_info": ("int32_vec", [20])}
    most = graph.create_op("rm", "reduction_max", {"axis": [0], "keep_dims": False}, {"input": [shape]})
    assert most.shape == [] and most.tensor_attrs == {"shape_info": ("int32_vec", [8])}
    mean = graph.create_op("rn", "reduction_mean", {"axis": [0], "keep_dims": True}, {"input": [shape]})
    assert mean.tensor_attrs == {}
    add = graph.create_op("a", "add", {}, {"input": [shape, shape]})
    assert add.shape == [4] and add.tensor_attrs == {}


@pytest.mark.parametrize("mode, pad, out", [("FLOOR", [0, 0, 0, 0], 3), ("CEIL", [0, 0, 0, 0], 4),
                                            ("SAME", [0, 0, 0, 0], 4), ("VALID", [0, 0, 0, 0], 3),
                                            ("FLOOR", [1, 1, 1, 1], 4)])
def test_xmodel_opdefs_conv_windows(mode, pad, out):
    graph, x = _graph_with_input((1, 8, 8, 3))
    w = _const(graph, "w", np.zeros((4, 3, 3, 3)))
    attrs = {"kernel": [3, 3], "stride": [2, 2], "pad_mode": mode, "pad": pad}
    assert graph.create_op("c", "conv2d", attrs, {"input": [x], "weights": [w]}).shape == [1, out, out, 4]
    assert graph.create_op("p", "maxpool2d", attrs, {"input": [x]}).shape == [1, out, out, 3]


def test_xmodel_opdefs_conv_variants():
    graph, x = _graph_with_input((1, 8, 8, 4))
    dw = _const(graph, "dw", np.zeros((1, 3, 3, 4)))
    attrs = {"kernel": [3, 3], "stride": [1, 1], "pad_mode": "FLOOR", "pad": [1, 1, 1, 1], "group": 4}
    assert graph.create_op("d", "depthwise-conv2d", attrs, {"input": [x], "weights": [dw]}).shape == [1, 8, 8, 4]
    grouped = _const(graph, "grouped", np.zeros((8, 3, 3, 1)))
    assert graph.create_op("g", "conv2d", attrs, {"input": [x], "weights": [grouped]}).shape == [1, 8, 8, 8]
    with pytest.raises(XGraphError, match="op 'g2' \\(conv2d\\).*group 4"):
        graph.create_op("g2", "conv2d", attrs, {"input": [x], "weights": [dw]})
    up = _const(graph, "up", np.zeros((6, 2, 2, 4)))
    attrs = {"kernel": [2, 2], "stride": [2, 2], "pad_mode": "FLOOR", "pad": [0, 0, 0, 0]}
    assert graph.create_op("t", "transposed-conv2d", attrs, {"input": [x], "weights": [up]}).shape == [1, 16, 16, 6]
    assert graph.create_op("td", "transposed-depthwise-conv2d", attrs,
                           {"input": [x], "weights": [up]}).shape == [1, 16, 16, 4]
    pool = graph.create_op("gp", "avgpool2d", {"kernel": [8, 8], "stride": [8, 8], "pad_mode": "FLOOR",
                                               "global": True}, {"input": [x]})
    assert pool.shape == [1, 1, 1, 4]
    bad = _const(graph, "bad", np.zeros((2, 3, 3, 3)))
    with pytest.raises(XGraphError, match="op 'b' \\(conv2d\\)"):
        graph.create_op("b", "conv2d", {"kernel": [3, 3], "stride": [1, 1], "pad_mode": "FLOOR"},
                        {"input": [x], "weights": [bad]})
    with pytest.raises(XGraphError, match="pad_mode 'X'"):
        graph.create_op("m", "maxpool2d", {"kernel": [2, 2], "stride": [2, 2], "pad_mode": "X"}, {"input": [x]})


def test_xmodel_opdefs_layout_ops():
    graph, x = _graph_with_input((1, 4, 6, 8))
    y = graph.create_op("y", "data", {"shape": [1, 4, 6, 2], "data_type": "float32"})
    assert graph.create_op("cat", "concat", {"axis": -1}, {"input": [x, y]}).shape == [1, 4, 6, 10]
    with pytest.raises(XGraphError, match="op 'cat2' \\(concat\\)"):
        graph.create_op("cat2", "concat", {"axis": 1}, {"input": [x, y]})
    assert graph.create_op("t", "transpose", {"order": [0, 3, 1, 2]}, {"input": [x]}).shape == [1, 8, 4, 6]
    assert graph.create_op("f", "flatten", {"start_axis": 1, "end_axis": -1}, {"input": [x]}).shape == [1, 192]
    assert graph.create_op("q", "squeeze", {}, {"input": [x]}).shape == [4, 6, 8]
    assert graph.create_op("q2", "squeeze", {"axis": [0]}, {"input": [x]}).shape == [4, 6, 8]
    assert graph.create_op("pd", "pad", {"paddings": [0, 0, 1, 1, 2, 0, 0, 0], "mode": "CONSTANT"},
                           {"input": [x]}).shape == [1, 6, 8, 8]
    assert graph.create_op("ps", "pixel-shuffle", {"scale": 2, "upscale": True}, {"input": [x]}).shape == [1, 8, 12, 2]
    assert graph.create_op("am", "argmax", {"axis": -1}, {"input": [x]}).shape == [1, 4, 6, 1]
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}
    sliced = graph.create_op("sl", "strided_slice", dict(masks, begin=[0, 0, 0, 4], end=[1, 4, 6, 8],
                                                         strides=[1, 1, 1, 1]), {"input": [x]})
    assert sliced.shape == [1, 4, 6, 4] and sliced.tensor_attrs == {}
    shrunk = graph.create_op("sh", "strided_slice", dict(masks, begin=[0, 1, 0, 0], end=[1, 2, 6, 0],
                                                         strides=[1, 1, 2, 1], shrink_axis_mask=2, end_mask=8),
                             {"input": [x]})
    assert shrunk.shape == [1, 3, 8]


def test_xmodel_opdefs_resize_scale_in_float32():
    graph, x = _graph_with_input((1, 5, 5, 3))
    attrs = {"mode": "NEAREST", "scale": [1.4, 1.4]}
    assert graph.create_op("r", "resize", attrs, {"input": [x], "size": []}).shape == [1, 7, 7, 3]
    size = _const(graph, "size", [10.0, 12.0])
    assert graph.create_op("r2", "resize", {"mode": "BILINEAR"}, {"input": [x], "size": [size]}).shape == [1, 10, 12, 3]
    with pytest.raises(XGraphError, match="op 'r3' \\(resize\\)"):
        graph.create_op("r3", "resize", {"mode": "NEAREST"}, {"input": [x]})


def test_xmodel_opdefs_matmul():
    graph, x = _graph_with_input((1, 48))
    w, b = _const(graph, "w", np.zeros((10, 48))), _const(graph, "b", np.zeros(10))
    mm = graph.create_op("mm", "matmul", {"transpose_a": False, "transpose_b": True}, {"input": [x, w], "bias": [b]})
    assert mm.shape == [1, 10]
    with pytest.raises(XGraphError, match="op 'mm2' \\(matmul\\).*do not multiply"):
        graph.create_op("mm2", "matmul", {"transpose_a": False, "transpose_b": False}, {"input": [x, w]})


def test_xmodel_opdefs_broadcast_errors():
    graph, x = _graph_with_input((1, 4, 4, 3))
    y = graph.create_op("y", "data", {"shape": [1, 4, 4, 2], "data_type": "FLOAT32"})
    c = _const(graph, "c", [1.0, 2.0, 3.0])
    assert graph.create_op("a", "add", {}, {"input": [x, c]}).shape == [1, 4, 4, 3]
    with pytest.raises(XGraphError, match="op 'b' \\(sub\\).*do not broadcast"):
        graph.create_op("b", "sub", {}, {"input": [x, y]})
    with pytest.raises(XGraphError, match="op 'm' \\(mul\\).*at least 2 inputs"):
        graph.create_op("m", "mul", {}, {"input": [x]})


def test_xmodel_opdefs_source_checks():
    graph = XGraph("t")
    with pytest.raises(XGraphError, match="op 'x' \\(data\\).*non-empty and positive"):
        graph.create_op("x", "data", {"shape": [1, 0], "data_type": "FLOAT32"})
    with pytest.raises(XGraphError, match="op 'i' \\(data\\).*'INT8'.*not supported"):
        graph.create_op("i", "data", {"shape": [1, 2], "data_type": "INT8"})
    x = graph.create_op("ok", "data", {"shape": [2], "data_type": "float32"})
    with pytest.raises(XGraphError, match="op 'c' \\(cast\\).*not supported"):
        graph.create_op("c", "cast", {"data_type": "INT32"}, {"input": [x]})
    with pytest.raises(XGraphError, match="op 'n' \\(neg\\): has no input and no data_type"):
        opdefs.infer_shape(opdefs.get("neg"), XOp("n", "neg", {}, {"input": []}, 0))
