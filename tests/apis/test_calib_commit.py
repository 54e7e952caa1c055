"""The drop-in API keeps the runner's promises about a calibration folder (issue 14, item 2): the same
fingerprint is recorded and checked, and a calibration is committed as one unit."""
import json
import os
import shutil

import pytest
import torch

from tests.support.small_net import calibrate_with_api as _calibrate
from tests.support.small_net import small_batches as _batches
from tests.support.small_net import small_net as _model

from pipeline.apis import torch_quantizer
from pipeline.errors import FingerprintMismatchError, QuantizationError
from pipeline.quantizers.calib_commit import MANIFEST_FILE, begin, check_committed


def _test_out(out_dir, x, **kwargs):
    q = torch_quantizer("test", _model(), (x,), output_dir=str(out_dir), device="cpu", **kwargs)
    with torch.no_grad():
        return q.quant_model(x)


def test_a_calibration_for_another_input_shape_is_refused_naming_the_field(tmp_path):
    _calibrate(tmp_path)  # (4, 3, 8, 8)
    with pytest.raises(FingerprintMismatchError, match=r"input_shape: calibrated \[3, 8, 8\], now \[3, 12, 12\]"):
        torch_quantizer("test", _model(), (torch.zeros(1, 3, 12, 12),), output_dir=str(tmp_path), device="cpu")


def test_a_calibration_for_another_target_is_refused_naming_the_field(tmp_path):
    batches = _batches()
    with pytest.warns(UserWarning, match="hardware-aware"):
        q = torch_quantizer("calib", _model(), (batches[0],), output_dir=str(tmp_path), device="cpu",
                            target="DPUCZDX8G_ISA1_B4096")
    for b in batches:
        q.quant_model(b)
    q.export_quant_config()
    with pytest.warns(UserWarning, match="hardware-aware"):
        with pytest.raises(FingerprintMismatchError, match="target: calibrated 'DPUCZDX8G_ISA1_B4096', now "
                                                           "'DPUCVDX8G_ISA3_C32B6'"):
            torch_quantizer("test", _model(), (batches[0],), output_dir=str(tmp_path), device="cpu",
                            target="DPUCVDX8G_ISA3_C32B6")
    with pytest.raises(FingerprintMismatchError, match="target: calibrated 'DPUCZDX8G_ISA1_B4096', now None"):
        torch_quantizer("test", _model(), (batches[0],), output_dir=str(tmp_path), device="cpu")


def test_the_fingerprint_is_the_runners_and_the_same_settings_pass(tmp_path):
    _calibrate(tmp_path)
    with open(str(tmp_path / "calib_fingerprint.json")) as f:
        fp = json.load(f)
    assert fp["input_shape"] == [3, 8, 8] and fp["backend"] == "sim" and fp["target"] is None
    assert {"graph_hash", "weights_hash", "quant_config_file_sha256", "torch_version"} <= set(fp)
    x = _batches(1)[0]
    assert _test_out(tmp_path, x).shape == (4, 5)


def test_a_folder_mixing_two_calibrations_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _calibrate(a, batches=_batches(seed=2))
    _calibrate(b, batches=[3.0 * x for x in _batches(seed=5)])
    x = _batches(1)[0]
    out_a, out_b = _test_out(a, x), _test_out(b, x)
    assert not torch.equal(out_a, out_b)
    # a calibration of b killed after bias_corr.pth was renamed into a's folder, before quant_info.json
    shutil.copyfile(str(b / "bias_corr.pth"), str(a / "bias_corr.pth"))
    with pytest.raises(QuantizationError, match="is not the one committed in calib_manifest.json "
                                                r"\(bias_corr.pth is not the file the calibration wrote\)"):
        _test_out(a, x)


def test_an_interrupted_calibration_is_refused_with_what_to_rerun(tmp_path):
    _calibrate(tmp_path)
    begin(str(tmp_path))  # what a calibration killed while writing leaves behind
    with pytest.raises(QuantizationError, match=r"was interrupted while its files were written .*run "
                                                r"torch_quantizer\('calib', \.\.\.\) and export_quant_config\(\) again"):
        _test_out(tmp_path, _batches(1)[0])


def test_a_folder_of_the_real_quantizer_without_manifest_is_still_used(tmp_path):
    _calibrate(tmp_path)
    x = _batches(1)[0]
    expect = _test_out(tmp_path, x)
    for name in (MANIFEST_FILE, "calib_fingerprint.json"):
        os.remove(str(tmp_path / name))
    assert check_committed(str(tmp_path), require=False) is False
    assert torch.equal(_test_out(tmp_path, x), expect)
    with pytest.raises(QuantizationError, match="has no calib_manifest.json"):
        check_committed(str(tmp_path), require=True)


def test_other_weights_warn_naming_the_field(tmp_path):
    _calibrate(tmp_path)
    x = _batches(1)[0]
    with pytest.warns(UserWarning, match="was made for other weights_hash"):
        _test_out_model(tmp_path, x, _model(seed=1))


def _test_out_model(out_dir, x, model):
    q = torch_quantizer("test", model, (x,), output_dir=str(out_dir), device="cpu")
    with torch.no_grad():
        return q.quant_model(x)
