"""The nndct backend against the real pytorch_nndct (runs where it imports: the Vitis AI image).

Golden data (tests/data/golden/mlp, from the real quantizer; see tests/data/README.md): calibrate in
one process, test in another (the documented flow,
docs/quantizer.md#calib-and-test-in-separate-processes), and compare quant_info.json and the test-mode
outputs. Each step runs in its own ``python`` child process, as the runner does.
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support import DATA, REPO

pytestmark = [pytest.mark.vitis_ai, pytest.mark.slow]

GOLDEN = os.path.join(DATA, "golden", "mlp")
NOCLE = {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}

DRIVER = r'''
import json, os, sys
import numpy as np, torch
from pipeline.errors import PipelineError
from pipeline.quantizers.base import QuantSettings
from pipeline.quantizers.nndct import NndctBackend

GOLDEN, step, out, config, result_path = sys.argv[1:6]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = torch.nn.Flatten()
        self.fc1 = torch.nn.Linear(48, 32)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


model = MLP()
model.load_state_dict(torch.load(os.path.join(GOLDEN, "float_state_dict.pt")))
model.eval()
load = lambda name: torch.from_numpy(np.load(os.path.join(GOLDEN, name)))
calib, evals, ties = load("calib_inputs.npy"), load("eval_inputs.npy"), load("tie_inputs.npy")
settings = QuantSettings(quant_config_file=None if config == "-" else config, device="cpu")
backend = NndctBackend()
result = {}


def attempt(key, fn):
    try:
        result[key] = fn()
    except PipelineError as exc:
        result[key] = {"error": type(exc).__name__, "message": str(exc)}


if step in ("calib", "calib+test"):
    batches = [calib[4 * i:4 * i + 4].clone() for i in range(8)]
    before = [b.clone() for b in batches]
    summary = backend.calibrate(model, calib[0:4].clone(), batches, out, settings)
    result["batches"] = summary.batches
    result["files"] = sorted(os.path.basename(f) for f in summary.files)
    result["batches_unchanged"] = all(torch.equal(a, b) for a, b in zip(batches, before))
if step in ("test", "calib+test"):
    attempt("handle", lambda: backend.load_test(model, calib[0:4].clone(), out, settings))
    handle = result.pop("handle")
    if not isinstance(handle, dict):
        evals_before = evals.clone()
        np.save(os.path.join(out, "got_eval.npy"), handle(evals).numpy())
        np.save(os.path.join(out, "got_ties.npy"), handle(ties).numpy())
        result["eval_unchanged"] = bool(torch.equal(evals, evals_before))
        export_dir = os.path.join(out, "export")
        attempt("export_batch4", lambda: backend.export(handle, evals[:4], export_dir, ["xmodel"]))
        attempt("export_torchscript", lambda: backend.export(handle, evals[:1], export_dir, ["torchscript"]))
        attempt("export_xmodel", lambda: backend.export(handle, evals[:1], export_dir, ["xmodel"]))
    else:
        result["load_test"] = handle
with open(result_path, "w") as f:
    json.dump(result, f)
'''


def _run(tmp_path, step, out, config="-"):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    result = tmp_path / ("%s.json" % step)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(driver), GOLDEN, step, str(out), config, str(result)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return json.loads(result.read_text())


def _golden_info(config):
    with open(os.path.join(GOLDEN, config, "quant_info.json")) as f:
        return json.load(f)


def _fix_positions(info):
    return {k: info[k] for k in ("param", "output", "input", "bias_corrected", "fast_finetuned")}


def _check_outputs(out, config):
    lsb = 2.0 ** -_golden_info(config)["output"]["MLP::nndct_dense_4"][0][1]
    for got, want in (("got_eval.npy", "quant_outputs.npy"), ("got_ties.npy", "quant_outputs_ties.npy")):
        a = np.load(os.path.join(str(out), got))
        b = np.load(os.path.join(GOLDEN, config, want))
        assert a.shape == b.shape
        # bit-exact in the throwaway build (torch 2.13); allow one LSB for another torch's float matmul
        assert np.abs(a - b).max() <= lsb, (got, np.abs(a - b).max())


@pytest.mark.parametrize("config", ["default", "nocle"])
def test_calib_then_test_in_separate_processes_match_the_golden_data(tmp_path, config):
    out = tmp_path / "quantize_result"
    cfg = "-"
    if config == "nocle":
        cfg = str(tmp_path / "nocle.json")
        with open(cfg, "w") as f:
            json.dump(NOCLE, f)
    calib = _run(tmp_path, "calib", out, cfg)
    assert calib["batches"] == 8 and calib["batches_unchanged"]
    expected_files = ["MLP.py", "bias_corr.pth", "quant_info.json"] if config == "default" else ["MLP.py", "quant_info.json"]
    assert calib["files"] == expected_files
    with open(str(out / "quant_info.json")) as f:
        assert _fix_positions(json.load(f)) == _fix_positions(_golden_info(config))
    test = _run(tmp_path, "test", out, cfg)
    assert test["eval_unchanged"]
    _check_outputs(out, config)
    assert test["export_batch4"]["error"] == "ExportError" and "batch size 1" in test["export_batch4"]["message"]
    assert test["export_torchscript"] == {"torchscript": str(out / "export" / "MLP_int.pt")}
    assert os.path.isfile(str(out / "export" / "MLP_int.pt"))
    if importlib.util.find_spec("xir") is None:
        assert test["export_xmodel"]["error"] == "BackendUnavailableError"
        assert "please install xir package" in test["export_xmodel"]["message"]
    else:
        assert test["export_xmodel"] == {"xmodel": str(out / "export" / "MLP_int.xmodel")}
        assert os.path.getsize(test["export_xmodel"]["xmodel"]) > 0


def test_calib_and_test_in_one_process_are_refused(tmp_path):
    out = tmp_path / "quantize_result"
    result = _run(tmp_path, "calib+test", out)
    assert result["load_test"]["error"] == "QuantizationError"
    assert "separate processes" in result["load_test"]["message"]


SIM_XMODEL = r'''
import os, sys
import numpy as np, torch
from pipeline.apis import torch_quantizer
sys.path.insert(0, sys.argv[3])
from driver_model import MLP
GOLDEN, out = sys.argv[1], sys.argv[2]
model = MLP()
model.load_state_dict(torch.load(os.path.join(GOLDEN, "float_state_dict.pt")))
model.eval()
load = lambda name: torch.from_numpy(np.load(os.path.join(GOLDEN, name)))
calib, evals = load("calib_inputs.npy"), load("eval_inputs.npy")
q = torch_quantizer("test", model, (calib[0:4].clone(),), output_dir=out, device=torch.device("cpu"))
with torch.no_grad():
    q.quant_model(evals[:1].clone())
    q.quant_model(evals.clone())
q.export_xmodel(os.path.join(out, "sim_xmodel"))
'''


def test_the_sims_xmodel_equals_the_real_quantizers_for_its_calibration(tmp_path):
    """The real quantizer calibrates and exports its xmodel; the simulation, in test mode on that same
    folder (no manifest: a folder of the real quantizer is used as it is), writes the same graph."""
    if importlib.util.find_spec("xir") is None:
        pytest.skip("needs the xir package (the real quantizer's export_xmodel)")
    from pipeline.xir import schema
    out = tmp_path / "quantize_result"
    _run(tmp_path, "calib", out)
    test = _run(tmp_path, "test", out)
    real = test["export_xmodel"]["xmodel"]
    model_src = DRIVER[DRIVER.index("class MLP"):DRIVER.index("model = MLP()")]
    (tmp_path / "driver_model.py").write_text("import torch\n" + model_src)
    (tmp_path / "sim_xmodel.py").write_text(SIM_XMODEL)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(tmp_path / "sim_xmodel.py"), GOLDEN, str(out), str(tmp_path)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    with open(real, "rb") as f:
        a = schema.parse_graph(f.read())
    with open(str(out / "sim_xmodel" / "MLP_int.xmodel"), "rb") as f:
        b = schema.parse_graph(f.read())
    # libxir embeds its op catalogue; the sim, with libxir installed, writes the same (xir.catalogue)
    assert len(a.op_defs) > 0 and [d.SerializeToString() for d in b.op_defs] == [d.SerializeToString() for d in a.op_defs]
    assert schema.canonical(a) == schema.canonical(b)
