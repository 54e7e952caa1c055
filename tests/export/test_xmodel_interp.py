"""The xmodel interpreter (pipeline/xir/interp.py) against the simulation, bit for bit.

The 16 real files of tests/data/golden_xmodel were written by the real quantizer, with which the
simulation is bit-exact: running a REAL file on the batch-1 input it was exported with (row 0 of the
set's eval inputs) must give the simulation's test-mode output for that input, and every op with a
simulation counterpart its value. The simulation is calibrated through the drop-in API exactly as
tests/sim/test_sim_golden.py and tests/sim/test_sim_golden_wide.py do (once per case, two threads, as the
golden data was made). The writer's own graphs (``build_xgraph``) are interpreted too. Ops map to
simulation nodes by name, and names follow torch.jit's trace numbering: where this torch numbers trace
values otherwise than the references' torch, the real file's ops are first renamed by position to the
names of the simulation's own graph (tests/support/xmodel_compare.py).
"""
import glob
import importlib.util
import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline.xir import interp, reader
from pipeline.quantizers.sim.xmodel import verify
from pipeline.quantizers.sim.xmodel.writer import build_xgraph
from pipeline.xir.xgraph import XGraph, formal_name
from tests.support import DATA
from tests.support.xmodel_compare import numbering_matches_references, reference_for_this_torch

