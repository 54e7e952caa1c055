"""The sim backend against the real quantizer's golden_wide data (tests/data/golden_wide, see its
README): float operators, two inputs, a 2-D input with BatchNorm1d, a ShuffleNetV2 unit with
shape arithmetic, a two-output detector.

Each case is driven through the drop-in API exactly as the data was made: calibration over 8
batches of 4 (one tensor per input), ``export_quant_config``, then a NEW ``torch_quantizer`` in
test mode on the 16 eval inputs as one batch and on the 4 tie inputs. The reference used two
threads, and so do these runs: the bias-correction sums (float32 torch reductions, as in nndct)
depend on the thread count in their last bits.
"""
import importlib.util
import json
import os

import numpy as np
import pytest
import torch

from tests.support import DATA as TESTS_DATA, REPO, SUPPORT, pinned_threads
from pipeline.apis import torch_quantizer
from pipeline.errors import QuantizationError
from pipeline.quantizers import quant_info as qi

DATA = os.path.join(TESTS_DATA, "golden_wide")
_spec = importlib.util.spec_from_file_location("golden_wide_models", os.path.join(DATA, "golden_wide_models.py"))
gwm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gwm)

SET = "golden_wide"
MODELS = gwm.SETS[SET]["models"]
CONFIGS = ("nocle", "default")
NOCLE = {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}
CASES = [(m, c) for m in MODELS for c in CONFIGS]
INDEX = json.load(open(os.path.join(DATA, "index.json")))


def _sfx(i, n):
    return "" if n == 1 else "_%d" % i


def _load(name, base, n):
    return [torch.from_numpy(np.load(os.path.join(DATA, name, base + _sfx(i, n) + ".npy"))) for i in range(n)]


def _model(name):
    spec = gwm.SETS[SET][name]
    model = gwm.build(name, spec)
    model.load_state_dict(torch.load(os.path.join(DATA, name, "float_state_dict.pt"), weights_only=True))
    return model.eval()


def _quantizer(mode, name, config, folder):
    k = INDEX[name][config]["n_inputs"]
    calib = _load(name, "calib_inputs", k)
    cfg = None
    if config == "nocle":
        cfg = os.path.join(folder, "nocle.json")
        with open(cfg, "w") as f:
            json.dump(NOCLE, f)
    return torch_quantizer(mode, _model(name), tuple(t[:4].clone() for t in calib), output_dir=folder,
                           device=torch.device("cpu"), quant_config_file=cfg), calib


def _as_tuple(y):
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Per case: the calibration folder and the test-mode outputs (eval, ties), made with two
    threads as the reference was (or tests.support.pinned_threads)."""
    out = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(pinned_threads(2))
    try:
        _run_cases(tmp_path_factory, out)
    finally:
        torch.set_num_threads(threads)
    return out


def _run_cases(tmp_path_factory, out):
    for name, config in CASES:
        folder = str(tmp_path_factory.mktemp("%s_%s" % (name, config)))
        q, calib = _quantizer("calib", name, config, folder)
        with torch.no_grad():
            for i in range(0, 32, 4):
                q.quant_model(*[t[i:i + 4].clone() for t in calib])
        q.export_quant_config()
        t, _ = _quantizer("test", name, config, folder)
        k = INDEX[name][config]["n_inputs"]
        with torch.no_grad():
            y = _as_tuple(t.quant_model(*_load(name, "eval_inputs", k)))
            yt = _as_tuple(t.quant_model(*_load(name, "tie_inputs", k)))
        out[(name, config)] = (folder, y, yt, t)


@pytest.mark.parametrize("name,config", CASES)
def test_golden_wide_fix_positions_equal(name, config, results):
    mine = qi.read_quant_info(results[(name, config)][0])
    with open(os.path.join(DATA, name, config, "quant_info.json")) as f:
        golden = json.load(f)
    for section in ("param", "output", "input"):
        assert list(mine[section]) == list(golden[section]), section  # same names, same order
        assert {k: v for k, v in mine[section].items()} == golden[section], section
    assert mine["bias_corrected"] == golden["bias_corrected"] == (config == "default")
    assert mine["graph_md5"] == golden["graph_md5"]  # the same nodes, op types and edges as nndct's graph


@pytest.mark.parametrize("name", MODELS)
def test_golden_wide_bias_corr_within_a_few_ulps(name, results):
    """bias_corr.pth equals nndct's to a few float32 ulps of the layer's largest bias (the residue of
    float convolutions and reductions whose summation order depends on the CPU; see
    test_sim_golden.test_golden_bias_corr); it never reaches the quantized biases. At another
    thread count than the reference's two the real quantizer's own values move further: at one
    thread both it and the simulation give floatops' nndct_conv2d_8 a correction 3.01e-6 (101 ulps of
    that layer's largest bias) away from the two-thread reference, the same value in both."""
    t = results[(name, "default")][3]
    mine = qi.read_bias_corr(results[(name, "default")][0])
    ref = torch.load(os.path.join(DATA, name, "default", "bias_corr.pt"), weights_only=True)
    assert list(mine) == list(ref)
    graph = t._session.graph
    for key, golden in ref.items():
        bias = graph.module(graph.by_name[key.split("::")[1]]).bias.detach()  # after BN folding and CLE
        top = bias.abs().max()
        ulp = torch.nextafter(top, torch.tensor(float("inf"))) - top
        distance = ((bias - mine[key]) - (bias - golden)).abs()
        if pinned_threads(2) == 2:
            assert float((distance / ulp).max()) <= 8, (key, float((distance / ulp).max()))
        else:
            assert float(distance.max()) <= 1e-5, (key, float(distance.max()))


