"""Warnings and errors that say what is wrong with the calibration data and the calls (issue 14, item 8)."""
import warnings

import numpy as np
import pytest
import torch

from tests.support.small_net import calibrate_with_api as _calibrate
from tests.support.small_net import small_batches as _batches
from tests.support.small_net import small_net as _model

from pipeline.apis import torch_quantizer
from pipeline.checks import InputStats
from pipeline.errors import QuantizationError


def _calib(tmp_path, batches):
    q = torch_quantizer("calib", _model(), (_batches(1)[0],), output_dir=str(tmp_path), device="cpu")
    for b in batches:
        q.quant_model(b)
    return q


def _messages(record):
    return [str(w.message) for w in record]


def test_a_single_calibration_sample_warns(tmp_path):
    q = _calib(tmp_path, [_batches(1)[0][:1]])
    with pytest.warns(UserWarning, match="the calibration saw a single sample"):
        q.export_quant_config()
    stats = InputStats()
    stats.add(torch.randn(1, 3, 8, 8))
    result = stats.result([0.0] * 3, [1.0] * 3)
    assert result["plausible"] and "single sample" in result["warnings"][0]


def test_all_zero_calibration_data_warns(tmp_path):
    q = _calib(tmp_path, [torch.zeros(4, 3, 8, 8) for _ in range(3)])
    with pytest.warns(UserWarning, match=r"every calibration input was all zeros \(3 forwards\)"):
        q.export_quant_config()


def test_fewer_than_100_calibration_samples_warn_once_with_the_count(tmp_path):
    """The runner's rule (checks.FEW_SAMPLES, UG1414's "100 to 1000 calibration images"): 4 batches of 4 warn."""
    q = _calib(tmp_path, _batches())
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        q.export_quant_config()
    few = [m for m in _messages(record) if "calibration saw" in m]
    assert few == ["the calibration saw 16 samples: the Vitis AI user guide (UG1414, \"Vitis AI Quantizer Flow\") "
                   "says the quantizer generally works well with 100 to 1000 calibration images; calibrate on at "
                   "least 100 representative samples"]
    q = _calib(tmp_path / "99", _batches(24) + [_batches(1)[0][:3]])  # 99 samples still warn
    with pytest.warns(UserWarning, match=r"the calibration saw 99 samples: "):
        q.export_quant_config()


def test_real_calibration_data_does_not_warn(tmp_path):
    q = _calib(tmp_path, _batches(25))  # 100 samples
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        q.export_quant_config()
    assert not [m for m in _messages(record) if "calibration" in m], _messages(record)


def test_an_empty_batch_is_called_empty_not_non_finite(tmp_path):
    with pytest.warns(UserWarning, match=r"calibration forward 1: the batch is empty \(shape \(0, 3, 8, 8\)\)"):
        q = _calib(tmp_path, [torch.zeros(0, 3, 8, 8)])
    with pytest.raises(QuantizationError, match="all 1 calibration forwards had an empty batch") as info:
        q.export_quant_config()
    assert "non-finite" not in str(info.value)


def test_a_negative_stride_array_gets_a_hint_that_works(tmp_path):
    a = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype(np.float32)[..., ::-1].transpose(0, 3, 1, 2)
    with pytest.raises(QuantizationError, match=r"torch.from_numpy\(np.ascontiguousarray\(a\)\)") as info:
        torch_quantizer("calib", _model(), (a,), output_dir=str(tmp_path), device="cpu")
    # the hint, followed, gives an input the quantizer takes
    fixed = torch.from_numpy(np.ascontiguousarray(a))
    torch_quantizer("calib", _model(), (fixed,), output_dir=str(tmp_path), device="cpu")
    assert "negative strides" in str(info.value)
    with pytest.raises(QuantizationError, match=r"torch.from_numpy\(a\).float\(\)"):
        torch_quantizer("calib", _model(), (np.zeros((2, 3, 8, 8)),), output_dir=str(tmp_path), device="cpu")


def test_export_onnx_model_without_a_forward_raises_like_the_other_exports(tmp_path):
    _calibrate(tmp_path)
    q = torch_quantizer("test", _model(), (_batches(1)[0],), output_dir=str(tmp_path), device="cpu")
    for export in (q.export_onnx_model, q.export_torch_script, q.export_xmodel):
        with pytest.raises(QuantizationError, match="run at least one forward of quant_model in test mode"):
            export(output_dir=str(tmp_path))
    calib, _ = _calibrate(tmp_path / "c")
    with pytest.raises(QuantizationError, match="export_onnx_model needs test mode"):
        calib.export_onnx_model(output_dir=str(tmp_path / "c"))


class _Leaky(torch.nn.Module):
    """A LeakyReLU module of slope ``slope`` (torch's default 0.01) and an ``F.leaky_relu`` of 0.2."""

    def __init__(self, slope=None):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.act = torch.nn.LeakyReLU() if slope is None else torch.nn.LeakyReLU(slope)

    def forward(self, x):
        return torch.nn.functional.leaky_relu(self.act(self.conv(x)), 0.2)


def _warnings_of(caplog, make):
    import logging
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline.apis"):
        make()
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def _forced(slope):
    return ("Force to change negative_slope of LeakyReLU from %s to 0.1015625 because DPU only supports this value. "
            "It is recommended to change all negative_slope of LeakyReLU to 0.1015625 and re-train the float model "
            "for better deployed model accuracy." % slope)


def test_the_drop_in_warns_that_the_leaky_relu_slope_is_forced_once_per_process(tmp_path, caplog, monkeypatch):
    """Tester's finding: nn.LeakyReLU()'s 0.01 became 26/256 without a word (outputs moved by up to 0.08);
    the real quantizer warns in its own words (SetNegativeSlope), once per process and message."""
    import pipeline.apis.quantizer as quantizer
    monkeypatch.setattr(quantizer, "_WARNED", set())
    x, model = _batches(1)[0], _Leaky().eval()

    def calib_and_test():
        q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path), device="cpu")
        q.quant_model(x)
        q.export_quant_config()
        torch_quantizer("test", model, (x,), output_dir=str(tmp_path), device="cpu")
    assert _warnings_of(caplog, calib_and_test) == [_forced(0.01), _forced(0.2)]
    assert _warnings_of(caplog, calib_and_test) == []  # once per process, as nndct's warning2user_once
    monkeypatch.setattr(quantizer, "_WARNED", set())
    dpu = _Leaky(26 / 256).eval()
    assert _warnings_of(caplog, lambda: torch_quantizer("calib", dpu, (x,), output_dir=str(tmp_path / "d"),
                                                        device="cpu")) == [_forced(0.2)]