GOLDEN_XMODEL = os.path.join(DATA, "golden_xmodel")
NOCLE = {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gm = _module(os.path.join(DATA, "golden", "golden_models.py"), "golden_models")
gwm = _module(os.path.join(DATA, "golden_wide", "golden_wide_models.py"), "golden_wide_models")
WIDE_INDEX = json.load(open(os.path.join(DATA, "golden_wide", "index.json")))
CASES = [("golden", m, c) for m in gm.MODELS for c in gm.CONFIGS] + \
    [("golden_wide", m, c) for m in gwm.SETS["golden_wide"]["models"] for c in ("default", "nocle")]
WRITER_CASES = [("golden", "resblock", "default"), ("golden_wide", "floatops", "nocle"),
                ("golden_wide", "shuffle", "default"), ("golden_wide", "detect", "nocle")]


def _case_id(case):
    return "/".join(case)


def _arrays(set_, model, base):
    """The set's ``<base>.npy`` (one input) or ``<base>_<k>.npy`` (several), as tensors."""
    if set_ == "golden":
        return [gm.load_array(model, base + ".npy")]
    n = WIDE_INDEX[model]["default"]["n_inputs"]
    names = [base + ("" if n == 1 else "_%d" % k) + ".npy" for k in range(n)]
    return [torch.from_numpy(np.load(os.path.join(DATA, set_, model, name))) for name in names]


def _float_model(set_, model):
    if set_ == "golden":
        return gm.load_model(model)
    m = gwm.build(model, gwm.SETS[set_][model])
    m.load_state_dict(torch.load(os.path.join(DATA, set_, model, "float_state_dict.pt"), weights_only=True))
    return m.eval()


def _quantizer(mode, set_, model, config, folder):
    cfg = None
    if config == "nocle":
        cfg = os.path.join(folder, "nocle.json")
        with open(cfg, "w") as f:
            json.dump(NOCLE, f)
    calib = _arrays(set_, model, "calib_inputs")
    return torch_quantizer(mode, _float_model(set_, model), tuple(t[:4].clone() for t in calib), output_dir=folder,
                           device=torch.device("cpu"), quant_config_file=cfg)


class Sim:
    """One calibrated case: the test-mode quantizer, the batch-1 inputs and the simulation's outputs."""

    def __init__(self, set_, model, config, folder):
        q = _quantizer("calib", set_, model, config, folder)
        calib = _arrays(set_, model, "calib_inputs")
        with torch.no_grad():
            for i in range(0, 32, 4):
                q.quant_model(*[t[i:i + 4].clone() for t in calib])
        q.export_quant_config()
        self.quantizer = _quantizer("test", set_, model, config, folder)
        self.session, self.lowered = self.quantizer._session, self.quantizer.quant_model
        self.inputs = [t[:1].clone() for t in _arrays(set_, model, "eval_inputs")]  # the file's batch-1 input
        self.outputs, self.values = verify.record(self.lowered, self.inputs)
        self._names = None

    @property
    def names(self):
        if self._names is None:
            self._names = verify.sim_names(self.session, self.inputs)
        return self._names

    def float_ops(self, graph):
        return verify.float_ops_from_sim(graph, self.session, self.lowered, self.inputs, self.names, self.values)


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    """Every case calibrated once (two threads, as the golden data was made)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        return {case: Sim(*case, folder=str(tmp_path_factory.mktemp("_".join(case)))) for case in CASES}
    finally:
        torch.set_num_threads(threads)


def _golden_graph(case, sim=None):
    """The real file of ``case``; with ``sim``, its ops named as this torch names them (the names of the
    simulation's own graph, by position, where this torch numbers trace values otherwise than the
    references' torch: tests/support/xmodel_compare.py), so that its ops map to the simulation's nodes."""
    set_, model, config = case
    path, = glob.glob(os.path.join(GOLDEN_XMODEL, set_, model, config, "xmodel", "*_int.xmodel"))
    if sim is not None and not numbering_matches_references():
        path = reference_for_this_torch(path, build_xgraph(sim.session, sim.lowered, sim.inputs).serialize())
    return reader.check(reader.read_xmodel(path))


def _bits_equal(a, b):
    a, b = a.detach().contiguous(), b.detach().contiguous()
    return a.dtype == b.dtype == torch.float32 and a.shape == b.shape and \
        torch.equal(a.view(torch.int32), b.view(torch.int32))


def _assert_outputs_equal(graph, results, sim):
    mine = interp.model_outputs(graph, results, [list(y.shape) for y in sim.outputs])
    assert len(mine) == len(sim.outputs)
    for k, (a, b) in enumerate(zip(mine, sim.outputs)):
        assert _bits_equal(a, b), (k, float((a - b).abs().max()))


def _assert_intermediates_equal(graph, results, sim):
    """Every op that stands for a simulation node (its ``_fix`` op when it has one) holds that node's
    value, bit for bit, in the file's layout or the model's; returns how many were compared."""
    compared = 0
    for fx_node, value in sim.values.items():
        node = fx_node.meta.get("nndct_node")
        if node is None or node not in sim.names or not isinstance(value, torch.Tensor):
            continue
        base = formal_name(sim.names[node])
        op = graph.get_op(base + "_fix") or graph.get_op(base)
        if op is None:
            continue  # a node the deploy graph folded away (a pad, a contiguous)
        producer = op.inputs["input"][0] if op.type == "fix" else op
        if producer.type in verify.LAYOUT_ONLY:
            continue
        # a fix the simulation does not have at this node (a Hardswish quantized with its group's fix
        # position, applied again by its consumer): the value before the fix is the node's
        mines = [results[op.name]] + ([results[producer.name]] if producer is not op else [])
        candidates = [c for m in mines for c in (m, interp.to_model_layout(m)) if list(c.shape) == list(value.shape)]
        assert any(_bits_equal(c, value) for c in candidates), (op.name, op.type)
        compared += 1
    return compared


# --- the real quantizer's files ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_xmodel_interp_golden_file_equals_sim_bit_for_bit(case, sims):
    sim = sims[case]
    graph = _golden_graph(case, sim)
    custom = any(interp.is_custom(op.type) for op in graph.ops)
    results = interp.run(graph, sim.inputs, sim.float_ops(graph) if custom else None)
    _assert_outputs_equal(graph, results, sim)
    assert all(r.dtype == torch.float32 and list(r.shape) == op.shape for op in graph.ops
               for r in [results[op.name]])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_xmodel_interp_golden_file_intermediates_equal_sim(case, sims):
    sim = sims[case]
    graph = _golden_graph(case, sim)
    results = interp.run(graph, sim.inputs, sim.float_ops(graph))
    compared = _assert_intermediates_equal(graph, results, sim)
    assert compared >= sum(op.type in ("conv2d", "depthwise-conv2d", "matmul") for op in graph.ops)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_xmodel_interp_compare_golden_file(case, sims):
    sim = sims[case]
    report = verify.compare(_golden_graph(case, sim), sim.session, sim.lowered, sim.inputs, sim.names)
    assert report["mismatches"] == 0 and report["max_abs_diff"] == 0.0
    assert report["nodes_differing"] == [] and report["nodes_compared"] > 0
    assert report["elements"] == sum(y.numel() for y in sim.outputs)
    assert [o["shape"] for o in report["outputs"]] == [list(y.shape) for y in sim.outputs]


def test_xmodel_interp_floatops_clamp_needs_float_ops(sims):
    graph = _golden_graph(("golden_wide", "floatops", "default"))
    clamp = next(op.name for op in graph.ops if op.type == "nndct_clamp")
    with pytest.raises(interp.InterpreterError, match=r"op %r \(nndct_clamp\): the file carries no bounds.*not computable from the file"
                       % clamp):
        interp.run(graph, sims[("golden_wide", "floatops", "default")].inputs)


@pytest.mark.parametrize("config", ("default", "nocle"))
def test_xmodel_interp_floatops_with_the_models_clamp(config, sims):
    """The model's clamp is torch.clamp(x, -1, 1) (golden_wide_models.FloatOps); aten::silu and
    aten::mean run as the interpreter's built-ins."""
    case = ("golden_wide", "floatops", config)
    graph = _golden_graph(case)
    clamps = [op.name for op in graph.ops if op.type == "nndct_clamp"]
    assert len(clamps) == 1
    results = interp.run(graph, sims[case].inputs, {clamps[0]: lambda xs: torch.clamp(xs[0], -1, 1)})
    _assert_outputs_equal(graph, results, sims[case])


def test_xmodel_interp_two_inputs_in_argument_order(sims):
    """TwoInput's file lists input_1 before input_0: the inputs still go by argument order."""
    case = ("golden_wide", "twoinput", "default")
    graph = _golden_graph(case)
    assert [op.name for op in graph.ops if op.type == "data"] == ["TwoInput__input_1", "TwoInput__input_0"]
    assert [op.name for op in interp.data_ops(graph)] == ["TwoInput__input_0", "TwoInput__input_1"]
    x0, x1 = sims[case].inputs
    by_name = interp.run(graph, {"TwoInput__input_1": x1, "TwoInput__input_0": x0})
    _assert_outputs_equal(graph, by_name, sims[case])
    with pytest.raises(interp.InterpreterError, match="does not fit the data op"):
        interp.run(graph, [x1, x0])


def test_xmodel_interp_detect_outputs_in_model_order(sims):
    case = ("golden_wide", "detect", "nocle")
    graph = _golden_graph(case)
    results = interp.run(graph, sims[case].inputs)
    file_order = interp.outputs(graph)
    assert file_order == ["Detect__Detect_Conv2d_head4__ret_fix", "Detect__Detect_Conv2d_head3__ret_41_fix"]
    plain = interp.model_outputs(graph, results)  # file order, NCHW
    assert [list(v.shape) for v in plain] == [[1, 21, 3, 3], [1, 21, 6, 6]]
    _assert_outputs_equal(graph, results, sims[case])


# --- the writer's graphs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", WRITER_CASES, ids=_case_id)
def test_xmodel_interp_writer_graph_equals_sim(case, sims):
    sim = sims[case]
    graph = build_xgraph(sim.session, sim.lowered, sim.inputs)
    report = verify.compare(graph, sim.session, sim.lowered, sim.inputs, sim.names)
    assert report["mismatches"] == 0 and report["elements"] == sum(y.numel() for y in sim.outputs)
    assert report["nodes_differing"] == [] and report["nodes_compared"] > 0
    assert _assert_intermediates_equal(graph, interp.run(graph, sim.inputs, sim.float_ops(graph)), sim) > 0
    # the file it serializes to passes the reader's check and runs the same
    rebuilt = reader.check(reader.read_xmodel(graph.serialize()))
    _assert_outputs_equal(rebuilt, interp.run(rebuilt, sim.inputs, sim.float_ops(rebuilt)), sim)


def test_xmodel_interp_compare_sees_a_changed_weight(sims):
    sim = sims[("golden", "resblock", "nocle")]
    graph = build_xgraph(sim.session, sim.lowered, sim.inputs)
    weight = graph.get_op("ResBlockNet__head_weight")
    data = weight.data()
    data.reshape(-1)[0] += 2.0 ** -4
    weight.attrs["data"] = ("bytes", data.astype("<f4").tobytes())
    report = verify.compare(graph, sim.session, sim.lowered, sim.inputs, sim.names)
    assert report["mismatches"] > 0 and report["max_abs_diff"] > 0
    assert report["nodes_differing"] == ["ResBlockNet__ResBlockNet_Conv2d_head__ret_fix"]


class Assorted(nn.Module):
    """Ops the golden files lack: depthwise multiplier 2, transposed convs (plain and depthwise),
    Hardsigmoid, AvgPool2d with ceil_mode, a padded MaxPool2d, a non-global adaptive pool."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.dw = nn.Conv2d(4, 8, 3, padding=1, groups=4)
        self.up = nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1)
        self.dwt = nn.ConvTranspose2d(6, 6, 2, stride=2, groups=6)
        self.hs = nn.Hardsigmoid()
        self.pool = nn.AvgPool2d(3, stride=2, ceil_mode=True)
        self.mp = nn.MaxPool2d(3, stride=2, padding=1)
        self.fc = nn.Linear(6 * 2 * 2, 5)

    def forward(self, x):
        x = self.dw(F.relu(self.c(x)))
        x = self.hs(self.dwt(self.up(x)))
        x = torch.sigmoid(self.mp(self.pool(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 2), 1))


@pytest.mark.filterwarnings("ignore:CLE. skipping pair")
def test_xmodel_interp_writer_graph_of_assorted_ops(tmp_path):
    torch.manual_seed(0)
    model = Assorted().eval()
    calib = torch.randn(16, 3, 8, 8)
    q = torch_quantizer("calib", model, (calib[:4],), output_dir=str(tmp_path), device=torch.device("cpu"))
    with torch.no_grad():
        for i in range(0, 16, 4):
            q.quant_model(calib[i:i + 4])
    q.export_quant_config()
    t = torch_quantizer("test", model, (calib[:4],), output_dir=str(tmp_path), device=torch.device("cpu"))
    x = [torch.randn(1, 3, 8, 8)]
    graph = build_xgraph(t._session, t.quant_model, x)
    types = {op.type for op in graph.ops}
    assert {"depthwise-conv2d", "transposed-conv2d", "transposed-depthwise-conv2d", "hard-sigmoid"} <= types
    report = verify.compare(graph, t._session, t.quant_model, x)
    assert report["mismatches"] == 0 and report["elements"] == 5
    assert report["nodes_differing"] == [] and report["nodes_compared"] >= 8
    sim = type("S", (), {})()
    sim.outputs, sim.values = verify.record(t.quant_model, x)
    sim.names = verify.sim_names(t._session, x)
    results = interp.run(graph, x)
    assert _assert_intermediates_equal(graph, results, sim) >= 8


# --- semantics on small hand-built graphs -----------------------------------------------------------------

def _graph_with_input(shape):
    g = XGraph("g")
    x = g.create_op("g__input_0", "data", {"shape": list(shape), "data_type": "FLOAT32"})
    return g, x


def test_xmodel_interp_hard_sigmoid_alone_is_xirs_definition():
    g, x = _graph_with_input([1, 2, 2, 3])
    g.create_op("hs", "hard-sigmoid", None, {"input": [x]})
    value = torch.linspace(-4, 4, 12).reshape(1, 3, 2, 2)
    out = interp.run(g, [value])["hs"]
    assert torch.equal(out, (F.relu6(value + 3) / 6).permute(0, 2, 3, 1))


def test_xmodel_interp_hard_sigmoid_times_const_is_the_sims_arithmetic():
    g, x = _graph_with_input([1, 4])
    hs = g.create_op("hs", "hard-sigmoid", None, {"input": [x]})
    c = g.create_const_op("c", np.array([6.0 * 2731.0 / 16384.0], dtype=np.float32))
    g.create_op("m", "mul", None, {"input": [hs, c]})
    value = torch.tensor([[-3.5, -0.7, 0.3, 2.9]])
    expected = torch.mul(torch.clamp(torch.add(value, 3.0), 0.0, 6.0), 2731.0 / 16384.0)
    assert _bits_equal(interp.run(g, [value])["m"], expected)


def test_xmodel_interp_custom_ops_built_in_and_unknown():
    g, x = _graph_with_input([1, 3, 4, 5])
    g.create_op("t", "transpose", {"order": [0, 3, 1, 2]}, {"input": [x]})
    g.create_op("silu", "aten::silu", {"shape": [1, 5, 3, 4], "data_type": "FLOAT32"}, {"input": [g.get_op("t")]})
    g.create_op("mean", "aten::mean", {"shape": [1, 5], "data_type": "FLOAT32"}, {"input": [g.get_op("silu")]})
    value = torch.randn(1, 5, 3, 4)
    results = interp.run(g, [value])
    assert _bits_equal(results["silu"], F.silu(value))
    assert _bits_equal(results["mean"], F.silu(value).mean(dim=(2, 3)))
    assert interp.outputs(g) == ["mean"]
    g.create_op("odd", "my_op", {"shape": [1, 5], "data_type": "FLOAT32"}, {"input": [g.get_op("mean")]})
    with pytest.raises(interp.InterpreterError, match=r"op 'odd' \(my_op\): a custom op type"):
        interp.run(g, [value])
    results = interp.run(g, [value], {"odd": lambda xs: xs[0] * 2})
    assert torch.equal(results["odd"], results["mean"] * 2)


def test_xmodel_interp_refuses_inputs_that_do_not_fit():
    g, _ = _graph_with_input([1, 8, 8, 3])
    with pytest.raises(interp.InterpreterError, match=r"op 'g__input_0' \(data\): input of dims \[1, 3, 8, 4\]"):
        interp.run(g, [torch.zeros(1, 3, 8, 4)])
    with pytest.raises(interp.InterpreterError, match="2 inputs given, the graph has 1 data ops"):
        interp.run(g, [torch.zeros(1, 3, 8, 8)] * 2)


def test_xmodel_interp_layout_sensitive_and_other_op_types():
    """softmax, scale and reductions on a 4-D NHWC value run on the NCHW memory with the axis mapped;
    the other op types against plain torch."""
    g, x = _graph_with_input([1, 4, 5, 3])
    scale = g.create_const_op("s", np.array([0.5, 2.0, -1.0], dtype=np.float32))
    bias = g.create_const_op("b", np.array([0.25, 0.0, 1.0], dtype=np.float32))
    g.create_op("softmax", "softmax", {"axis": 3}, {"input": [x]})
    g.create_op("scale", "scale", {"axis": -1}, {"input": [x], "scale": [scale], "bias": [bias]})
    g.create_op("sum", "reduction_sum", {"axis": [1, 2], "keep_dims": False}, {"input": [x]})
    g.create_op("max", "reduction_max", {"axis": [3], "keep_dims": True}, {"input": [x]})
    g.create_op("cat", "concat", {"axis": 3}, {"input": [x, g.get_op("softmax")]})
    g.create_op("pad", "pad", {"paddings": [0, 0, 1, 0, 0, 2, 0, 0], "mode": "CONSTANT"}, {"input": [x]})
    g.create_op("up", "resize", {"mode": "NEAREST", "scale": [2.0, 3.0]}, {"input": [x]})
    g.create_op("u8", "fix", {"fix_point": 2, "bit_width": 8, "round_mode": "PY3_ROUND", "if_signed": False},
                {"input": [x]})
    flat = g.create_op("flat", "flatten", {"start_axis": 1, "end_axis": -1}, {"input": [x]})
    w = g.create_const_op("w", np.arange(60 * 2, dtype=np.float32).reshape(60, 2) / 64)
    g.create_op("mm", "matmul", {"transpose_a": False, "transpose_b": False}, {"input": [flat, w]})
    g.create_op("hsw", "hard-swish", None, {"input": [x]})
    value = torch.randn(1, 3, 4, 5)
    r = interp.run(g, [value])
    nhwc = value.permute(0, 2, 3, 1)
    assert _bits_equal(r["softmax"], F.softmax(value, 1).permute(0, 2, 3, 1))
    bn = F.batch_norm(value, torch.zeros(3), torch.ones(3), torch.tensor([0.5, 2.0, -1.0]),
                      torch.tensor([0.25, 0.0, 1.0]), False, 0.0, 0.0)
    assert _bits_equal(r["scale"], bn.permute(0, 2, 3, 1))
    assert _bits_equal(r["sum"], value.sum((2, 3)))
    assert _bits_equal(r["max"], value.amax(1, keepdim=True).permute(0, 2, 3, 1))
    assert torch.equal(r["cat"], torch.cat([nhwc, r["softmax"]], 3))
    assert torch.equal(r["pad"], F.pad(nhwc, (0, 0, 0, 2, 1, 0)))
    assert torch.equal(r["up"], F.interpolate(value, scale_factor=(3.0, 2.0)).permute(0, 2, 3, 1))
    assert torch.equal(r["u8"], torch.clamp(torch.round(nhwc * 4), 0, 255) / 4)
    assert _bits_equal(r["mm"], torch.matmul(nhwc.reshape(1, 60), torch.from_numpy(w.data())))
    assert _bits_equal(r["hsw"], nhwc * (F.relu6(nhwc + 3) / 6))
