"""Reading and checking xmodel files (pipeline/xir/reader.py): the real quantizer's files
(tests/data/golden_xmodel) pass, and corrupted messages fail with every problem named."""
import glob
import json
import os

import numpy as np
import pytest

from pipeline.errors import ExportError
from pipeline.xir import reader, schema
from pipeline.xir.xgraph import XGraph
from tests.support import DATA

GOLDEN = os.path.join(DATA, "golden_xmodel")
FILES = sorted(glob.glob(os.path.join(GOLDEN, "*", "*", "*", "xmodel", "*_int.xmodel")))
SAMPLE = os.path.join(GOLDEN, "golden", "resblock", "nocle", "xmodel", "ResBlockNet_int.xmodel")


def _case(path):
    return os.path.relpath(path, GOLDEN).split(os.sep)[:3]


def _index_entry(path):
    set_, model, config = _case(path)
    with open(os.path.join(GOLDEN, set_, "index.json")) as f:
        return json.load(f)[model][config]


def _message(path=SAMPLE):
    return reader.read_xmodel(path)


def _node(msg, name):
    return next(n for n in msg.op_node if n.op_name == name)


def _first(msg, type_):
    return next(n for n in msg.op_node if n.op_type == type_)


def _problems(msg):
    with pytest.raises(ExportError) as info:
        reader.check(msg)
    text = str(info.value)
    return text, [line[2:] for line in text.splitlines()[1:]]


def test_xmodel_reader_sixteen_golden_files():
    assert len(FILES) == 16


