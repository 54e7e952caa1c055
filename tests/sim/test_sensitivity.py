"""pipeline.quantizers.sim.sensitivity: per-layer SQNR / cosine / ranges of the sim test-mode model against float.

Expected values are computed here independently: by hand on tiny models whose quantized output is
known exactly, from the real quantizer's golden intermediates (tests/data/golden, convnet) and
outputs (resblock), and from direct calls of the float model and the handle (digits CNN).
"""
import copy
import importlib.util
import json
import math
import os
import shutil
import struct

import numpy as np
import pytest
import torch
import torch.fx
from torch import nn

from pipeline.quantizers.sim import sensitivity_stats
from pipeline.errors import DataError, QuantizationError
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.base import QuantSettings
from pipeline.quantizers.sim.backend import SimBackend
from pipeline.quantizers.sensitivity_rows import ROW_KEYS, LayerSensitivity
from pipeline.quantizers.sim.sensitivity import layer_sensitivity
from pipeline.steps.test import sensitivity_table
from tests.support import DATA

_spec = importlib.util.spec_from_file_location("golden_models",
                                               os.path.join(DATA, "golden", "golden_models.py"))
gm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gm)

NO_CLE = {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}
CLE_ONLY = {"include_cle": True, "include_bias_corr": False, "target_device": "DPU"}


# ---------------------------------------------------------------------- helpers

def _settings(folder, config):
    if config is None:
        return QuantSettings()
    path = os.path.join(str(folder), "quant_config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return QuantSettings(quant_config_file=path)


def _calibrated(model, calib, folder, settings):
    """Calibrate ``model`` with the sim on ``calib`` (one batch); return (handle, quant_info)."""
    SimBackend().calibrate(model, calib[:1], [calib], str(folder), settings)
    handle = SimBackend().load_test(model, calib[:1], str(folder), settings)
    return handle, qi.read_quant_info(str(folder))


def _output_fix_pos(info, node):
    (entry,) = [v for k, v in info["output"].items() if k.endswith("::" + node)]
    return int(entry[0][1])


def _param_fix_pos(info, name):
    (entry,) = [v for k, v in info["param"].items() if k.endswith("::" + name)]
    return int(entry[0][1])


def _fq_half_up(x, p, bits=8):
    """DPU activation quantization in float64 numpy: clamp(floor(x * 2^p + 0.5)) * 2^-p."""
    half = 2 ** (bits - 1)
    return np.clip(np.floor(np.asarray(x, np.float64) * 2.0 ** p + 0.5), -half, half - 1) / 2.0 ** p


def _fq_std(x, p, bits=8):
    """Weight quantization: round half away from zero (C round), clamp."""
    v = np.asarray(x, np.float64) * 2.0 ** p
    half = 2 ** (bits - 1)
    return np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -half, half - 1) / 2.0 ** p


def _sqnr_cos(f, q):
    f = np.asarray(f, np.float64).ravel()
    q = np.asarray(q, np.float64).ravel()
    e = f - q
    sqnr = math.inf if not e.any() else 10 * math.log10((f @ f) / (e @ e))
    cos = float((f @ q) / math.sqrt((f @ f) * (q @ q)))
    return sqnr, cos


def _by_node(rows):
    return {r["node"]: r for r in rows}


