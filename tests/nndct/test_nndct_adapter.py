"""The nndct adapter's own logic, against the fake ``pytorch_nndct`` of tests/support/nndct_fake.py (it
imitates the real quantizer's hazards; the real one is exercised in test_nndct_backend.py)."""
import ast
import importlib
import json
import os
import sys
import textwrap

from tests.support import REPO, nndct_fake
import pytest
import torch

from pipeline.errors import BackendUnavailableError, ConfigError, ExportError, QuantizationError
from pipeline.quantizers import nndct
from pipeline.quantizers.base import QuantSettings, get_backend

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = torch.nn.Flatten()
        self.fc = torch.nn.Linear(12, 4)
        self.act = torch.nn.ReLU6()

    def forward(self, x):
        return self.act(self.fc(self.flatten(x)))


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Install the fake pytorch_nndct on sys.path; yields a function returning its apis module."""
    nndct_fake.install(tmp_path / "site", monkeypatch)
    monkeypatch.setattr(nndct, "_MODES_CREATED", set())
    yield nndct_fake.apis
    nndct_fake.forget()


def _model():
    torch.manual_seed(0)
    return Net().eval()


def _batches(n=3):
    g = torch.Generator().manual_seed(1)
    return [torch.rand(2, 3, 2, 2, generator=g) * 3 - 1.5 for _ in range(n)]


def _calibrate(tmp_path, batches=None, settings=None, model=None):
    out = str(tmp_path / "quantize_result")
    batches = _batches() if batches is None else batches
    result = nndct.NndctBackend().calibrate(model or _model(), batches[0] if batches else torch.zeros(2, 3, 2, 2),
                                            batches, out, settings or QuantSettings())
    return out, result


def test_registry_and_availability(fake):
    assert isinstance(get_backend("nndct"), nndct.NndctBackend)
    assert nndct.NndctBackend.is_available()
    assert nndct.NndctBackend.version() == "3.5.0+fake+torch0"
    assert "pytorch_nndct" not in sys.modules, "availability and version must not import it"


def test_calibrate_writes_the_files_and_maps_the_settings(fake, tmp_path):
    cfg = tmp_path / "q.json"
    cfg.write_text("{}")
    settings = QuantSettings(target="DPUCZDX8G_ISA1_B4096", bitwidth=8, quant_config_file=str(cfg), device="cpu")
    out, result = _calibrate(tmp_path, settings=settings)
    assert result.batches == 3
    assert sorted(os.path.basename(f) for f in result.files) == ["Net.py", "bias_corr.pth", "quant_info.json"]
    assert sorted(os.listdir(out)) == ["Net.py", "bias_corr.pth", "quant_info.json"], "no temporary folder left"
    assert result.quant_info["bias_corrected"] is True
    assert result.quantizer_version == "3.5.0+fake+torch0" and result.sha256 == {} and result.fast_finetune is None
    init = [c for c in fake().CALLS if c[0] == "init"][0][1]
    assert init["quant_mode"] == "calib"
    assert init["target"] == "DPUCZDX8G_ISA1_B4096" and init["bitwidth"] == 8
    assert init["quant_config_file"] == str(cfg) and init["device"] == torch.device("cpu")


def test_each_batch_is_handed_over_as_an_owned_copy(fake, tmp_path):
    batches = _batches()
    before = [b.clone() for b in batches]
    _calibrate(tmp_path, batches=batches)
    seen = [c[1] for c in fake().CALLS if c[0] == "forward"]
    assert len(seen) == 3
    for got, mine, orig in zip(seen, batches, before):
        assert torch.equal(mine, orig), "the caller's batch was modified"
        assert got.data_ptr() != mine.data_ptr()
        assert torch.equal(got, torch.floor(orig * 64 + 0.5) / 64), "the fake rounded its own copy in place"
    example = [c for c in fake().CALLS if c[0] == "init"][0][1]["input_args"][0]
    assert example.data_ptr() != batches[0].data_ptr()


def test_model_is_deep_copied_so_the_relu6_rewrite_stays_inside(fake, tmp_path):
    model = _model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    _calibrate(tmp_path, model=model)
    assert isinstance(model.act, torch.nn.ReLU6)
    given = [c for c in fake().CALLS if c[0] == "init"][0][1]["module"]
    assert given is not model and isinstance(given.act, torch.nn.ReLU)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_sys_argv_is_kept_away_from_the_import(fake, tmp_path, monkeypatch):
    argv = ["prog", "run", "--nndct_quant_off", "--config", "c.yaml"]
    monkeypatch.setattr(sys, "argv", argv)
    _calibrate(tmp_path)
    assert sys.argv is argv and argv == ["prog", "run", "--nndct_quant_off", "--config", "c.yaml"]
    assert importlib.import_module("pytorch_nndct").SEEN_ARGV == ["prog"]


def test_p03_zero_batches_fails_before_anything_is_created(fake, tmp_path):
    out = tmp_path / "quantize_result"
    with pytest.raises(QuantizationError, match="calibration saw 0 batches"):
        nndct.NndctBackend().calibrate(_model(), torch.zeros(1, 3, 2, 2), iter([]), str(out), QuantSettings())
    assert not out.exists()
    assert "pytorch_nndct" not in sys.modules


def test_export_quant_config_that_only_logs_is_an_error(fake, tmp_path):
    fake().BEHAVIOUR["forward_not_counted"] = True
    with pytest.raises(QuantizationError, match="NO_FORWARD"):
        _calibrate(tmp_path)
    assert os.listdir(str(tmp_path / "quantize_result")) == []


@pytest.mark.parametrize("missing, message", [("skip_quant_info", "no quant_info.json"),
                                              ("skip_bias_corr", "bias_corr.pth is missing")])
def test_missing_calibration_files_are_errors(fake, tmp_path, missing, message):
    fake().BEHAVIOUR[missing] = True
    with pytest.raises(QuantizationError, match=message):
        _calibrate(tmp_path)
    assert os.listdir(str(tmp_path / "quantize_result")) == []


def test_version_check_exit_is_backend_unavailable(fake, tmp_path):
    fake().BEHAVIOUR["version_mismatch"] = True
    with pytest.raises(BackendUnavailableError) as info:
        _calibrate(tmp_path)
    assert "exit status 1" in str(info.value) and "not consistent" in str(info.value)
    assert "\x1b[" not in str(info.value)


def test_config_exit_and_exceptions_are_quantization_errors(fake, tmp_path):
    apis = fake()
    apis.BEHAVIOUR["config_exit"] = True
    with pytest.raises(QuantizationError, match="exit status 2.*include_cl"):
        _calibrate(tmp_path)
    apis.BEHAVIOUR.clear()
    apis.BEHAVIOUR["raise_keyerror"] = True
    with pytest.raises(QuantizationError, match="KeyError: 'target_device'"):
        _calibrate(tmp_path)


def test_missing_package_is_backend_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(nndct, "_MODES_CREATED", set())
    monkeypatch.setitem(sys.modules, "pytorch_nndct", None)   # makes the import fail
    with pytest.raises(BackendUnavailableError, match="Vitis AI image"):
        _calibrate(tmp_path)


def _calibrated(tmp_path):
    out, _ = _calibrate(tmp_path)
    nndct._MODES_CREATED.clear()       # the runner would start a new process for the test step
    return out


def test_fast_finetune_calls_the_real_one_then_load_ft_param_in_test_mode(fake, tmp_path):
    from pipeline.quantizers.base import FinetuneRequest
    out = str(tmp_path / "quantize_result")
    batches = _batches()
    ft = FinetuneRequest(iter(_batches(2)))
    result = nndct.NndctBackend().calibrate(_model(), batches[0], batches, out, QuantSettings(), finetune=ft)
    calls = [c[0] for c in fake().CALLS]
    # fast_finetune runs its run_fn twice over the 2 finetune batches, then the 3 calibration forwards
    assert calls[calls.index("fast_finetune"):].count("forward") == 2 * 2 + 3
    assert calls.index("fast_finetune") < calls.index("export_quant_config")
    assert result.fast_finetune["batches"] == 2 and result.batches == 3
    assert "param.pth" in [os.path.basename(f) for f in result.files]
    assert result.quant_info["fast_finetuned"] is True
    nndct._MODES_CREATED.clear()
    nndct.NndctBackend().load_test(_model(), torch.zeros(4, 3, 2, 2), out, QuantSettings())
    assert [c for c in fake().CALLS if c[0] == "load_ft_param"] == [("load_ft_param", 0)]  # before any forward
    nndct._MODES_CREATED.clear()
    before = len(fake().CALLS)
    with pytest.raises(QuantizationError, match="at least 2 batches"):
        nndct.NndctBackend().calibrate(_model(), batches[0], batches, str(tmp_path / "b"), QuantSettings(),
                                       finetune=FinetuneRequest(iter(_batches(1))))
    assert len(fake().CALLS) == before  # refused before the quantizer was created


def test_load_test_needs_quant_info_and_bias_corr(fake, tmp_path):
    backend = nndct.NndctBackend()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(QuantizationError, match="run the calib step first"):
        backend.load_test(_model(), torch.zeros(4, 3, 2, 2), str(empty), QuantSettings())
    out = _calibrated(tmp_path)
    os.remove(os.path.join(out, "bias_corr.pth"))
    with pytest.raises(QuantizationError, match="bias_corr.pth is missing"):
        backend.load_test(_model(), torch.zeros(4, 3, 2, 2), out, QuantSettings())
    assert [c for c in fake().CALLS if c[0] == "init" and c[1]["quant_mode"] == "test"] == []


def test_test_mode_traces_batch_1_and_evaluates_any_batch(fake, tmp_path):
    out = _calibrated(tmp_path)
    model = _model()
    handle = nndct.NndctBackend().load_test(model, torch.zeros(4, 3, 2, 2), out, QuantSettings())
    init = [c for c in fake().CALLS if c[0] == "init"][-1][1]
    assert init["quant_mode"] == "test" and init["output_dir"] == out
    assert tuple(init["input_args"][0].shape) == (1, 3, 2, 2)
    x = _batches(1)[0]
    x_before = x.clone()
    y = handle(x)
    assert torch.equal(x, x_before)
    expected = torch.nn.ReLU()(model.fc(torch.floor(x * 64 + 0.5).flatten(1) / 64))
    assert torch.allclose(y, expected)
    # the first forward of the quantizer is a batch-1 one (its shapes are what export_xmodel writes)
    assert handle.forwards == 2 and handle.last_batch_size == 2
    assert handle.quant_model.owner.batch_sizes == [1, 2]


def test_calib_and_test_refuse_to_share_a_process(fake, tmp_path):
    out, _ = _calibrate(tmp_path)
    with pytest.raises(QuantizationError, match="separate processes"):
        nndct.NndctBackend().load_test(_model(), torch.zeros(1, 3, 2, 2), out, QuantSettings())
    nndct._MODES_CREATED.clear()
    nndct.NndctBackend().load_test(_model(), torch.zeros(1, 3, 2, 2), out, QuantSettings())
    with pytest.raises(QuantizationError, match="already created a test-mode quantizer"):
        _calibrate(tmp_path)


def _handle(fake, tmp_path):
    out = _calibrated(tmp_path)
    return out, nndct.NndctBackend().load_test(_model(), torch.zeros(4, 3, 2, 2), out, QuantSettings())


def test_export_runs_a_batch_1_forward_then_writes_each_format(fake, tmp_path):
    out, handle = _handle(fake, tmp_path)
    handle(torch.zeros(8, 3, 2, 2))
    dest = str(tmp_path / "export")
    files = nndct.NndctBackend().export(handle, torch.zeros(1, 3, 2, 2), dest, ["xmodel", "onnx_qdq", "torchscript"])
    assert files == {"xmodel": os.path.join(dest, "Net_int.xmodel"), "onnx_qdq": os.path.join(dest, "Net_int.onnx"),
                     "torchscript": os.path.join(dest, "Net_int.pt")}
    assert sorted(os.listdir(dest)) == ["Net_int.onnx", "Net_int.pt", "Net_int.xmodel"]
    xmodel_call = [c for c in fake().CALLS if c[0] == "export_xmodel"][0][1]
    # batch 1 first (the shapes the xmodel gets), the eval batch, one batch-1 forward right before export
    assert xmodel_call["batch_sizes"] == [1, 8, 1]


def test_p04_export_with_batch_4_stops_before_the_quantizer(fake, tmp_path):
    out, handle = _handle(fake, tmp_path)
    dest = tmp_path / "export"
    with pytest.raises(ExportError, match=r"batch size 1.*\(4, 3, 2, 2\).*example\[:1\]"):
        nndct.NndctBackend().export(handle, torch.zeros(4, 3, 2, 2), str(dest), ["xmodel"])
    assert not dest.exists()
    assert [c for c in fake().CALLS if c[0].startswith("export_") and c[0] != "export_quant_config"] == []


def test_export_soft_failures_become_errors(fake, tmp_path):
    apis = fake()
    out, handle = _handle(fake, tmp_path)
    dest = tmp_path / "export"
    apis.BEHAVIOUR["batch_error"] = True
    with pytest.raises(ExportError, match="Batch size must be 1"):
        nndct.NndctBackend().export(handle, torch.zeros(1, 3, 2, 2), str(dest), ["xmodel"])
    assert os.listdir(str(dest)) == [], "a file written alongside a logged error is not kept"
    apis.BEHAVIOUR.clear()
    apis.BEHAVIOUR["forward_not_counted"] = True
    handle.quantizer.forwards = 0
    with pytest.raises(ExportError, match="NO_FORWARD"):
        nndct.NndctBackend().export(handle, torch.zeros(1, 3, 2, 2), str(dest), ["torchscript"])


def test_export_checks_the_files_exist(fake, tmp_path):
    apis = fake()
    out, handle = _handle(fake, tmp_path)
    apis.BEHAVIOUR["write_nothing"] = True
    with pytest.raises(ExportError, match="expected one \\*_int.xmodel file, the quantizer wrote none"):
        nndct.NndctBackend().export(handle, torch.zeros(1, 3, 2, 2), str(tmp_path / "e"), ["xmodel"])
    apis.BEHAVIOUR.clear()
    apis.BEHAVIOUR["two_graphs"] = True
    with pytest.raises(ExportError, match="Net_0_int.xmodel"):
        nndct.NndctBackend().export(handle, torch.zeros(1, 3, 2, 2), str(tmp_path / "e"), ["xmodel"])


def test_export_xmodel_without_xir_is_backend_unavailable(fake, tmp_path):
    fake().BEHAVIOUR["no_xir"] = True
    out, handle = _handle(fake, tmp_path)
    with pytest.raises(BackendUnavailableError, match="please install xir package.*Vitis AI image"):
        nndct.NndctBackend().export(handle, torch.zeros(1, 3, 2, 2), str(tmp_path / "e"), ["xmodel"])


def test_unknown_export_format(fake, tmp_path):
    out, handle = _handle(fake, tmp_path)
    with pytest.raises(ConfigError, match="onnx_exact"):
        nndct.NndctBackend().export(handle, torch.zeros(1, 3, 2, 2), str(tmp_path / "e"), ["onnx_exact"])


def test_the_adapter_is_the_only_module_importing_pytorch_nndct():
    root = os.path.join(REPO, "pipeline")
    importers = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    tree = ast.parse(f.read())  # imports, not the words in a docstring (pipeline/nn.py cites one)
                if any(isinstance(n, ast.Import) and any(a.name.split(".")[0] == "pytorch_nndct" for a in n.names)
                       or isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "pytorch_nndct"
                       for n in ast.walk(tree)):
                    importers.append(os.path.relpath(path, root))
    assert importers == [os.path.join("quantizers", "nndct.py")]


def test_importing_pipeline_does_not_import_pytorch_nndct():
    code = textwrap.dedent("""
        import sys, pipeline, pipeline.quantizers.nndct, pipeline.quantizers.base
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(("pytorch_nndct", "xir")))))
    """)
    import subprocess
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True, cwd=REPO)
    assert json.loads(out.stdout) == []
