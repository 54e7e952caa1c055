"""libxir's op catalogue (``op_defs``, field 101) in the writer's files (pipeline/xir/catalogue.py).

Where libxir is installed the writer writes it as the real quantizer's files carry it
(tests/data/refused_real/OP_DEFS.md); without libxir it writes none and the file is the same as before.
tests/fidelity/test_refused_real.py holds the files' checks against the real ones (the stored real
built-ins given in place of libxir); the ``vitis_ai`` tests here use libxir itself.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.support import DATA

from pipeline.xir import catalogue, schema
from pipeline.xir.xgraph import XGraph

OP_DEFS = os.path.join(DATA, "refused_real", "op_defs")


def _stored(sub):
    with open(os.path.join(OP_DEFS, sub, "op_defs.pb"), "rb") as f:
        return schema.parse_graph(f.read())


def _graph(custom=None):
    g = XGraph("G")
    x = g.create_op("x", "data", {"shape": [1, 4, 4, 2], "data_type": "float32"})
    w = g.create_const_op("w", np.ones((1, 4, 4, 2), np.float32))
    y = g.create_op("y", "add", inputs={"input": [x, w]})
    if custom:
        g.create_op("z", custom, {"shape": [1, 4, 4, 2], "data_type": "float32"}, inputs={"input": [y]})
    return g


@pytest.mark.skipif(importlib.util.find_spec("xir") is not None, reason="libxir is installed here")
def test_without_libxir_no_op_defs_and_the_same_bytes():
    assert catalogue.builtin_op_defs() is None and catalogue.file_op_defs(["conv2d", "aten::silu"]) is None
    for custom in (None, "aten::silu"):
        msg = _graph(custom).to_message()
        assert not len(msg.op_defs)
        assert _graph(custom).serialize() == msg.SerializeToString(deterministic=True)


def test_with_builtins_the_file_ends_with_them_and_its_customs(monkeypatch):
    builtins = list(_stored("golden_convnet_default").op_defs)
    plain = _graph("nndct_expand").serialize()
    monkeypatch.setattr(catalogue, "builtin_op_defs", lambda: builtins)
    data = _graph("nndct_expand").serialize()
    expected = schema.Graph()
    expected.op_defs.extend(catalogue.with_customs(builtins, ["nndct_expand"]))
    assert data == plain + expected.SerializeToString()
    assert [d.name for d in schema.parse_graph(data).op_defs][:2] == ["nndct_expand", builtins[0].name]


def test_custom_template_is_the_real_files():
    by_name = {d.name: d for d in _stored("expand_cls").op_defs}
    for name in ("nndct_shape", "nndct_expand"):
        assert catalogue.custom_op_def(name).SerializeToString() == by_name[name].SerializeToString()


def test_no_op_defs_where_the_order_cannot_be_told():
    builtins = list(_stored("golden_convnet_default").op_defs)
    room = catalogue.BUCKETS - len(builtins)
    assert len(catalogue.with_customs(builtins, ["custom_%d" % i for i in range(room)])) == catalogue.BUCKETS
    assert catalogue.with_customs(builtins, ["custom_%d" % i for i in range(room + 1)]) is None  # rehashed
    assert catalogue.with_customs(sorted(builtins, key=lambda d: d.name), []) is None  # alphabetical: not a map's order
    assert catalogue.with_customs(builtins, ["conv2d", "fix"]) == builtins  # built-in types add nothing


# ---- with libxir (the Vitis AI image) ----

_FRESH = '''
import sys, xir
g = xir.Graph("fresh")
for i, t in enumerate(sys.argv[2:]):
    g.create_op("op_%d" % i, t, attrs={"shape": [1, 2], "data_type": "float32"}, input_ops={})
g.serialize(sys.argv[1])
'''


@pytest.mark.vitis_ai
def test_libxir_gives_the_real_builtins_and_the_writer_writes_them(tmp_path):
    """libxir's catalogue, asked of libxir, is the real files' (Vitis AI 3.5); the golden convnet written
    here carries it as the real file does."""
    pytest.importorskip("xir")
    real = _stored("golden_convnet_default")
    builtins = catalogue.builtin_op_defs()
    assert [d.SerializeToString() for d in builtins] == [d.SerializeToString() for d in real.op_defs]
    from tests.support import xmodel_golden_helper as helper
    case = [("golden", "convnet", "default")]
    saved = torch.get_num_threads()
    try:
        helper.run("calib", str(tmp_path), case)
        helper.run("test", str(tmp_path), case)
    finally:
        torch.set_num_threads(saved)
    with open(os.path.join(helper.folder(str(tmp_path), *case[0]), "xmodel", "ConvNet_int.xmodel"), "rb") as f:
        mine = schema.parse_graph(f.read())
    assert [d.SerializeToString() for d in mine.op_defs] == [d.SerializeToString() for d in real.op_defs]


@pytest.mark.vitis_ai
@pytest.mark.parametrize("types", [["nndct_shape", "nndct_expand"], ["aten::topk"], ["nndct_layer_norm", "aten::mean"],
                                   ["c%d" % i for i in range(21)]])
def test_custom_positions_are_libxirs(tmp_path, types):
    """The custom types' places (the libstdc++ hash model) are those libxir itself gives in a fresh process."""
    pytest.importorskip("xir")
    path = str(tmp_path / "fresh.xmodel")
    subprocess.run([sys.executable, "-c", _FRESH, path] + types, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(path, "rb") as f:
        real = schema.parse_graph(f.read()).op_defs
    made = catalogue.with_customs(catalogue.builtin_op_defs(), types)
    assert [d.SerializeToString() for d in made] == [d.SerializeToString() for d in real]
