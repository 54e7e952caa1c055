"""The ops the simulation refuses somewhere, against what the real quantizer does with them
(tests/data/refused_real/, tests/data/README.md; the models in tests/support/corpus_refused.py).

Each case runs here as the reference was made (``corpus_models.phase``: calibration of two batches of 4
and ``export_quant_config``, then test mode: a batch-1 forward, the 4 eval samples, the exports) with
the drop-in's ``torch_quantizer``, and is held to what the real quantizer did:

- calibration and test mode: ``quant_info.json`` (param, output and input entries with their order,
  graph_md5) and the test-mode outputs bit for bit;
- the xmodel: the same files, compared as tests/support/xmodel_compare.py compares them, where the real
  quantizer wrote one; where it refused, the simulation refuses too, naming the reason.

What the simulation does not do yet is marked ``xfail(strict=True)`` with the exact gap (GAPS): such a
check fails today and XPASSes, failing the run, the day the gap is closed, so that the mark is removed.
tests/data/refused_real/OP_DEFS.md says what the real files carry in ``op_defs`` (field 101), which the
stored references lack and the simulation writes where libxir is installed (pipeline/xir/catalogue.py).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.support import DATA, REPO, SUPPORT, corpus_models, pinned_threads
from tests.support import corpus_refused as corpus
from tests.support import xmodel_compare
from tests.support.xmodel_compare import assert_same_xmodel

REAL = os.path.join(DATA, "refused_real")
THREADS = pinned_threads(1)

# What the simulation does not do yet, case by case: (check, case) -> the gap. Checks: "quant_info" (the
# calibration's quant_info.json), "outputs" (the test-mode outputs), "xmodel" (the files), "reason" (a refusal
# naming the real quantizer's reason).
GAPS = {
    # torch.fx's tracer reads a buffer as the tensor itself (no get_attr node), so self.buf.add_(1) runs while tracing
    # and is no node of the capture; nndct keeps it (an elemwise add of the buffer, whose param entry it writes)
    ("quant_info", "inplace_buffer"): "torch.fx records no node for an in-place write into a buffer (self.buf.add_(1))",
    ("xmodel", "inplace_buffer"): "torch.fx records no node for an in-place write into a buffer (self.buf.add_(1))",
}
# Where the real quantizer refuses: {case: (its stage, words of the simulation's refusal at its xmodel stage)}
REAL_REFUSES = {
    "param_add": ("export_xmodel", "a parameter or buffer of the model is an operand"),
    "param_mul": ("export_xmodel", "a parameter or buffer of the model is an operand"),
    # the real one fails copying aten::lstm (a float op without lstm=True) into the deploy graph; the simulation
    # says the real quantizer takes recurrent layers with lstm=True only
    "lstm": ("export_xmodel", "torch_quantizer(..., lstm=True)"),
}
# op names that torch.jit's tracer gives otherwise under another torch line than the references' (2.13), beyond
# their numbers: {case: {the real op name: why}}. Under torch 1.13 the simulation's trace (names.py, as nndct's)
# names the class token's expand by its trace number: torch 1.13 does not route Parameter.expand through
# Tensor.__torch_function__ (whose local ``ret`` names it under torch 2). The real quantizer's file under torch
# 1.13 is not stored; every other field is compared by position.
TRACE_NAMES = {"expand_cls": {"ExpandClsToken__ExpandClsToken_ret_7": "Parameter.expand traced without "
                                                                       "Tensor.__torch_function__ under torch 1"}}
# Where the real quantizer computes the model without an in-place write, silently, the simulation refuses before
# calibration: {case: (words of the refusal, the case whose real outputs the real quantizer gave: the same model
# without the write)}
LOST_BEFORE_CALIBRATION = {"view_add_read": ("runs this write out of place", "view_add_unread")}
# Where the real quantizer's file computes the model without an in-place write (an op nothing reads), the simulation
# writes no file: {case: words of its xmodel refusal}
LOST_IN_XMODEL = {"slice_zero_read": "it writes a tensor in place (x.zero_(...))"}
# the reason as the real quantizer's refused.txt words it, which the simulation's message should name
REAL_REASON = {"param_add": "broadcast", "param_mul": "broadcast"}
# Where the real quantizer fails in its calibration: {case: words of the simulation's refusal at capture, before
# any calibration forward}. ellipsis_split_index: its strided slice runs dims [2, 3] for torch's [2, 4], and the
# Linear after it fails (refused.txt); the simulation refuses the index and gives the one that is written.
REAL_FAILS_CALIBRATION = {
    "ellipsis_split_index": "x[:, None, 2:6, :, 0:4] for x[:, None, 2:6, ..., 0:4], which is written",
}
IN_PROCESS = [name for name in corpus.CORPUS if name != "quant_off"]
CALIBRATED = [name for name in IN_PROCESS if name not in REAL_FAILS_CALIBRATION and name not in LOST_BEFORE_CALIBRATION]


def _cases(check, names):
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=GAPS[(check, n)])) if (check, n) in GAPS
            else n for n in names]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """Both phases of each case with the drop-in, in one folder per case; {case: refusal before the exports or None}."""
    root = str(tmp_path_factory.mktemp("refused"))
    saved = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    refused = {}
    try:
        for name in IN_PROCESS:
            refused[name] = None
            try:
                for which in ("calib", "test"):
                    corpus_models.phase(which, root, [name], corpus=corpus)
            except Exception as e:  # a capture the simulation refuses (NotSimulated)
                refused[name] = "%s: %s" % (type(e).__name__, e)
    finally:
        torch.set_num_threads(saved)
    return root, refused


def _json(path):
    with open(path) as f:
        return json.load(f)


def _xmodels(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".xmodel")) if os.path.isdir(folder) else []


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_seeds_make_the_reference_data(name):
    with open(os.path.join(REAL, name, "seeded.sha256")) as f:
        assert corpus.seeded_sha256(name) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"


@pytest.mark.parametrize("name", _cases("quant_info", CALIBRATED))
def test_calibration_equals_the_real_quantizer(name, sim):
    """Every quant_info.json entry, in order, and the graph_md5."""
    root, refused = sim
    assert refused[name] is None, refused[name]
    mine, real = _json(os.path.join(root, name, "quant_info.json")), _json(os.path.join(REAL, name, "quant_info.json"))
    for key in ("param", "output", "input"):
        assert list(mine[key].items()) == list(real[key].items()), key
    assert mine["graph_md5"] == real["graph_md5"]


@pytest.mark.parametrize("name", _cases("outputs", CALIBRATED))
def test_outputs_equal_the_real_quantizer(name, sim):
    """The test-mode outputs on the 4 eval samples, bit for bit, each output the model returns (y_0.npy, y_1.npy,
    ...; also where the calibration's node names differ)."""
    root, refused = sim
    assert refused[name] is None, refused[name]
    stored = sorted(f for f in os.listdir(os.path.join(REAL, name)) if f.startswith("y_") and f.endswith(".npy"))
    assert stored and sorted(f for f in os.listdir(os.path.join(root, name)) if f.startswith("y_")) == stored
    for f in stored:
        got, want = np.load(os.path.join(root, name, f)), np.load(os.path.join(REAL, name, f))
        assert got.dtype == want.dtype and got.shape == want.shape, f
        assert np.array_equal(got.view(np.int32), want.view(np.int32)), f


WRITTEN = [n for n in CALIBRATED if n not in REAL_REFUSES and n not in LOST_IN_XMODEL]


@pytest.mark.parametrize("name", _cases("xmodel", WRITTEN))
def test_xmodel_equals_the_real_one(name, sim):
    root, refused = sim
    assert refused[name] is None, refused[name]
    folder = os.path.join(root, name)
    path = os.path.join(folder, "xmodel_refused.txt")
    if os.path.exists(path):
        with open(path) as f:
            pytest.fail("the simulation refused the xmodel: " + f.read())
    mine, real = _xmodels(os.path.join(folder, "xmodel")), _xmodels(os.path.join(REAL, name))
    assert real and mine == real
    for f in real:
        if name in TRACE_NAMES and not xmodel_compare.numbering_matches_references():
            _assert_same_but_trace_names(os.path.join(folder, "xmodel", f), os.path.join(REAL, name, f),
                                         TRACE_NAMES[name])
            continue
        assert_same_xmodel(os.path.join(folder, "xmodel", f), os.path.join(REAL, name, f))


def _assert_same_but_trace_names(mine_path, real_path, names):
    """assert_same_xmodel's rule (a) + (b) where the ops ``names`` (real names) may differ beyond numbers."""
    from pipeline.xir import schema
    mine, real = xmodel_compare.load(mine_path), xmodel_compare.load(real_path)
    real_names = xmodel_compare.op_names(real)
    problems = [p for p in xmodel_compare.names_differ_only_in_numbers(xmodel_compare.op_names(mine), real_names)
                if not any(repr(n) in p for n in names)]
    assert not problems, problems[:5]
    xmodel_compare.rename_ops(mine, real_names)
    assert schema.canonical(mine) == schema.canonical(real), xmodel_compare.differences(mine, real)


# the cases whose real bias_corr.pth is stored (conv1d: nndct's Conv1d module takes the bias error's mean over dims
# 0, 1 and 2, where a 2-D conv's is per channel over 0, 2, 3)
BIAS_CORR = [n for n in CALIBRATED if os.path.exists(os.path.join(REAL, n, "bias_corr.pth"))]


@pytest.mark.parametrize("name", BIAS_CORR)
def test_bias_corrections_equal_the_real_quantizer(name, sim):
    """bias_corr.pth: the same nodes, each correction bit for bit (the real file holds lists of float32 values)."""
    root, refused = sim
    assert refused[name] is None, refused[name]
    mine = torch.load(os.path.join(root, name, "bias_corr.pth"))
    real = torch.load(os.path.join(REAL, name, "bias_corr.pth"))
    assert sorted(mine) == sorted(real)
    for key, value in real.items():
        assert (value is None) == (mine[key] is None), key
        if value is not None:
            want, got = torch.tensor(value, dtype=torch.float32), torch.as_tensor(mine[key]).float()
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), key