def _quant_values(handle, x):
    """nndct node name -> value of the fx node carrying it (meta["nndct_node"]), one run of ``handle``."""
    values = {}

    class Grab(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if "nndct_node" in n.meta:
                values[n.meta["nndct_node"]] = out.detach().clone()
            return out

    with torch.no_grad():
        Grab(handle).run(x)
    return values


def _float_values(model, modules, x):
    """module attribute name -> float output (forward hooks on a deep copy), plus "input"."""
    work = copy.deepcopy(model).eval()
    values = {"input": x.clone()}
    for name in modules:
        getattr(work, name).register_forward_hook(
            lambda m, i, o, name=name: values.__setitem__(name, o.detach().clone()))
    with torch.no_grad():
        work(x.clone())
    return values


# ---------------------------------------------------------------------- tiny models, exact values

class TinyConvReLU(nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)
        self.relu = nn.ReLU()
        with torch.no_grad():
            self.conv.weight.fill_(w)
            self.conv.bias.fill_(b)

    def forward(self, x):
        return self.relu(self.conv(x))


def test_conv_relu_sqnr_cosine_ranges_match_hand_computation(tmp_path):
    torch.manual_seed(0)
    calib = torch.randn(8, 1, 6, 6)
    model = TinyConvReLU(0.75, 0.25).eval()
    settings = _settings(tmp_path, NO_CLE)
    handle, info = _calibrated(model, calib, tmp_path, settings)
    # eval data 1.5x wider than the calibration data: the input fix_pos must clip some of it
    evals = [torch.randn(4, 1, 6, 6) * 1.5 for _ in range(3)]
    rows = layer_sensitivity(model, handle, info, evals, settings)

    assert [r["node"] for r in rows] == ["nndct_input_0", "nndct_relu_2"]
    assert all(isinstance(r, LayerSensitivity) and list(r.to_json()) == list(ROW_KEYS) for r in rows)
    x = torch.cat(evals).numpy().astype(np.float64)
    p_in, p_out = _output_fix_pos(info, "nndct_input_0"), _output_fix_pos(info, "nndct_relu_2")
    w = _fq_std(0.75, _param_fix_pos(info, "conv.weight"))
    b = _fq_std(0.25, _param_fix_pos(info, "conv.bias"))
    xq = _fq_half_up(x, p_in)
    f_out = np.maximum(0.75 * x + 0.25, 0.0)
    q_out = _fq_half_up(np.maximum(w * xq + b, 0.0), p_out)

    r_in, r_out = rows
    for row, f, q, p in ((r_in, x, xq, p_in), (r_out, f_out, q_out, p_out)):
        sqnr, cos = _sqnr_cos(f, q)
        assert row["sqnr_db"] == pytest.approx(sqnr, abs=1e-4)
        assert row["cosine"] == pytest.approx(cos, abs=1e-9)
        assert row["fix_pos"] == p and row["bitwidth"] == 8
        assert row["range_min"] == -128 * 2.0 ** -p and row["range_max"] == 127 * 2.0 ** -p
        assert row["float_min"] == pytest.approx(f.min(), abs=1e-6)
        assert row["float_max"] == pytest.approx(f.max(), abs=1e-6)
        assert (row["graph_min"], row["graph_max"]) == (row["float_min"], row["float_max"])
        codes = f * 2.0 ** p
        assert row["clipped_fraction"] == np.mean((codes >= 127.5) | (codes < -128.5))
        assert row["elements"] == f.size
        assert row["cle_rescaled"] is False and row["cle_scale"] is None
    assert r_in["clipped_fraction"] > 0  # the wider eval data really is clipped at the input
    assert r_in["shape"] == [1, 6, 6] and r_in["float_node"] == "x" and r_in["float_target"] == "input"
    assert r_out["float_node"] == "relu" and r_out["op"] == "nndct_relu"
    assert r_out["sqnr_db"] < r_in["sqnr_db"] + 20  # a plausible 8-bit error, not zero


def test_on_grid_data_gives_inf_sqnr_and_cosine_one(tmp_path):
    steps = torch.arange(-64, 63, dtype=torch.float32) / 16.0  # on the 1/16 grid, inside -4 .. 3.94
    x = steps[torch.randperm(steps.numel(), generator=torch.Generator().manual_seed(1))][:120].reshape(5, 1, 4, 6)
    model = TinyConvReLU(1.0, 0.0).eval()
    settings = _settings(tmp_path, NO_CLE)
    handle, info = _calibrated(model, x, tmp_path, settings)
    rows = layer_sensitivity(model, handle, info, [x[:2], x[2:]], settings)
    assert len(rows) == 2
    for r in rows:
        assert r["sqnr_db"] == math.inf
        assert r["cosine"] == 1.0
        assert r["clipped_fraction"] == 0.0
    assert rows[0].to_json()["sqnr_db"] == "inf" and rows[0].sqnr_db == math.inf  # a copy
    text = json.dumps([r.to_json() for r in rows], allow_nan=False)  # strict JSON
    assert [LayerSensitivity.from_json(r) for r in json.loads(text)] == rows
    assert json.dumps([LayerSensitivity.from_json(r).to_json() for r in json.loads(text)], allow_nan=False) == text
    assert "| inf |" in sensitivity_table(rows)
    assert sensitivity_table(json.loads(text)) == sensitivity_table(rows)


def test_values_below_half_an_lsb_all_quantize_to_zero(tmp_path):
    torch.manual_seed(4)
    model = TinyConvReLU(1e-5, 0.0).eval()  # outputs ~1e-5: far below 2^-12, the finest activation LSB
    settings = _settings(tmp_path, NO_CLE)
    handle, info = _calibrated(model, torch.randn(4, 1, 4, 4), tmp_path, settings)
    x = torch.randn(4, 1, 4, 4)
    (row,) = [r for r in layer_sensitivity(model, handle, info, [x], settings) if r["node"] == "nndct_relu_2"]
    assert not handle(x).any()  # the quantized output is all zero ...
    assert row["sqnr_db"] == 0.0 and row["cosine"] == 0.0  # ... so the error is the whole signal
    assert row["notes"] == ["every float value is within half an LSB of 0 at fix_pos %d: all quantize to 0"
                            % row["fix_pos"]]


class CLEPair(nn.Module):
    """conv(1->2) -> ReLU -> conv(2->1), no bias: CLE scales channel k by s = sqrt(r0 / r1)."""

    def __init__(self):
        super().__init__()
        self.conv0 = nn.Conv2d(1, 2, 1, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(2, 1, 1, bias=False)
        with torch.no_grad():
            self.conv0.weight.copy_(torch.tensor([2.0, 0.5]).reshape(2, 1, 1, 1))
            self.conv1.weight.copy_(torch.tensor([0.5, 1.0]).reshape(1, 2, 1, 1))

    def forward(self, x):
        return self.conv1(self.relu(self.conv0(x)))


def test_cle_point_is_compared_in_float_scale(tmp_path):
    torch.manual_seed(2)
    calib = torch.rand(8, 1, 5, 5) * 2 - 0.5
    model = CLEPair().eval()
    settings = _settings(tmp_path, CLE_ONLY)
    handle, info = _calibrated(model, calib, tmp_path, settings)
    x = torch.rand(6, 1, 5, 5) * 2 - 0.5
    rows = _by_node(layer_sensitivity(model, handle, info, [x[:3], x[3:]], settings))

    # CLE (cle.py, Nagel et al. 2019): r0 = max |W0[k]|, r1 = max |W1[:, k]|, s = r0 / sqrt(r0 r1)
    r0, r1 = np.array([2.0, 0.5]), np.array([0.5, 1.0])
    s = r0 / np.sqrt(r0 * r1)  # [2, 0.7071]
    relu = rows["nndct_relu_2"]
    assert relu["cle_rescaled"] is True
    assert relu["cle_scale"] == pytest.approx([s.min(), s.max()], rel=1e-6)
    assert relu["notes"] and relu["notes"][0].startswith("rescaled by CLE")
    f = np.maximum(np.array([2.0, 0.5]).reshape(1, 2, 1, 1) * x.numpy().astype(np.float64), 0.0)
    q_graph = _quant_values(handle, x)["nndct_relu_2"].numpy().astype(np.float64)
    q_float = q_graph * s.reshape(1, 2, 1, 1)
    sqnr, cos = _sqnr_cos(f, q_float)
    assert relu["sqnr_db"] == pytest.approx(sqnr, abs=1e-4)
    assert relu["cosine"] == pytest.approx(cos, abs=1e-9)
    naive, _ = _sqnr_cos(f, q_graph)
    assert relu["sqnr_db"] > naive + 10  # undoing the scale matters
    g = f / s.reshape(1, 2, 1, 1)  # the float values in the graph's scale, where the fix_pos applies
    assert relu["graph_max"] == pytest.approx(g.max(), rel=1e-6)
    assert relu["float_max"] == pytest.approx(f.max(), rel=1e-6)
    p = relu["fix_pos"]
    assert relu["clipped_fraction"] == np.mean(g * 2.0 ** p >= 127.5)
    # the output of conv1 is back in the float model's scale: not a CLE row
    out = rows["nndct_conv2d_3"]
    assert out["cle_rescaled"] is False
    assert out["sqnr_db"] == pytest.approx(
        _sqnr_cos(model(x).detach().numpy(), handle(x).detach().numpy())[0], abs=1e-4)
    table = sensitivity_table(list(rows.values()))
    assert "\\*" in table and "CLE" in table


def test_settings_must_be_the_handles(tmp_path):
    torch.manual_seed(2)
    model = CLEPair().eval()
    x = torch.rand(4, 1, 5, 5)
    handle, info = _calibrated(model, x, tmp_path, _settings(tmp_path, CLE_ONLY))
    with pytest.raises(QuantizationError, match="weights of nndct_conv2d_1, nndct_conv2d_3 differ"):
        layer_sensitivity(model, handle, info, [x], _settings(tmp_path, NO_CLE))  # CLE off: other weights


def test_callers_model_and_batches_unchanged(tmp_path):
    torch.manual_seed(3)
    model = gm.load_model("convnet")
    model.relu.inplace = True  # an in-place float op must not leak into the comparison
    before = {k: v.clone() for k, v in model.state_dict().items()}
    versions = {k: v._version for k, v in model.state_dict().items()}
    types = [type(m) for m in model.modules()]
    shutil.copy(os.path.join(gm.config_dir("convnet", "default"), "quant_info.json"), str(tmp_path))
    settings = QuantSettings()
    qi.write_bias_corr(str(tmp_path), torch.load(os.path.join(gm.config_dir("convnet", "default"), "bias_corr.pt"),
                                                 weights_only=True))
    handle = SimBackend().load_test(model, gm.load_array("convnet", "eval_inputs.npy")[:1], str(tmp_path), settings)
    x = gm.load_array("convnet", "eval_inputs.npy")
    x_before, x_version = x.clone(), x._version
    rows = layer_sensitivity(model, handle, qi.read_quant_info(str(tmp_path)), [x], settings)
    assert len(rows) == 6
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert {k: v._version for k, v in model.state_dict().items()} == versions
    assert [type(m) for m in model.modules()] == types  # ReLU6 not swapped in the caller's model
    assert isinstance(model.relu6, nn.ReLU6) and model.training is False
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert torch.equal(x, x_before) and x._version == x_version


def test_rejects_no_batches_and_wrong_dtype(tmp_path):
    model = TinyConvReLU(0.75, 0.25).eval()
    settings = _settings(tmp_path, NO_CLE)
    handle, info = _calibrated(model, torch.randn(2, 1, 4, 4), tmp_path, settings)
    with pytest.raises(DataError, match="none"):
        layer_sensitivity(model, handle, info, [], settings)
    with pytest.raises(DataError, match="float32"):
        layer_sensitivity(model, handle, info, [torch.randn(2, 1, 4, 4).double()], settings)


# ---------------------------------------------------------------------- golden models (real quantizer)

def _golden_case(name, config, folder):
    """(model, handle, quant_info, settings) from the real quantizer's quant_info (and bias_corr)."""
    src = gm.config_dir(name, config)
    shutil.copy(os.path.join(src, "quant_info.json"), str(folder))
    if config == "default":
        qi.write_bias_corr(str(folder), torch.load(os.path.join(src, "bias_corr.pt"), weights_only=True))
        settings = QuantSettings()
    else:
        settings = _settings(folder, gm.NOCLE_CONFIG)
    model = gm.load_model(name)
    handle = SimBackend().load_test(model, gm.load_array(name, "eval_inputs.npy")[:1], str(folder), settings)
    return model, handle, qi.read_quant_info(str(folder)), settings


CONVNET_FLOAT = {"nndct_input_0": "input", "nndct_relu_2": "relu", "nndct_maxpool_3": "pool",
                 "nndct_relu_5": "relu6", "nndct_relu6_5": "relu6", "nndct_adaptive_avg_pool2d_6": "gap",
                 "nndct_dense_8": "fc"}


def test_golden_convnet_nocle_matches_real_intermediates(tmp_path):
    model, handle, info, settings = _golden_case("convnet", "nocle", tmp_path)
    x = gm.load_array("convnet", "eval_inputs.npy")
    rows = layer_sensitivity(model, handle, info, [x], settings)  # one batch of 16, as the golden run
    golden = np.load(os.path.join(gm.config_dir("convnet", "nocle"), "intermediates.npz"))
    floats = _float_values(model, ["relu", "pool", "relu6", "gap", "fc"], x)
    assert [r["node"] for r in rows] == ["nndct_input_0", "nndct_relu_2", "nndct_maxpool_3", "nndct_relu6_5",
                                         "nndct_adaptive_avg_pool2d_6", "nndct_dense_8"]
    for r in rows:
        f = floats[CONVNET_FLOAT[r["node"]]].numpy()
        q = golden[r["node"]]
        sqnr, cos = _sqnr_cos(f, q)
        assert r["sqnr_db"] == pytest.approx(sqnr, abs=1e-6), r["node"]
        assert r["cosine"] == pytest.approx(cos, abs=1e-12), r["node"]
        assert r["float_min"] == float(f.min()) and r["float_max"] == float(f.max())
        assert r["shape"] == list(q.shape[1:])
        assert r["fix_pos"] == _output_fix_pos(info, r["node"])
        assert not r["cle_rescaled"] and r["notes"] == []
    assert [r["float_node"] for r in rows] == ["x", "relu", "pool", "relu6", "gap", "fc"]


def test_golden_convnet_default_cle_rows(tmp_path):
    model, handle, info, settings = _golden_case("convnet", "default", tmp_path)
    x = gm.load_array("convnet", "eval_inputs.npy")
    rows = _by_node(layer_sensitivity(model, handle, info, [x[:8], x[8:]], settings))
    golden = np.load(os.path.join(gm.config_dir("convnet", "default"), "intermediates.npz"))
    floats = _float_values(model, ["relu", "pool", "relu6", "gap", "fc"], x)
    assert [n for n, r in rows.items() if r["cle_rescaled"]] == ["nndct_relu_2", "nndct_maxpool_3"]
    for node in ("nndct_input_0", "nndct_relu_5", "nndct_adaptive_avg_pool2d_6", "nndct_dense_8"):
        sqnr, cos = _sqnr_cos(floats[CONVNET_FLOAT[node]].numpy(), golden[node])
        assert rows[node]["sqnr_db"] == pytest.approx(sqnr, abs=1e-6), node
        assert rows[node]["cosine"] == pytest.approx(cos, abs=1e-12), node
    # ReLU6 became ReLU (CLE on): the row says so
    assert rows["nndct_relu_5"]["notes"] == ["float ReLU6 runs as ReLU in the quantized model"]
    # CLE rows, against the real quantizer's CLE-scaled intermediates: s fitted per channel by least
    # squares (f ~ s q) must agree with the scale the row reports; the fit maximizes the SQNR over
    # all per-channel scales, so the row's SQNR (true s) is at most the fitted one, and close to it
    for node in ("nndct_relu_2", "nndct_maxpool_3"):
        f = floats[CONVNET_FLOAT[node]].numpy().astype(np.float64)
        q = golden[node].astype(np.float64)
        fit = (f * q).sum(axis=(0, 2, 3)) / (q * q).sum(axis=(0, 2, 3))
        assert rows[node]["cle_scale"] == pytest.approx([fit.min(), fit.max()], rel=0.02)
        sqnr, _ = _sqnr_cos(f, q * fit.reshape(1, -1, 1, 1))
        assert sqnr - 1.0 < rows[node]["sqnr_db"] <= sqnr + 1e-9
        assert rows[node]["graph_max"] == pytest.approx((f / fit.reshape(1, -1, 1, 1)).max(), rel=0.02)


@pytest.mark.parametrize("config", ["default", "nocle"])
def test_golden_resblock_rows(tmp_path, config):
    model, handle, info, settings = _golden_case("resblock", config, tmp_path)
    x = gm.load_array("resblock", "eval_inputs.npy")
    rows = layer_sensitivity(model, handle, info, [x[i:i + 4] for i in range(0, 16, 4)], settings)
    prefix = "ResBlockNet::"
    assert sorted(r["node"] for r in rows) == sorted(k[len(prefix):] for k in info["output"])
    index = [int(r["node"].rsplit("_", 1)[1]) for r in rows]
    assert index == sorted(index) and rows[0]["node"] == "nndct_input_0"  # graph order
    # the model output against the real quantizer's output and the float output (golden files)
    f = np.load(os.path.join(gm.HERE, "resblock", "float_outputs.npy"))
    q = np.load(os.path.join(gm.config_dir("resblock", config), "quant_outputs.npy"))
    sqnr, cos = _sqnr_cos(f, q)
    assert rows[-1]["node"] == "nndct_conv2d_16" and rows[-1]["float_node"] == "head"
    assert rows[-1]["sqnr_db"] == pytest.approx(sqnr, abs=1e-4)
    assert rows[-1]["cosine"] == pytest.approx(cos, abs=1e-9)
    by = _by_node(rows)
    assert by["nndct_conv2d_5"]["float_node"] == "res_bn2"  # BN folded into res_conv2: compared after BN
    assert by["nndct_concat_15"]["float_node"] == "cat" and by["nndct_concat_15"]["float_target"] == "cat"
    assert by["nndct_leaky_relu_9"]["notes"] == ["LeakyReLU slope 0.1 runs as 0.1015625 on the DPU"]
    assert by["nndct_avgpool_11"]["notes"] == ["output multiplied by the DPU pooling factor 0.984375"]
    assert [r["node"] for r in rows if r["cle_rescaled"]] == (["nndct_relu_4"] if config == "default" else [])
    for r in rows:
        assert 20 < r["sqnr_db"] < 60 and 0.999 < r["cosine"] < 1.0, r
        assert r["range_max"] == 127 * 2.0 ** -r["fix_pos"]


def test_batches_and_chunks_accumulate_like_one_batch(tmp_path, monkeypatch):
    model, handle, info, settings = _golden_case("resblock", "nocle", tmp_path)
    x = gm.load_array("resblock", "eval_inputs.npy")
    one = layer_sensitivity(model, handle, info, [x], settings)
    many = layer_sensitivity(model, handle, info, [x[:5], x[5:6], x[6:]], settings)
    monkeypatch.setattr(sensitivity_stats, "CHUNK_ELEMENTS", 1000)  # statistics reduced 1-2 samples at a time
    chunked = layer_sensitivity(model, handle, info, [x], settings)
    _assert_rows_close(chunked, one, rel=1e-12)  # only the float64 summation order differs
    _assert_rows_close(many, one, rel=1e-6)  # float32 convs may round differently per batch size


def _assert_rows_close(rows, expected, rel):
    assert len(rows) == len(expected)
    for a, b in zip(rows, expected):
        for key in ROW_KEYS:
            if isinstance(b[key], float):
                assert a[key] == pytest.approx(b[key], rel=rel), (b["node"], key)
            else:
                assert a[key] == b[key], (b["node"], key)


# ---------------------------------------------------------------------- digits CNN, table, plots

@pytest.fixture(scope="module")
def digits_rows(tmp_path_factory):
    from sklearn.datasets import load_digits

    from pipeline.models.zoo import DigitsCNN
    folder = tmp_path_factory.mktemp("digits")
    torch.manual_seed(0)
    model = DigitsCNN().eval()
    data = torch.from_numpy(load_digits().images[:320].astype(np.float32)).reshape(-1, 1, 8, 8)
    data = (data - 4.9) / 6.0
    settings = QuantSettings()
    handle, info = _calibrated(model, data[:64], folder, settings)
    evals = [data[i:i + 32] for i in range(64, 320, 32)]
    rows = layer_sensitivity(model, handle, info, evals, settings)
    with torch.no_grad():
        out = _sqnr_cos(model(data[64:]).numpy(), handle(data[64:]).numpy())
    return rows, out, folder


def test_digits_cnn_rows(digits_rows):
    rows, (sqnr, cos), _ = digits_rows
    assert [r["node"] for r in rows] == ["nndct_input_0", "nndct_relu_2", "nndct_relu_4", "nndct_maxpool_5",
                                         "nndct_relu_7", "nndct_adaptive_avg_pool2d_8", "nndct_dense_10"]
    assert [r["float_node"] for r in rows] == ["x", "relu1", "relu2", "pool", "relu3", "gap", "fc"]
    # CLE pairs (conv1, conv2) and (conv2, conv3): everything between them is rescaled
    assert [r["cle_rescaled"] for r in rows] == [False, True, True, True, False, False, False]
    assert rows[-1]["sqnr_db"] == pytest.approx(sqnr, abs=1e-6)
    assert rows[-1]["cosine"] == pytest.approx(cos, abs=1e-9)
    assert rows[2]["cle_scale"] == rows[3]["cle_scale"]  # ReLU and pool share conv2's scale
    assert all(r["elements"] == 256 * np.prod(r["shape"]) for r in rows)


def test_markdown_table_rows(digits_rows):
    rows = digits_rows[0]
    table = sensitivity_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("| # | quantized node | float node |")
    body = [l for l in lines[2:] if l.startswith("| ")]
    assert len(body) == len(rows)
    for line, r in zip(body, rows):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == r["node"]
        assert cells[4] == "8 / %d" % r["fix_pos"]
        assert cells[6] == "%.2f" % r["sqnr_db"]
        assert float(cells[7]) == pytest.approx(r["cosine"], abs=5e-7)


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_plots_of_real_rows(digits_rows, tmp_path):
    pytest.importorskip("matplotlib")
    from pipeline.steps.plots import activation_range_figure, plot_activation_ranges, plot_sensitivity, sensitivity_figure
    rows = digits_rows[0]
    fig = sensitivity_figure(rows)
    assert len(fig.axes[0].patches) == len(rows)  # one SQNR bar per layer
    assert [b.get_width() for b in fig.axes[0].patches] == pytest.approx([r["sqnr_db"] for r in rows])
    assert list(fig.axes[1].lines[0].get_xdata()) == pytest.approx([r["cosine"] for r in rows])
    fig = activation_range_figure(rows)
    clipped = sum((r["graph_max"] > r["range_max"]) + (r["graph_min"] < r["range_min"]) for r in rows)
    assert len(fig.axes[0].patches) == 2 * len(rows) + clipped
    for path, plot in ((str(tmp_path / "sens.png"), plot_sensitivity), (str(tmp_path / "ranges.png"),
                                                                       plot_activation_ranges)):
        assert plot(rows, path) == path
        width, height = _png_size(path)
        assert 800 <= width <= 1600 and 150 <= height <= 100 + 60 * len(rows)
        assert 10000 < os.path.getsize(path) < 1000000
    assert sorted(os.listdir(str(tmp_path))) == ["ranges.png", "sens.png"]  # no temporaries left


def test_the_cle_scale_range_is_written_with_the_digits_that_tell_its_ends_apart():
    from pipeline.quantizers.sim.sensitivity_stats import _scale_text
    assert _scale_text(0.99962, 1.0021) == ["0.9996", "1.002"]  # "%.3g" gave 1..1
    assert _scale_text(0.999962, 1.00004) == ["0.99996", "1"]
    assert _scale_text(0.25, 4.0) == ["0.25", "4"]
