"""quant_info.json / bias_corr.pth in the real format, and quant_config_file validation
(docs/quantizer.md#the-quant_info-format, docs/quant_config.md)."""
import json
import os

import pytest
import torch

from pipeline.errors import ConfigError, QuantizationError
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config, parse_quant_config
from pipeline.safeload import safe_torch_load
from tests.support import DATA

GOLDEN = os.path.join(DATA, "golden")
CASES = [(m, c) for m in ("mlp", "convnet", "resblock") for c in ("default", "nocle")]


@pytest.mark.parametrize("model,config", CASES)
def test_writer_reproduces_real_files_byte_for_byte(model, config, tmp_path):
    folder = os.path.join(GOLDEN, model, config)
    with open(os.path.join(folder, "quant_info.json"), "rb") as f:
        real = f.read()
    info = qi.read_quant_info(folder)
    path = qi.write_quant_info(str(tmp_path), info)
    with open(path, "rb") as f:
        assert f.read() == real
    assert sorted(os.listdir(str(tmp_path))) == ["quant_info.json"]  # no temporary left behind


def test_make_quant_info_layout():
    info = qi.make_quant_info({"Net::conv.weight": 7}, {"Net::nndct_input_0": 5}, 8, True, "abc")
    assert list(info) == list(qi.TOP_LEVEL_KEYS)
    assert info["param"] == {"Net::conv.weight": [[8, 7]]}
    assert info["output"] == {"Net::nndct_input_0": [[8, 5]]}
    assert info["input"] == {} and info["bias_corrected"] is True and info["fast_finetuned"] is False
    text = qi.to_jsonstr(info)
    assert '"Net::conv.weight":[[8,7]]' in text and json.loads(text) == info


def test_read_missing_file_says_run_calibration(tmp_path):
    with pytest.raises(QuantizationError, match="calibration"):
        qi.read_quant_info(str(tmp_path))


def test_read_rejects_malformed_entry(tmp_path):
    info = qi.make_quant_info({"Net::w": 3}, {}, 8, False, "x")
    info["param"]["Net::w"] = [[8, "3"]]
    (tmp_path / "quant_info.json").write_text(json.dumps(info))
    with pytest.raises(QuantizationError, match="Net::w"):
        qi.read_quant_info(str(tmp_path))
    (tmp_path / "quant_info.json").write_text("{not json")
    with pytest.raises(QuantizationError, match="JSON"):
        qi.read_quant_info(str(tmp_path))


def test_bias_corr_round_trip_is_float32_exact_and_real_format(tmp_path):
    g = torch.Generator().manual_seed(0)
    corr = {"Net::nndct_conv2d_1": torch.randn(16, generator=g) * 1e-3, "Net::nndct_conv2d_2": None}
    path = qi.write_bias_corr(str(tmp_path), corr)
    raw = safe_torch_load(path)  # weights_only on torch 2.x; restricted unpickler on 1.13
    assert isinstance(raw["Net::nndct_conv2d_1"], list) and raw["Net::nndct_conv2d_2"] is None
    back = qi.read_bias_corr(str(tmp_path))
    assert torch.equal(back["Net::nndct_conv2d_1"], corr["Net::nndct_conv2d_1"])
    assert back["Net::nndct_conv2d_2"] is None


def test_bias_corr_missing(tmp_path):
    with pytest.raises(QuantizationError, match="bias_corr.pth"):
        qi.read_bias_corr(str(tmp_path))


# -- quant_config_file --------------------------------------------------------------------------

def test_defaults_without_file():
    cfg = load_quant_config(None)
    assert cfg.include_cle and cfg.include_bias_corr and cfg.target_device == "DPU"
    assert cfg.uniform_bitwidth() == 8
    assert cfg.tensors["activation"]["round_mode"] == "half_up"
    assert cfg.tensors["weights"]["round_mode"] == "std_round"
    assert load_quant_config(None, bitwidth=4).uniform_bitwidth() == 4


def test_golden_nocle_file(tmp_path):
    path = tmp_path / "nocle.json"
    path.write_text('{"include_cle": false, "include_bias_corr": false, "target_device": "DPU"}')
    cfg = load_quant_config(str(path))
    assert not cfg.include_cle and not cfg.include_bias_corr and cfg.source == str(path)