# cases whose real xmodel the interpreter runs without the simulation's float ops (every op built in or a unit's)
INTERPRETED = ["conv1d", "instance_norm", "rdiv", "max_method", "max_function", "attention_matmul"]


@pytest.mark.parametrize("name", INTERPRETED)
def test_the_real_xmodel_run_by_the_interpreter_equals_the_simulation(name, sim):
    """The real quantizer's file (XIR conv1d in NWC; the custom nndct_instance_norm in NHWC; the custom
    aten::reciprocal; reduction_max in NHWC and in NCHW; matmul of two tensors, one with transpose_b), run by pipeline.xir on the first eval sample as the
    model takes it, gives the simulation's test-mode output bit for bit."""
    from pipeline.apis import torch_quantizer
    from pipeline.xir import interp, reader
    root, refused = sim
    assert refused[name] is None, refused[name]
    x = corpus.make_inputs(name, 4, 3)[0][:1]
    saved = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        q = torch_quantizer("test", corpus.make_model(name), (x,), output_dir=os.path.join(root, name),
                            device=torch.device("cpu"))
        with torch.no_grad():
            want = q.quant_model(x)
        (path,) = [os.path.join(REAL, name, f) for f in _xmodels(os.path.join(REAL, name))]
        with open(path, "rb") as f:
            graph = reader.check(reader.read_xmodel(f.read()))
        (got,) = interp.model_outputs(graph, interp.run(graph, [x]), [list(want.shape)])
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(got.contiguous().view(torch.int32), want.contiguous().view(torch.int32))


