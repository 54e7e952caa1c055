"""Calibration fingerprint: what it records, and that a mismatch names the fields that differ, shortly, and
what to do."""
import importlib.util
import json
import os

import pytest
import torch

import pipeline
from pipeline.errors import FingerprintMismatchError
from pipeline.quantizers import fingerprint as fpm
from pipeline.quantizers.base import QuantSettings


class MLP(torch.nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.flatten = torch.nn.Flatten()
        self.fc1 = torch.nn.Linear(48, hidden)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


class Branchy(MLP):
    """Data-dependent control flow: torch.fx cannot trace it."""

    def forward(self, x):
        y = self.fc1(self.flatten(x))
        if y.sum() > 0:
            y = self.relu(y)
        return self.fc2(y)


def _model(seed=0, cls=MLP, **kw):
    torch.manual_seed(seed)
    return cls(**kw).eval()


def _fp(model=None, example=None, settings=None, config_hash="c0", backend="sim"):
    model = model if model is not None else _model()
    example = example if example is not None else torch.zeros(4, 3, 4, 4)
    settings = settings or QuantSettings(target="DPUCZDX8G_ISA1_B4096")
    return fpm.make_fingerprint(model, example, settings, config_hash, backend)


def test_fields_and_values():
    fp = _fp()
    assert fp["backend"] == "sim"
    assert fp["quantizer_version"] == "sim-" + pipeline.__version__
    assert fp["torch_version"] == torch.__version__
    assert fp["target"] == "DPUCZDX8G_ISA1_B4096" and fp["bitwidth"] == 8
    assert fp["quant_config_file_sha256"] is None
    assert fp["input_shape"] == [3, 4, 4] and fp["input_dtype"] == "torch.float32"
    assert fp["config_hash"] == "c0"
    assert fp["graph_hash_method"] == "fx"
    assert len(fp["graph_hash"]) == 64 and len(fp["weights_hash"]) == 64
    json.dumps(fp)  # serialisable


def test_batch_size_and_device_are_not_part_of_it():
    a = _fp(example=torch.zeros(4, 3, 4, 4))
    b = _fp(example=torch.zeros(1, 3, 4, 4), settings=QuantSettings(target="DPUCZDX8G_ISA1_B4096", device="cuda"))
    assert a == b


def test_graph_and_weights_hashes_tell_structure_from_values():
    base = _fp(_model(seed=0))
    retrained = _fp(_model(seed=1))
    wider = _fp(_model(seed=0, hidden=16))
    assert retrained["graph_hash"] == base["graph_hash"]
    assert retrained["weights_hash"] != base["weights_hash"]
    assert wider["graph_hash"] != base["graph_hash"]


def test_fx_fallback_for_untraceable_models():
    m = _model(cls=Branchy)
    with pytest.raises(Exception):
        torch.fx.symbolic_trace(m)
    fp1, fp2 = _fp(m), _fp(_model(cls=Branchy))
    assert fp1["graph_hash_method"] == "parameters"
    assert fp1["graph_hash"] == fp2["graph_hash"]
    assert fp1["graph_hash"] != _fp(_model(cls=Branchy, hidden=16))["graph_hash"]


def test_model_is_not_modified():
    m = _model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    _fp(m)
    assert not m.training
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_round_trip_passes(tmp_path):
    fp = _fp()
    path = fpm.write_fingerprint(str(tmp_path), fp)
    assert path == os.path.join(str(tmp_path), "calib_fingerprint.json")
    assert os.listdir(str(tmp_path)) == ["calib_fingerprint.json"]
    fpm.check_fingerprint(str(tmp_path), _fp())


def test_mismatch_names_every_field_with_both_values(tmp_path):
    fpm.write_fingerprint(str(tmp_path), _fp())
    now = _fp(example=torch.zeros(1, 3, 8, 8), settings=QuantSettings(target="DPUCZDX8G_ISA1_B1024"))
    with pytest.raises(FingerprintMismatchError) as info:
        fpm.check_fingerprint(str(tmp_path), now)
    msg = str(info.value)
    assert "target: calibrated 'DPUCZDX8G_ISA1_B4096', now 'DPUCZDX8G_ISA1_B1024'" in msg
    assert "input_shape: calibrated [3, 4, 4], now [3, 8, 8]" in msg
    assert "graph_hash" not in msg and "bitwidth" not in msg


def _runner_fp(**changes):
    """A runner-style fingerprint (the fields of make_fingerprint, compile_target, calib_rows_sha256, config.*)."""
    fp = dict(_fp(), compile_target="DPUCZDX8G_ISA1_B4096", calib_rows_sha256="4" * 64)
    fp.update({"config.data.batch_size": 32, "config.data.source": {"type": "digits", "seed": 0},
               "config.quantizer.bitwidth": 8, "config.quantizer.target": "DPUCZDX8G_ISA1_B4096",
               "config.preprocess.mean": [77.85], "config.model.zoo": "digits_cnn"})
    fp.update(changes)
    return fp


def test_a_calibration_from_elsewhere_names_only_what_differs_shortly(tmp_path):
    """A calibration written by the drop-in API under another torch, read by the runner: the fields that
    differ with shortened hashes, the runner's fields it lacks as one count, and one thing to do."""
    here = _runner_fp()
    there = {k: v for k, v in here.items() if not k.startswith("config.") and k not in ("compile_target",
                                                                                         "calib_rows_sha256")}
    there.update(torch_version="1.12.0+cpu", weights_hash="0" * 64, graph_hash="1" * 64)
    fpm.write_fingerprint(str(tmp_path), there)
    with pytest.raises(FingerprintMismatchError) as info:
        fpm.check_fingerprint(str(tmp_path), here, ignore=("compile_target", "config_hash"))
    msg = str(info.value)
    assert msg == (
        "the calibration in %s was made for something else: graph_hash (the model's structure): calibrated "
        "111111111111..., now %s...; torch_version: calibrated '1.12.0+cpu', now %r; weights_hash (the weights): "
        "calibrated 000000000000..., now %s...; it records none of 7 fields this check compares (calib_rows_sha256, "
        "config.data.batch_size, config.data.source and 4 more): it was made by another tool or version. Run the "
        "calib step again" % (tmp_path, here["graph_hash"][:12], torch.__version__, here["weights_hash"][:12]))
    assert "None" not in msg and "bitwidth" not in msg and here["weights_hash"] not in msg


def test_changed_settings_say_which_to_set_back(tmp_path):
    fpm.write_fingerprint(str(tmp_path), _runner_fp())
    now = _runner_fp(**{"config.data.batch_size": 64, "config.quantizer.target": "DPUCZDX8G_ISA1_B1024",
                        "target": "DPUCZDX8G_ISA1_B1024"})
    with pytest.raises(FingerprintMismatchError) as info:
        fpm.check_fingerprint(str(tmp_path), now)
    msg = str(info.value)
    assert msg.endswith("config.data.batch_size: calibrated 32, now 64; config.quantizer.target: calibrated "
                        "'DPUCZDX8G_ISA1_B4096', now 'DPUCZDX8G_ISA1_B1024'. Run the calib step again, or set "
                        "data.batch_size back to 32; set quantizer.target back to 'DPUCZDX8G_ISA1_B4096'")
    assert "; target:" not in msg  # the runner's target is its config key, named once
    # other weights too: setting back would not do
    with pytest.raises(FingerprintMismatchError) as info:
        fpm.check_fingerprint(str(tmp_path), dict(now, weights_hash="5" * 64))
    assert str(info.value).endswith("555555555555.... Run the calib step again")


def test_the_drop_in_names_the_argument_to_pass_again(tmp_path):
    fpm.write_fingerprint(str(tmp_path), _fp())
    with pytest.raises(FingerprintMismatchError) as info:
        fpm.check_fingerprint(str(tmp_path), _fp(settings=QuantSettings(target=None)),
                              redo="run torch_quantizer('calib', ...) and export_quant_config() again")
    assert str(info.value).endswith("target: calibrated 'DPUCZDX8G_ISA1_B4096', now None. Run torch_quantizer("
                                    "'calib', ...) and export_quant_config() again, or pass "
                                    "target='DPUCZDX8G_ISA1_B4096' again")


def test_config_file_content_and_config_hash(tmp_path):
    cfg = tmp_path / "q.json"
    cfg.write_text('{"include_cle": false, "include_bias_corr": false, "target_device": "DPU"}')
    out = tmp_path / "calib"
    fpm.write_fingerprint(str(out), _fp(settings=QuantSettings(quant_config_file=str(cfg))))
    cfg.write_text('{"include_cle": true, "include_bias_corr": false, "target_device": "DPU"}')
    with pytest.raises(FingerprintMismatchError, match="quant_config_file_sha256"):
        fpm.check_fingerprint(str(out), _fp(settings=QuantSettings(quant_config_file=str(cfg))))


def test_ignore_lets_the_other_backend_test_a_calibration(tmp_path):
    fpm.write_fingerprint(str(tmp_path), _fp(backend="sim"))
    other = _fp(backend="nndct")
    with pytest.raises(FingerprintMismatchError, match="backend: calibrated 'sim', now 'nndct'"):
        fpm.check_fingerprint(str(tmp_path), other)
    fpm.check_fingerprint(str(tmp_path), other, ignore=("backend", "quantizer_version"))


def test_missing_or_broken_fingerprint_file(tmp_path):
    with pytest.raises(FingerprintMismatchError, match="run the calib step again"):
        fpm.check_fingerprint(str(tmp_path), _fp())
    (tmp_path / "calib_fingerprint.json").write_text("{")
    with pytest.raises(FingerprintMismatchError, match="not valid JSON"):
        fpm.check_fingerprint(str(tmp_path), _fp())


def test_nndct_version_is_read_without_importing_pytorch_nndct():
    import sys
    version = fpm.quantizer_version("nndct")
    assert "pytorch_nndct" not in sys.modules
    if importlib.util.find_spec("pytorch_nndct") is None:
        assert version is None
    else:
        assert isinstance(version, str) and version[0].isdigit()
    assert fpm.quantizer_version("unknown") is None


def test_the_quantizer_version_is_the_backend_classes_own():
    from pipeline.quantizers.base import BACKENDS, backend_class
    for name in BACKENDS:
        assert fpm.quantizer_version(name) == backend_class(name).version()
    assert backend_class("sim").version() == "sim-" + pipeline.__version__


def test_a_long_list_that_differs_is_shown_by_its_first_differing_field():
    from pipeline.quantizers.fingerprint import mismatch_message
    stages = [{"type": "layout", "src": "NHWC", "dst": "NCHW"}, {"type": "center_crop", "height": 16, "width": 16},
              {"type": "bgr_to_rgb"}]
    now = [dict(s) for s in stages]
    now[1]["height"] = 20
    msg = mismatch_message("q", {"config.preprocess.stages": stages}, {"config.preprocess.stages": now})
    assert msg == ("the calibration in q was made for something else: config.preprocess.stages: calibrated and now "
                   "differ first at [1].height: calibrated 16, now 20. Run the calib step again, or set "
                   "preprocess.stages[1].height back to 16")
    # short values are shown whole, as before
    assert "config.preprocess.mean: calibrated [1, 2], now [1, 3]. Run the calib step again, or set preprocess.mean " \
           "back to [1, 2]" in mismatch_message("q", {"config.preprocess.mean": [1, 2]}, {"config.preprocess.mean": [1, 3]})
