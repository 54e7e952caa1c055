"""Layer norms, GELU and parameters used directly (layer scales) as the real quantizer treats them,
against its own files (tests/data/layernorm/, tests/data/README.md), and the exact ONNX flavour's
layer norm against torch's CPU kernel and the simulation.

nndct (pytorch_nndct 3.5): a layer norm (``nn.LayerNorm``, or ``F.layer_norm`` as torchvision's
``LayerNorm2d`` calls it) is node ``nndct_layer_norm_<i>`` whose module (``deephi_LayerNorm``)
quantizes its weight and bias once as parameters (std_round, diffs) and runs ``F.layer_norm`` on
its quantized input; one without affine parameters is first given weight 1 and bias 0; a
state-dict tensor a quantizable node takes directly (ConvNeXt's ``layer_scale * x``) is registered
as a parameter without a fix position (``[[8,null]]``) and used in float.
"""
import fractions
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.support import DATA
from pipeline.apis import torch_quantizer
from pipeline.errors import QuantizationError
from pipeline.quantizers.sim.export.onnx.builder import Unsupported
from pipeline.quantizers.sim.export.onnx.builder import IR_VERSION, OPSET, Builder
from pipeline.quantizers.sim.export.onnx.layer_norm import OnnxOps, TorchOps, check_kernel, layer_norm_rows
from pipeline.fx.capture import capture
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config

from tests.support import layernorm_model as lm

REAL = os.path.join(DATA, "layernorm")
CONFIGS = {"default": None, "nocle": {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}}


def _config_file(tmp_path, cfg):
    if CONFIGS[cfg] is None:
        return None
    import json
    path = str(tmp_path / "nocle.json")
    with open(path, "w") as f:
        json.dump(CONFIGS[cfg], f)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The sim's calibration and test mode of LNNet in both configs: folder, test-mode quantizer, output."""
    out = {}
    for cfg in CONFIGS:
        root = tmp_path_factory.mktemp("ln_" + cfg)
        conf = _config_file(root, cfg)
        lm.run_phase(torch_quantizer, "calib", str(root / "q"), conf)
        q, y = lm.run_phase(torch_quantizer, "test", str(root / "q"), conf)
        out[cfg] = (str(root / "q"), q, y)
    return out


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_layernorm_model_equals_the_real_quantizer(cfg, runs):
    folder, _, y = runs[cfg]
    mine, theirs = qi.read_quant_info(folder), qi.read_quant_info(os.path.join(REAL, cfg))
    for key in ("param", "output", "input"):
        assert mine[key] == theirs[key], key
    assert list(mine["param"]) == list(theirs["param"]) and mine["graph_md5"] == theirs["graph_md5"]
    # the real values, spelled out: gamma/beta quantized (fix 6; the large head_norm weight at 3), the layer
    # scale and the added parameter registered without a fix position, the affine-less norm given weight 1, bias 0
    assert theirs["param"]["LNNet::norm2d.weight"] == [[8, 6]] and theirs["param"]["LNNet::head_norm.weight"] == [[8, 3]]
    assert theirs["param"]["LNNet::layer_scale"] == [[8, None]] and theirs["param"]["LNNet::offset"] == [[8, None]]
    assert theirs["param"]["LNNet::plain.weight"] == [[8, 6]] and theirs["param"]["LNNet::plain.bias"] == [[8, 12]]
    assert [k for k in theirs["output"] if "layer_norm" in k] == [
        "LNNet::nndct_layer_norm_%d" % i for i in (3, 8, 16, 18)]
    want = np.load(os.path.join(REAL, cfg, "y_0.npy"))
    got = y.numpy()
    assert got.dtype == want.dtype and np.array_equal(got.view(np.int32), want.view(np.int32))


def test_layernorm_fast_finetune_equals_the_real_quantizer(tmp_path):
    """Fast finetune: the same quant_info.json and outputs, and a param.pth the real quantizer's test
    mode loads (it loads strictly): the layer scale and added parameter (float), the layer norms'
    rounded weight and bias as module_<i> entries, the finetuned layers, in nndct's order and values."""
    import hashlib
    import json
    out = str(tmp_path / "ft")
    lm.run_finetune_phase(torch_quantizer, "calib", out)
    _, y = lm.run_finetune_phase(torch_quantizer, "test", out)
    real = os.path.join(REAL, "ft")
    mine, theirs = qi.read_quant_info(out), qi.read_quant_info(real)
    for key in ("param", "output", "input", "fast_finetuned"):
        assert mine[key] == theirs[key], key
    want = np.load(os.path.join(real, "y_0.npy"))
    assert np.array_equal(y.numpy().view(np.int32), want.view(np.int32))
    with open(os.path.join(real, "param_sha256.json")) as f:
        digests = json.load(f)
    state = torch.load(os.path.join(out, "param.pth"))
    assert list(state) == list(digests)
    assert {k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in state.items()} == digests