def test_target_device_is_required():
    # docs/quantizer.md#a-config-file-needs-target_device: nndct 3.5 crashes with KeyError: 'target_device'
    with pytest.raises(ConfigError, match="target_device"):
        parse_quant_config({"include_cle": False, "include_bias_corr": False})


@pytest.mark.parametrize("obj,match", [
    ({"target_device": "DPU", "incude_cle": False}, "incude_cle.*include_cle"),
    ({"target_device": "DPU", "tensor_quantize_config": {"activations": {}}}, "activations"),
    ({"target_device": "DPU", "overall_quantize_config": {"bitwidth": 8}}, "bitwidth"),
    ({"target_device": "DPU", "layer_quantize_config": [{"layer_typ": "Conv2d"}]}, "layer_typ"),
])
def test_unknown_keys_are_named(obj, match):
    with pytest.raises(ConfigError, match=match):
        parse_quant_config(obj)


@pytest.mark.parametrize("tensors,match", [
    ({"activation": {"round_mode": "std_round"}}, "half_up"),
    ({"weights": {"round_mode": "half_up"}}, "std_round"),
    ({"weights": {"per_channel": True}}, "per_tensor"),
    ({"activation": {"narrow_range": True}}, "narrow_range"),
    ({"activation": {"method": "percentile"}}, "diffs or maxmin"),
    ({"bias": {"bit_width": 16}}, "bit widths must be equal"),
    ({"input": {"calib_statistic_method": "mean"}}, "modal"),
    ({"weights": {"scale_type": "float"}}, "poweroftwo"),
])
def test_dpu_rules(tensors, match):
    with pytest.raises(ConfigError, match=match):
        parse_quant_config({"target_device": "DPU", "tensor_quantize_config": tensors})


def test_cpu_target_allows_what_dpu_rejects_and_bad_values_fail():
    cfg = parse_quant_config({"target_device": "CPU", "tensor_quantize_config": {"weights": {"per_channel": True}}})
    assert cfg.target_device == "CPU" and cfg.tensors["weights"]["per_channel"] is True
    with pytest.raises(ConfigError, match="round_mode"):
        parse_quant_config({"target_device": "CPU", "overall_quantize_config": {"round_mode": "nearest"}})
    with pytest.raises(ConfigError, match="include_cle"):
        parse_quant_config({"target_device": "DPU", "include_cle": "no"})
    with pytest.raises(ConfigError, match="target_device"):
        parse_quant_config({"target_device": "TPU"})


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_quant_config(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_quant_config(str(bad))


def test_file_bit_widths_win_over_argument(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"target_device": "DPU", "overall_quantize_config": {"bit_width": 6}}')
    with pytest.warns(UserWarning, match="bitwidth=8"):
        cfg = load_quant_config(str(path), bitwidth=8)
    assert cfg.uniform_bitwidth() == 6


@pytest.mark.parametrize("entry", [[[8, 99]], [[0, 3]], [[8, True]], [[True, 3]], [[32, 3]], [[8, -200]]])
def test_read_rejects_values_no_quantizer_produces(tmp_path, entry):
    info = qi.make_quant_info({"Net::w": 3}, {}, 8, False, "x")
    info["param"]["Net::w"] = entry
    (tmp_path / "quant_info.json").write_text(json.dumps(info))
    with pytest.raises(QuantizationError, match="Net::w.*bit_width 2..16 and fix_pos -128..64"):
        qi.read_quant_info(str(tmp_path))


def test_read_rejects_a_file_that_is_not_an_object(tmp_path):
    (tmp_path / "quant_info.json").write_text("[1, 2]")
    with pytest.raises(QuantizationError, match="expected a JSON object"):
        qi.read_quant_info(str(tmp_path))


@pytest.mark.parametrize("entry", [["a", 1.0], [True, 0.5], [float("nan")], "0.1", {"x": 1}])
def test_read_bias_corr_rejects_entries_that_are_not_finite_numbers(tmp_path, entry):
    torch.save({"Net::nndct_conv2d_1": [0.1, 0.2], "Net::nndct_conv2d_2": entry}, str(tmp_path / "bias_corr.pth"))
    with pytest.raises(QuantizationError, match="'Net::nndct_conv2d_2' should be a list of finite numbers"):
        qi.read_bias_corr(str(tmp_path))