@pytest.mark.parametrize("name", list(REAL_REFUSES))
def test_refused_where_the_real_quantizer_refuses(name, sim):
    """The real quantizer wrote no xmodel (refused.txt: its stage and error); the simulation writes none either and
    says why at its xmodel stage."""
    root, refused = sim
    stage, words = REAL_REFUSES[name]
    with open(os.path.join(REAL, name, "refused.txt")) as f:
        assert "stage: %s" % stage in f.read()
    assert not _xmodels(os.path.join(REAL, name))
    assert refused[name] is None, refused[name]
    assert not _xmodels(os.path.join(root, name, "xmodel"))
    with open(os.path.join(root, name, "xmodel_refused.txt")) as f:
        assert words in f.read()


@pytest.mark.parametrize("name", list(REAL_FAILS_CALIBRATION))
def test_refused_before_calibration_where_the_real_quantizer_fails_in_it(name, sim):
    """The real quantizer failed in its calibration (refused.txt: stage calibration; no quant_info.json, no
    outputs, no xmodel); the simulation refuses at capture, before any calibration forward, naming the index
    that is written, and writes nothing."""
    root, refused = sim
    with open(os.path.join(REAL, name, "refused.txt")) as f:
        assert "phase: calib\nstage: calibration\n" in f.read()
    assert not os.path.exists(os.path.join(REAL, name, "quant_info.json")) and not _xmodels(os.path.join(REAL, name))
    assert refused[name] is not None and refused[name].startswith("NotSimulated: ")
    assert REAL_FAILS_CALIBRATION[name] in refused[name]
    assert not os.path.exists(os.path.join(root, name)) or not os.listdir(os.path.join(root, name))


@pytest.mark.parametrize("name", list(LOST_BEFORE_CALIBRATION))
def test_refused_before_calibration_where_the_real_quantizer_loses_the_write(name, sim):
    """The real quantizer calibrated, ran and wrote a file, its outputs those of the model without the in-place write
    (bit for bit the outputs of the case without it); the simulation refuses before calibration, saying why."""
    _, refused = sim
    words, without = LOST_BEFORE_CALIBRATION[name]
    assert refused[name] is not None and "NotSimulated" in refused[name] and words in refused[name], refused[name]
    got, want = np.load(os.path.join(REAL, name, "y_0.npy")), np.load(os.path.join(REAL, without, "y_0.npy"))
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert _xmodels(os.path.join(REAL, name))