def test_quantized_layer_norm_weights_change_the_output(runs):
    """The reference is not blind to the parameters: the float model's weights give other outputs."""
    _, q, y = runs["default"]
    with torch.no_grad():
        float_out = lm.make_model()(lm.make_inputs(4, 3))
    assert not torch.equal(y, float_out)


def test_layernorm_exact_onnx_equals_the_simulation(runs, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    _kernel_or_skip()
    _, q, y = runs["default"]
    out = str(tmp_path / "onnx")
    q.export_onnx_model(out, native_onnx=False)
    path = [f for f in os.listdir(out) if f.endswith("_int.onnx")]
    assert len(path) == 1
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(os.path.join(out, path[0]), sess_options=options, providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: lm.make_inputs(4, 3).numpy()})[0]
    assert np.array_equal(got.view(np.int32), y.numpy().view(np.int32))


def _kernel_or_skip():
    """The kernel of this torch's F.layer_norm the lowering follows (check_kernel), or a skip saying
    that it follows none (a build other than those measured: ATEN_CPU_CAPABILITY=default, ...)."""
    try:
        return check_kernel(16, None, None, 1e-5)
    except Unsupported as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 15, 16, 24, 31, 32, 40, 64, 100, 128, 135, 136, 150, 264, 384, 777,
                               2100])
def test_kernel_steps_equal_torch_layer_norm(n):
    """The steps the ONNX lowering writes give F.layer_norm's bits (gamma and beta, either, neither)."""
    kernel = _kernel_or_skip()
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-128, 128, (256, n), generator=g).float() * 2.0 ** -3
    x[:64] = torch.randn(64, n, generator=g) * 3  # off any grid too
    gamma = torch.randint(-128, 128, (n,), generator=g).float() * 2.0 ** -6
    beta = torch.randint(-128, 128, (n,), generator=g).float() * 2.0 ** -9
    for w, b in ((gamma, beta), (gamma, None), (None, beta), (None, None)):
        want = F.layer_norm(x, (n,), w, b, 1e-6)
        got = layer_norm_rows(TorchOps(), x, n, w, b, 1e-6, kernel)
        assert torch.equal(want.view(torch.int32), got.view(torch.int32)), (w is None, b is None)