@pytest.mark.parametrize("name,config", CASES)
def test_golden_wide_outputs_bit_exact(name, config, results):
    _, y, yt, _ = results[(name, config)]
    n = INDEX[name][config]["n_outputs"]
    assert len(y) == len(yt) == n
    for j in range(n):
        for mine, base in ((y[j], "quant_outputs"), (yt[j], "quant_outputs_ties")):
            gold = np.load(os.path.join(DATA, name, config, base + _sfx(j, n) + ".npy"))
            assert mine.shape == gold.shape
            assert np.array_equal(mine.numpy().view(np.int32), gold.view(np.int32)), (base, j)


@pytest.mark.parametrize("name,config", CASES)
def test_golden_wide_intermediates_bit_exact(name, config, results):
    """Every stored per-node test-mode output (float operators, unfused BatchNorm1d, slices,
    transposes, ...) equals the value of the lowered node of the same nndct name."""
    t = results[(name, config)][3]
    gm = t.quant_model
    k = INDEX[name][config]["n_inputs"]
    values = {}

    class Grab(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if "nndct_node" in node.meta:
                values[node.meta["nndct_node"]] = value
            return value

    with torch.no_grad():
        Grab(gm).run(*_load(name, "eval_inputs", k))
    stored = np.load(os.path.join(DATA, name, config, "intermediates.npz"))
    tensors = [key for key in stored.files if stored[key].ndim > 0]
    assert tensors and set(tensors) <= set(values)
    differ = [key for key in tensors
              if not np.array_equal(values[key].contiguous().numpy(), stored[key])]
    assert differ == []


def test_golden_wide_thread_count_moves_only_last_bits_of_bias_correction(results, tmp_path):
    """The shuffle model (bias correction, every op kind) calibrated with one thread: the same fix
    positions and outputs as with two; only the bias corrections may move in their last bits."""
    name, config = "shuffle", "default"
    folder, y, _, _ = results[(name, config)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        q, calib = _quantizer("calib", name, config, str(tmp_path))
        with torch.no_grad():
            for i in range(0, 32, 4):
                q.quant_model(*[t[i:i + 4].clone() for t in calib])
        q.export_quant_config()
        t, _ = _quantizer("test", name, config, str(tmp_path))
        with torch.no_grad():
            y1 = t.quant_model(*_load(name, "eval_inputs", 1))
    finally:
        torch.set_num_threads(threads)
    assert qi.read_quant_info(str(tmp_path)) == qi.read_quant_info(folder)
    one, default = qi.read_bias_corr(str(tmp_path)), qi.read_bias_corr(folder)
    # the float32 bias-correction sums depend on the thread count in their last bits, as nndct's
    # (golden_wide README, "Provenance"); here that moved no fix position and no output
    assert one.keys() == default.keys()
    assert all(torch.allclose(one[k], default[k], rtol=0, atol=1e-6) for k in one)
    assert torch.equal(y1, y[0])


def test_view_of_a_non_contiguous_tensor_is_named_with_the_fix(tmp_path):
    """``x.permute(...).view(n, -1)`` (Shuffle(head_view=True), refused by plain torch and nndct
    alike): calibration and test mode name the node and suggest reshape."""
    model = gwm.build("shuffle", gwm.SETS[SET]["shuffle"], head_view=True).eval()
    x = _load("shuffle", "calib_inputs", 1)[0][:4]
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        model(x)  # the float model fails too
    match = r"node 'view_\d+' \(call_method view\) failed: view size is not compatible.*float model fails " \
            r"here too.*use \.reshape\(\.\.\.\) instead of \.view"
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match=match):
        q.quant_model(x)
    # test mode, with the files of the model that reshapes
    good = _quantizer("calib", "shuffle", "nocle", str(tmp_path))[0]
    good.quant_model(x)
    good.export_quant_config()
    with open(os.path.join(str(tmp_path), "nocle.json")) as f:
        assert json.load(f) == NOCLE
    with pytest.raises(QuantizationError, match=match):
        torch_quantizer("test", model, (x,), output_dir=str(tmp_path), device="cpu",
                        quant_config_file=os.path.join(str(tmp_path), "nocle.json"))


@pytest.mark.parametrize("name", MODELS)
def test_golden_wide_onnx_exact_flavour_equals_the_simulation(name, results, tmp_path):
    """Both flavours export (several inputs and outputs, float operators, unfused BatchNorm,
    chunk/split, shape arithmetic); the exact one gives the simulation's bits in ONNX Runtime
    (graph optimizations off) on the eval inputs, every output."""
    ort = pytest.importorskip("onnxruntime")
    from pipeline.quantizers.sim.export import export_onnx, verify_qdq
    t = results[(name, "default")][3]
    k = INDEX[name]["default"]["n_inputs"]
    inputs = _load(name, "eval_inputs", k)
    example1 = tuple(x[:1].clone() for x in inputs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with torch.no_grad():
        expected = _as_tuple(t.quant_model(*inputs))
    for flavour in ("exact", "qdq"):
        path = export_onnx(t.quant_model, example1 if k > 1 else example1[0], str(tmp_path / (flavour + ".onnx")), flavour)
        session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == (["input"] if k == 1 else ["input_%d" % i for i in range(k)])
        got = session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})
        assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
        if flavour == "exact":
            for g, e in zip(got, expected):
                assert np.array_equal(g.view(np.int32), e.numpy().view(np.int32))
        else:  # bit-exact against the simulation rounding half to even (raises otherwise)
            report = verify_qdq(t.quant_model, path, tuple(inputs))
            assert report["reference_mismatches"] == 0 and report["elements"] == sum(e.numel() for e in expected)