@pytest.mark.parametrize("name", list(LOST_IN_XMODEL))
def test_no_xmodel_where_the_real_file_loses_the_write(name, sim):
    """The real quantizer wrote a file whose in-place op no op reads (the write's readers read the tensor before it);
    the simulation, which calibrates and runs as the real one does, writes none and says why."""
    root, refused = sim
    assert refused[name] is None, refused[name]
    assert _xmodels(os.path.join(REAL, name)) and not _xmodels(os.path.join(root, name, "xmodel"))
    with open(os.path.join(root, name, "xmodel_refused.txt")) as f:
        assert LOST_IN_XMODEL[name] in f.read()


@pytest.mark.parametrize("name", _cases("reason", list(REAL_REASON)))
def test_refusal_names_the_real_quantizers_reason(name, sim):
    root, _ = sim
    with open(os.path.join(root, name, "xmodel_refused.txt")) as f:
        assert REAL_REASON[name] in f.read()


def test_quant_off_writes_the_real_float_xmodel(tmp_path):
    """The real quantizer's quantization-off flow: the script run with --nndct_quant_off (read from the command line
    when pytorch_nndct is imported). Both phases here in child processes run the same way."""
    env = dict(os.environ, PIPELINE_TEST_THREADS=str(THREADS))
    for which in ("calib", "test"):
        proc = subprocess.run([sys.executable, os.path.join(SUPPORT, "corpus_refused.py"), which, str(tmp_path),
                               "quant_off", "--nndct_quant_off"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True)
        assert proc.returncode == 0, proc.stdout[-3000:]
    folder, real = str(tmp_path / "quant_off"), os.path.join(REAL, "quant_off")
    mine, theirs = _json(os.path.join(folder, "quant_info.json")), _json(os.path.join(real, "quant_info.json"))
    for key in ("param", "output", "input"):
        assert mine[key] == theirs[key], key
    got, want = np.load(os.path.join(folder, "y_0.npy")), np.load(os.path.join(real, "y_0.npy"))
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert _xmodels(os.path.join(folder, "xmodel")) == ["PlainNet_float.xmodel"]
    assert_same_xmodel(os.path.join(folder, "xmodel", "PlainNet_float.xmodel"),
                       os.path.join(real, "PlainNet_float.xmodel"))


# ---- op_defs (field 101): what the real files carry (tests/data/refused_real/OP_DEFS.md) ----

OP_DEFS = os.path.join(REAL, "op_defs")
# the position of a custom op type's definition in a file with only that custom type, as the real files had it
CUSTOM_POSITIONS = {"aten::mean": 35, "aten::_convolution_mode": 0, "nndct_select": 0, "nndct_expand": 0,
                    "nndct_index": 0, "nndct_instance_norm": 0, "nndct_layer_norm": 72, "aten::reciprocal": 73,
                    "aten::topk": 26}
_M64 = (1 << 64) - 1


def _libstdcxx_hash(name):
    """std::hash<std::string> of libstdc++ on 64-bit (std::_Hash_bytes, seed 0xc70f6907)."""
    mul = (0xc6a4a793 << 32) + 0x5bd1e995
    data = name.encode()
    h = 0xc70f6907 ^ ((len(data) * mul) & _M64)
    aligned = len(data) & ~7

    def shift_mix(v):
        return v ^ (v >> 47)
    for i in range(0, aligned, 8):
        h = ((h ^ ((shift_mix((int.from_bytes(data[i:i + 8], "little") * mul) & _M64) * mul) & _M64)) * mul) & _M64
    if len(data) & 7:
        h = ((h ^ int.from_bytes(data[aligned:], "little")) * mul) & _M64
    return shift_mix((shift_mix(h) * mul) & _M64)


def _defs_order(builtins, customs, buckets=127):
    """libxir's op_defs order (an std::unordered_map's iteration order) after registering ``customs`` in turn
    after ``builtins`` (in their file order): a new key goes first in its bucket's run, or first of all in an
    empty bucket."""
    order = list(builtins)
    for name in customs:
        b = _libstdcxx_hash(name) % buckets
        same = [i for i, n in enumerate(order) if _libstdcxx_hash(n) % buckets == b]
        order.insert(same[0] if same else 0, name)
    return order


def _op_defs(sub):
    from pipeline.xir import schema
    with open(os.path.join(OP_DEFS, sub, "op_defs.pb"), "rb") as f:
        raw = f.read()
    return raw, schema.parse_graph(raw)


def test_real_op_defs_are_every_registered_op_in_hash_order():
    """Every file carries all 106 built-in definitions, byte for byte the same (whatever the graph uses), in the
    iteration order of libxir's std::unordered_map (127 buckets); a custom op type's definition (made when the
    first op of the type is created) is inserted where that order puts it. protobuf re-serializes the stored
    bytes exactly."""
    conv_raw, conv = _op_defs("golden_convnet_default")
    res_raw, _ = _op_defs("golden_resblock_default")
    exp_raw, exp = _op_defs("expand_cls")
    assert conv_raw == res_raw and len(conv.op_defs) == 106 and not conv.op_node
    for raw, graph in ((conv_raw, conv), (exp_raw, exp)):
        assert graph.SerializeToString() == raw
    builtins = [d.name for d in conv.op_defs]
    buckets = [_libstdcxx_hash(n) % 127 for n in builtins]
    assert all(a == b or b not in buckets[:i] for i, (a, b) in enumerate(zip(buckets, buckets[1:]))), \
        "each bucket's definitions are contiguous"
    assert [d.name for d in exp.op_defs] == _defs_order(builtins, ["nndct_shape", "nndct_expand"])
    for name, position in CUSTOM_POSITIONS.items():
        assert _defs_order(builtins, [name]).index(name) == position, name
    by_name = {d.name: d for d in exp.op_defs}
    for d in exp.op_defs:
        if d.name in builtins:
            assert d.SerializeToString() == conv.op_defs[builtins.index(d.name)].SerializeToString()
    custom = by_name["nndct_expand"]
    assert custom.annotation == "This operator is not defined by XIR."
    assert [(a.name, a.occur_type, a.data_type, a.annotation) for a in custom.input_args] == [("input", 2, 4, "")]
    assert [(a.name, a.occur_type, a.list_length, a.default_value.WhichOneof("value")) for a in custom.attrs] == [
        ("shape", 0, 0, "int32_vec_value"), ("data_type", 0, 1, "string_value")]


def _real_builtins(monkeypatch):
    """libxir's built-in definitions as the real files carry them, given to the writer in place of libxir's."""
    from pipeline.xir import catalogue
    _, real = _op_defs("golden_convnet_default")
    monkeypatch.setattr(catalogue, "builtin_op_defs", lambda: list(real.op_defs))
    return real


def test_simulation_writes_the_real_op_defs(tmp_path, monkeypatch):
    """Where libxir gives the writer its built-in definitions (here: the real file's, in place of libxir), the
    simulation's golden convnet file carries field 101 as the real one, byte for byte, after the same graph."""
    from tests.support import xmodel_golden_helper as helper
    real = _real_builtins(monkeypatch)
    case = [("golden", "convnet", "default")]
    saved = torch.get_num_threads()
    try:
        helper.run("calib", str(tmp_path), case)
        helper.run("test", str(tmp_path), case)
    finally:
        torch.set_num_threads(saved)
    with open(os.path.join(helper.folder(str(tmp_path), *case[0]), "xmodel", "ConvNet_int.xmodel"), "rb") as f:
        data = f.read()
    from pipeline.xir import schema
    mine = schema.parse_graph(data)
    assert [d.SerializeToString() for d in mine.op_defs] == [d.SerializeToString() for d in real.op_defs]
    without = schema.Graph()
    without.CopyFrom(mine)
    del without.op_defs[:]
    assert data == without.SerializeToString(deterministic=True) + real.SerializeToString()  # field 101 last


def test_custom_op_defs_go_where_the_real_files_have_them():
    """expand_cls's two custom types (``nndct_shape``, ``nndct_expand``, met in the file's creation order) in
    the built-ins' hash order give the real file's 108 definitions byte for byte; each single custom type of
    the real files lands at its observed position."""
    from pipeline.xir import catalogue, schema
    _, conv = _op_defs("golden_convnet_default")
    exp_raw, _ = _op_defs("expand_cls")
    made = schema.Graph()
    made.op_defs.extend(catalogue.with_customs(list(conv.op_defs), ["data", "nndct_shape", "const", "nndct_expand"]))
    assert made.SerializeToString() == exp_raw
    for name, position in CUSTOM_POSITIONS.items():
        assert [d.name for d in catalogue.with_customs(list(conv.op_defs), [name])].index(name) == position, name
    assert all(catalogue.libstdcxx_hash(d.name) == _libstdcxx_hash(d.name) for d in conv.op_defs)