@pytest.mark.parametrize("path", FILES, ids=lambda p: "/".join(_case(p)))
def test_xmodel_golden_file_passes_check(path):
    msg = reader.read_xmodel(path)
    graph = reader.check(msg)
    assert isinstance(graph, XGraph) and graph.name == msg.graph_name
    assert [op.name for op in graph.ops] == [n.op_name for n in msg.op_node]  # rebuilt in file order
    for op, node in zip(graph.ops, msg.op_node):
        assert op.type == node.op_type and op.shape == list(node.output_tensor.tensor_dim), op.name
        assert {k: op.attrs[k] for k in node.op_attr} == {k: schema.attr_python(v) for k, v in node.op_attr.items()}
    # the rebuilt graph serializes to the same ops (order aside: libxir's own toposort is another one)
    rebuilt = sorted(dict(schema.canonical(graph.to_message()))["op_node"])
    assert rebuilt == sorted(dict(schema.canonical(msg))["op_node"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: "/".join(_case(p)))
def test_xmodel_golden_file_described(path):
    msg = reader.read_xmodel(path)
    summary = reader.describe(msg)
    entry = _index_entry(path)
    assert summary["ops"] == entry["op_count"]
    assert summary["op_types"] == entry["op_types"]
    assert summary["fix_ops"] == entry["op_types"]["fix"]
    assert summary["graph"] == entry["file"][:-len("_int.xmodel")]
    data = [n for n in msg.op_node if n.op_type == "data"]
    assert [i["name"] for i in summary["inputs"]] == [n.op_name for n in data]
    assert all(len(i["shape"]) in (2, 4) and i["shape"][0] == 1 for i in summary["inputs"])
    assert len(summary["outputs"]) == entry.get("n_outputs", 2 if "Detect" in entry["file"] else 1)
    assert all(o["type"] == "fix" for o in summary["outputs"])  # every model output is quantized here


def test_xmodel_read_from_bytes_equals_read_from_path():
    with open(SAMPLE, "rb") as f:
        data = f.read()
    assert schema.canonical(reader.read_xmodel(data)) == schema.canonical(reader.read_xmodel(SAMPLE))


@pytest.mark.parametrize("seed", range(5))
def test_xmodel_random_bytes_are_refused_clearly(seed):
    data = np.random.default_rng(seed).bytes(2000)
    with pytest.raises(ExportError, match=r"not an XIR \.xmodel file"):
        reader.read_xmodel(data)


def test_xmodel_empty_or_foreign_files_are_refused(tmp_path):
    with pytest.raises(ExportError, match=r"not an XIR \.xmodel file: no op in it"):
        reader.read_xmodel(b"")
    text = tmp_path / "notes.xmodel"
    text.write_text("this is a text file, not a graph\n")
    with pytest.raises(ExportError, match=r"notes\.xmodel.*not an XIR \.xmodel file"):
        reader.read_xmodel(str(text))
    with pytest.raises(ExportError, match="cannot read"):
        reader.read_xmodel(str(tmp_path / "missing.xmodel"))


# --- corruptions: each alone gives exactly its problem; together, all of them ------------------------------

RELU = "ResBlockNet__ResBlockNet_ReLU_stem_relu__ret_5"
CONV = "ResBlockNet__ResBlockNet_Conv2d_res_conv1__ret_7"
FIX = "ResBlockNet__ResBlockNet_ReLU_res_relu1__ret_11_fix"
CONST = "ResBlockNet__res_conv2_bias"
LEAKY = "ResBlockNet__ResBlockNet_LeakyReLU_dw_act__ret_25"


def _later_arg(msg):
    """RELU's input renamed to the last op (which exists, but comes later)."""
    _node(msg, RELU).args[0].arg_ops[0] = msg.op_node[-1].op_name
    return RELU, "comes later in op_node"


def _missing_attr(msg):
    del _node(msg, FIX).op_attr["fix_point"]
    return FIX, "required attribute 'fix_point' is missing"


def _wrong_kind(msg):
    node = _node(msg, CONV)
    node.op_attr["kernel"].CopyFrom(schema.attr_value("int64_vec", [3, 3]))
    return CONV, "attribute 'kernel' is stored as int64_vec, the definition says int32_vec"


def _wrong_dims(msg):
    tensor = _node(msg, LEAKY).output_tensor
    del tensor.tensor_dim[:]
    tensor.tensor_dim.extend([1, 12, 12, 15])
    return LEAKY, "output dims [1, 12, 12, 15], but XIR's shape inference gives [1, 12, 12, 16]"


def _short_const(msg):
    attr = _node(msg, CONST).op_attr["data"]
    attr.bytes_value.value = attr.bytes_value.value[:-4]
    return CONST, "data holds 60 bytes, shape [16] needs 64"


def _duplicate(msg):
    copy = msg.op_node.add()
    copy.CopyFrom(_node(msg, RELU))
    msg.subg_root.op_name.append(RELU)
    return RELU, "defined twice in op_node"


def _root_missing(msg):
    names = [n for n in msg.subg_root.op_name if n != CONST]
    del msg.subg_root.op_name[:]
    msg.subg_root.op_name.extend(names)
    return CONST, "missing from the root subgraph"


CORRUPTIONS = [_later_arg, _missing_attr, _wrong_kind, _wrong_dims, _short_const, _duplicate, _root_missing]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_xmodel_check_names_each_corruption(corrupt):
    msg = _message()
    op, text = corrupt(msg)
    message, problems = _problems(msg)
    assert message.startswith("xmodel check: 1 problem in graph 'ResBlockNet'")
    assert len(problems) == 1, problems
    assert repr(op) in problems[0] and text in problems[0], problems[0]


def test_xmodel_check_lists_every_problem_at_once():
    msg = _message()
    expected = [corrupt(msg) for corrupt in CORRUPTIONS]
    message, problems = _problems(msg)
    assert message.startswith("xmodel check: %d problems" % len(expected))
    assert len(problems) == len(expected), problems
    for op, text in expected:
        assert any(repr(op) in p and text in p for p in problems), (op, text, problems)


def test_xmodel_check_missing_op_and_bad_fix_values():
    msg = _message()
    _node(msg, RELU).args[0].arg_ops[0] = "nowhere"
    fix = _node(msg, FIX)
    fix.op_attr["round_mode"].CopyFrom(schema.attr_value("string", "ROUND_AWAY"))
    fix.op_attr["if_signed"].CopyFrom(schema.attr_value("int32", 1))
    _, problems = _problems(msg)
    assert any(repr(RELU) in p and "names op 'nowhere', which is not in the file" in p for p in problems)
    assert any(repr(FIX) in p and "round_mode 'ROUND_AWAY'" in p for p in problems)
    assert any(repr(FIX) in p and "'if_signed' is stored as int32, the definition says bool" in p for p in problems)
    assert len(problems) == 3, problems


def test_xmodel_check_output_tensor_type_and_root_order():
    msg = _message()
    _first(msg, "add").output_tensor.data_type = 2
    names = list(msg.subg_root.op_name)
    names[0], names[1] = names[1], names[0]
    del msg.subg_root.op_name[:]
    msg.subg_root.op_name.extend(names)
    msg.subg_root.subgraph_name = "main"
    _, problems = _problems(msg)
    assert any("data_type 2" in p and repr(_first(msg, "add").op_name) in p for p in problems)
    assert any("another order than op_node" in p for p in problems)
    assert any("named 'main', expected 'root'" in p for p in problems)


def test_xmodel_check_unknown_argument_and_count():
    msg = _message()
    conv = _node(msg, CONV)
    conv.args.add(arg_name="extra", arg_ops=[msg.op_node[0].op_name])
    for arg in conv.args:
        if arg.arg_name == "weights":
            del arg.arg_ops[:]
    _, problems = _problems(msg)
    assert any(repr(CONV) in p and "has no argument 'extra'" in p for p in problems)
    assert any(repr(CONV) in p and "argument 'weights' is REQUIRED but has 0 inputs" in p for p in problems)


def test_xmodel_check_type_not_supported_and_checks_go_on_after_it():
    msg = _message()
    _node(msg, CONV).op_type = "conv3d"  # an XIR type this writer does not cover
    _wrong_dims(msg)  # downstream of the conv: still checked, from the conv's stand-in
    _, problems = _problems(msg)
    assert any(repr(CONV) in p and "'conv3d' is defined by XIR but not supported" in p for p in problems)
    assert any(repr(LEAKY) in p and "output dims [1, 12, 12, 15]" in p for p in problems)
    assert len(problems) == 2, problems


def test_xmodel_check_extra_attributes_are_allowed():
    msg = _message()
    _node(msg, CONV).op_attr["my_note"].CopyFrom(schema.attr_value("string", "hello"))
    graph = reader.check(msg)
    assert graph.get_op(CONV).attrs["my_note"] == ("string", "hello")


def test_an_int64_const_and_its_reshape_are_int64_tensors_and_read_back():
    """An index buffer's const keeps its int64 data (``data_type`` "int64") and its output tensor, and the reshape of
    it, are INT with bit width 64, as libxir gives a tensor its first input's type (tests/data/refused_real/
    index_gather); the reader checks the byte count per value and the type."""
    x = XGraph("G")
    idx = x.create_const_op("G__idx", np.arange(16, dtype=np.int64).reshape(4, 4))
    table = x.create_const_op("G__table", np.zeros((16, 2), np.float32))
    size = x.create_const_op("G__size", np.array([-1.0], np.float32))
    shape = x.create_op("G__shape", "stack", {"axis": 0}, {"input": [size]})
    flat = x.create_op("G__flat", "reshape", None, {"input": [idx], "shape": [shape]})
    x.create_op("G__pick", "nndct_index", {"shape": [16, 2], "data_type": "FLOAT32"}, {"input": [table, flat]})
    assert (idx.data_type, flat.data_type, shape.data_type) == ((0, 64), (0, 64), (4, 32))
    assert idx.data().tolist() == np.arange(16, dtype=np.float32).reshape(4, 4).tolist()
    msg = x.to_message()
    assert [(n.op_name, n.output_tensor.data_type, n.output_tensor.tensor_bit_width) for n in msg.op_node
            if n.op_name in ("G__idx", "G__flat", "G__pick")] == [("G__idx", 0, 64), ("G__flat", 0, 64),
                                                                  ("G__pick", 4, 32)]
    reader.check(msg)
    _node(msg, "G__flat").output_tensor.data_type = 4
    _node(msg, "G__idx").op_attr["data"].bytes_value.value = b"\0" * 64
    _, problems = _problems(msg)
    assert any("'G__flat'" in p and "data_type 4 with bit width 64" in p for p in problems)
    assert any("'G__idx'" in p and "needs 128 (8 per int64 value)" in p for p in problems)