class _FloatOut(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.act = act

    def forward(self, x):
        return self.act(self.conv(x))


@pytest.mark.parametrize("act", [torch.nn.Sigmoid(), torch.nn.Tanh(), torch.nn.SiLU(), torch.nn.GELU()],
                         ids=["sigmoid", "tanh", "silu", "gelu"])
def test_float_operator_outputs_are_exact_in_onnx(act, tmp_path):
    """A float operator as the model output has no fix position: its raw float values (torch's)
    come out of both ONNX flavours bit for bit (a table of torch's values per input code)."""
    pytest.importorskip("onnxruntime")
    from pipeline.quantizers.sim.export import verify_onnx, verify_qdq
    x = torch.randn(8, 3, 12, 12, generator=torch.Generator().manual_seed(0)) * 2
    model = _FloatOut(act)
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path), device="cpu")
    q.quant_model(x)
    q.export_quant_config()
    t = torch_quantizer("test", model, (x,), output_dir=str(tmp_path), device="cpu")
    t.quant_model(x)
    exact = t.export_onnx_model(str(tmp_path / "exact"), native_onnx=False)
    assert verify_onnx(t.quant_model, exact, x)["mismatches"] == 0
    qdq = t.export_onnx_model(str(tmp_path / "qdq"), native_onnx=True)
    assert verify_qdq(t.quant_model, qdq, x)["reference_mismatches"] == 0


@pytest.mark.parametrize("name", MODELS)
def test_golden_wide_torch_script_reproduces_the_outputs(name, results, tmp_path):
    """export_torch_script traces the batch-1 example (one per input); the file gives the test-mode
    outputs bit for bit on the batch of 16 (shape arithmetic follows the batch size)."""
    _, y, _, t = results[(name, "default")]
    t.export_torch_script(str(tmp_path))
    files = [f for f in os.listdir(str(tmp_path)) if f.endswith("_int.pt")]
    script = torch.jit.load(str(tmp_path / files[0]))
    with torch.no_grad():
        got = _as_tuple(script(*_load(name, "eval_inputs", INDEX[name]["default"]["n_inputs"])))
    assert len(got) == len(y) and all(torch.equal(a, b) for a, b in zip(got, y))


@pytest.mark.slow
def test_golden_wide_two_ranks_give_the_real_quantizers_fix_positions(tmp_path):
    """Distributed calibration (torchrun, 2 ranks, round-robin shards) of models with constants,
    float operators and two inputs: the same files as one process, and nndct's fix positions."""
    import subprocess
    import sys
    from tests.support import dist_golden_wide_helper
    names = ["floatops", "twoinput"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    dist_golden_wide_helper.main(one, names)
    env = dict(os.environ, OMP_NUM_THREADS="2", PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           os.path.join(SUPPORT, "dist_golden_wide_helper.py"), two, ",".join(names)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in names:
        with open(os.path.join(one, name, "quant_info.json"), "rb") as a, \
                open(os.path.join(two, name, "quant_info.json"), "rb") as b:
            assert a.read() == b.read()
        golden = json.load(open(os.path.join(DATA, name, "default", "quant_info.json")))
        assert qi.read_quant_info(os.path.join(two, name))["output"] == golden["output"]
        c1, c2 = qi.read_bias_corr(os.path.join(one, name)), qi.read_bias_corr(os.path.join(two, name))
        assert list(c1) == list(c2) and all(torch.equal(c1[k], c2[k]) for k in c1)
