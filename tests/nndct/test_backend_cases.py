"""Public cases P03 (calibration with zero batches) and P04 (export asked for with batch 4), run
against every quantizer backend through the contract of pipeline/quantizers/base.py.

``nndct`` runs against the fake pytorch_nndct of tests/support/nndct_fake.py (the real one: test_nndct_backend.py).
"""
import importlib
import os
import sys

from tests.support import nndct_fake
import pytest
import torch

from pipeline.errors import ExportError, QuantizationError
from pipeline.quantizers import nndct
from pipeline.quantizers.base import BACKENDS, QuantSettings, get_backend

EXPORT_FORMAT = {"nndct": "xmodel", "sim": "onnx_qdq"}


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = torch.nn.Flatten()
        self.fc1 = torch.nn.Linear(48, 16)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


@pytest.fixture(params=sorted(BACKENDS))
def backend(request, tmp_path, monkeypatch):
    name = request.param
    if name == "nndct":
        nndct_fake.install(tmp_path / "site", monkeypatch)
        monkeypatch.setattr(nndct, "_MODES_CREATED", set())
        request.addfinalizer(nndct_fake.forget)
    else:
        module = BACKENDS[name].split(":")[0]
        try:
            importlib.import_module(module)
        except ImportError as exc:
            pytest.skip("backend %s is not in this checkout (%s)" % (name, exc))
    return name, get_backend(name)


def _model():
    torch.manual_seed(0)
    return MLP().eval()


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return [torch.rand(4, 3, 4, 4, generator=g) * 4 - 2 for _ in range(n)]


def test_p03_zero_calibration_batches(backend, tmp_path):
    name, b = backend
    out = tmp_path / "quantize_result"
    with pytest.raises(QuantizationError, match="calibration saw 0 batches"):
        b.calibrate(_model(), _batches(1)[0], iter([]), str(out), QuantSettings())
    written = [] if not out.exists() else os.listdir(str(out))
    assert "quant_info.json" not in written and not [f for f in written if f.endswith((".xmodel", ".onnx", ".pt"))]


def test_p04_export_with_batch_4(backend, tmp_path):
    name, b = backend
    out = str(tmp_path / "quantize_result")
    model = _model()
    batches = _batches(3)
    b.calibrate(model, batches[0][:1], batches, out, QuantSettings())
    nndct._MODES_CREATED.clear()          # the runner starts a new process for the test step
    handle = b.load_test(model, batches[0], out, QuantSettings())
    dest = tmp_path / "export"
    try:
        files = b.export(handle, batches[0], str(dest), [EXPORT_FORMAT[name]])
    except ExportError as exc:
        assert "batch size 1" in str(exc) and "(4, 3, 4, 4)" in str(exc)
        assert not dest.exists() or os.listdir(str(dest)) == []
        return
    # the other acceptable answer: an export made from a batch-1 example of the same sample shape
    import onnx
    graph = onnx.load(files[EXPORT_FORMAT[name]]).graph
    dims = graph.input[0].type.tensor_type.shape.dim
    # the sample shape of the example; the batch axis is 1 or left symbolic (dynamic batch)
    assert [d.dim_value for d in dims[1:]] == [3, 4, 4]
    assert dims[0].dim_value == 1 or dims[0].dim_param


def test_the_sensitivity_runs_on_the_simulation_of_the_calibration(tmp_path):
    """The sensitivity runs on ``pipeline.sensitivity.simulated_model``: the sim's test handle itself; for
    nndct, the sim's model built from the calibration files (nothing of pytorch_nndct is needed for it)."""
    from pipeline.quantizers.base import CalibrationSummary
    from pipeline.quantizers.quant_info import read_quant_info
    from pipeline.sensitivity import layer_sensitivity, simulated_model
    model, batches, settings = _model(), _batches(2), QuantSettings()
    out = str(tmp_path / "quantize_result")
    sim = get_backend("sim")
    summary = sim.calibrate(model, batches[0], batches, out, settings)
    assert isinstance(summary, CalibrationSummary)
    assert summary.batches == 2 and summary.quantizer_version == sim.version() and summary.fast_finetune is None
    assert sorted(summary.sha256) == sorted(summary.files)
    handle = sim.load_test(model, batches[0], out, settings)
    assert simulated_model(handle, sim.simulates, model, batches[0], out, settings) is handle
    real = get_backend("nndct")
    built = simulated_model(object(), real.simulates, model, batches[0], out, settings)
    assert built is not handle and torch.equal(built(batches[1]), handle(batches[1]))
    info = read_quant_info(out)
    rows = layer_sensitivity(model, built, info, iter(batches), settings)
    assert rows and rows == layer_sensitivity(model, handle, info, iter(batches), settings)
    assert not hasattr(real, "analysis_handle") and not hasattr(real, "layer_sensitivity")
    assert "pytorch_nndct" not in sys.modules