@pytest.mark.parametrize("n", [5, 20, 200, 777])
def test_onnx_layer_norm_steps_in_onnx_runtime(n):
    """The ONNX nodes of the steps, run by ONNX Runtime, give F.layer_norm's bits (rows of any length)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    kernel = _kernel_or_skip()
    g = torch.Generator().manual_seed(n)
    x = torch.randn(300, n, generator=g) * 2
    gamma, beta = torch.randn(n, generator=g), torch.randn(n, generator=g) * 0.1
    for w, bias in ((gamma, beta), (None, None), (gamma, None), (None, beta)):
        b = Builder(None, None, {}, {})
        names = [None if t is None else b.init(k, t.numpy()) for k, t in (("gamma", w), ("beta", bias))]
        b.op("Identity", [layer_norm_rows(OnnxOps(b, "ln"), "x", n, names[0], names[1], 1e-5, kernel)], "y")
        graph = helper.make_graph(b.nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", n])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])],
                                  initializer=list(b.initializers.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(model.SerializeToString(), sess_options=options,
                                       providers=["CPUExecutionProvider"])
        got = session.run(None, {"x": x.numpy()})[0]
        want = F.layer_norm(x, (n,), w, bias, 1e-5).numpy()
        assert np.array_equal(got.view(np.int32), want.view(np.int32)), (w is None, bias is None)


def test_another_layer_norm_kernel_is_refused(monkeypatch):
    """A torch whose layer norm rounds otherwise than both kernels the lowering follows (the
    non-vectorized build, ...) is refused at export rather than written inexactly."""
    real = F.layer_norm
    monkeypatch.setattr(F, "layer_norm", lambda x, *a, **k: torch.nextafter(real(x, *a, **k), torch.tensor(9.0)))
    with pytest.raises(Unsupported, match="computes otherwise"):
        check_kernel(16, None, None, 1e-5)


def test_the_kernel_followed_is_the_one_of_this_torch():
    """torch 2's builds compute the CENTERED kernel, torch 1.13's AVX2 build SCALE_BIAS (module
    docstring of layer_norm.py); the two differ, so the probe tells them apart."""
    from pipeline.cpu import cpu_capability
    from pipeline.quantizers.sim.export.onnx.layer_norm import CENTERED, SCALE_BIAS
    kernel = _kernel_or_skip()
    expected = SCALE_BIAS if torch.__version__.startswith("1.") else CENTERED
    assert kernel == expected, (torch.__version__, cpu_capability())
    x = torch.randint(-128, 128, (64, 40), generator=torch.Generator().manual_seed(0)).float() * 2.0 ** -3
    other = {CENTERED: SCALE_BIAS, SCALE_BIAS: CENTERED}[kernel]
    assert not torch.equal(layer_norm_rows(TorchOps(), x, 40, None, None, 1e-5, other), F.layer_norm(x, (40,)))


def _exact_fma(a: float, b: float, c: float) -> np.float32:
    """a * b + c rounded once to float32 (half to even), from exact rationals."""
    exact = fractions.Fraction(float(a)) * fractions.Fraction(float(b)) + fractions.Fraction(float(c))
    lo = np.float32(float(exact))  # float() rounds to float64, maybe across a float32 tie: fix below
    candidates = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
    best = min(candidates, key=lambda v: (abs(fractions.Fraction(float(v)) - exact),
                                          int(np.array(v).view(np.int32)) & 1))
    return best


def test_fma_rounds_once():
    ops = TorchOps()
    # 2^25 + 6 - 2^-45: float64 rounds it to the float32 tie 2^25 + 6, whose even neighbour is 2^25 + 8;
    # one rounding gives 2^25 + 4
    a, b, c = np.float32(1 + 2 ** -23), np.float32(2 - 2 ** -22), np.float32(2 ** 25 + 4)
    got = ops.fma(torch.tensor([a]), torch.tensor([b]), torch.tensor([c]))
    assert float(got) == 2 ** 25 + 4 == float(_exact_fma(a, b, c))
    assert float(np.float32(float(a) * float(b) + float(c))) == 2 ** 25 + 8  # rounding twice
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(3000, generator=g) * torch.pow(2.0, torch.randint(-30, 30, (3000,), generator=g).float())
          for _ in range(3)]
    got = ops.fma(*xs)
    for i in range(0, 3000, 7):
        assert float(got[i]) == float(_exact_fma(*(float(x[i]) for x in xs)))


def test_capture_names_and_parameters():
    graph = capture(lm.make_model(), (lm.make_inputs(1, 1),), load_quant_config(None).rewrites())
    norms = [n for n in graph.nodes if n.op == "nndct_layer_norm"]
    assert [n.name for n in norms] == ["nndct_layer_norm_%d" % i for i in (3, 8, 16, 18)]
    assert norms[0].param_names == {"weights": "LNNet::norm2d.weight", "bias": "LNNet::norm2d.bias"}
    assert norms[2].param_names == {"weights": "LNNet::plain.weight", "bias": "LNNet::plain.bias"}
    assert [n.free_params for n in graph.nodes if n.free_params] == [["LNNet::layer_scale"], ["LNNet::offset"]]
    plain = graph.parameter("LNNet::plain.weight")
    assert torch.equal(plain, torch.ones(16)) and torch.equal(graph.parameter("LNNet::plain.bias"), torch.zeros(16))


def test_quant_info_null_param_round_trip(tmp_path):
    info = qi.make_quant_info({"M::a.weight": 5, "M::scale": None}, {"M::nndct_input_0": 4}, 8, False, "0" * 32)
    qi.write_quant_info(str(tmp_path), info)
    with open(str(tmp_path / "quant_info.json")) as f:
        assert '"M::scale":[[8,null]]' in f.read()
    assert qi.read_quant_info(str(tmp_path))["param"]["M::scale"] == [[8, None]]
    # an output too: an int64 size a quantizable node computes (Swin's B * num_windows; the real
    # quantizer's tests/data/corpus_real/tv_swin) is registered and never quantized
    info["output"]["M::nndct_elemwise_mul_1"] = [[8, None]]
    qi.write_quant_info(str(tmp_path), info)
    assert qi.read_quant_info(str(tmp_path))["output"]["M::nndct_elemwise_mul_1"] == [[8, None]]


class _ComputedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return F.layer_norm(x, (4,), self.w * 2, None)


class _Norm2dNoAffine(lm.LayerNorm2d):
    pass


def test_layer_norm_weight_computed_in_forward_is_refused():
    with pytest.raises(QuantizationError, match="layer_norm.*weight is computed"):
        capture(_ComputedWeight(), (torch.randn(2, 4),), load_quant_config(None).rewrites())


def test_layer_norm_subclass_without_affine_is_refused():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), _Norm2dNoAffine(4, elementwise_affine=False))
    with pytest.raises(QuantizationError, match="elementwise_affine=False.*plain nn.LayerNorm"):
        capture(model, (torch.randn(1, 3, 4, 4),), load_quant_config(None).rewrites())
