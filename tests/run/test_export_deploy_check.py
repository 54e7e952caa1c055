"""export.deploy_check: the export step writes the real quantizer's deploy-check dumps next to the run's
xmodel (export/deploy_check_data_int/<Model>/), the same bytes the drop-in's export_xmodel(deploy_check=True)
writes for the same calibration; they are recorded (steps/export.json, report.json), carried by the
deploy bundle, removed when the export reruns without the key, and a config that asks for other dumps
than the export made is refused by deploy. Also with QAT (configs/digits_sim_zcu102_qat.yaml)."""
import json
import os
import shutil

import numpy as np
import pytest
import torch

import pipeline
from pipeline.config import load_config
from pipeline.errors import ConfigError, PipelineError
from tests.support import REPO, file_tree, sha

CONFIG = os.path.join(REPO, "configs", "digits_sim_zcu102.yaml")
QAT_CONFIG = os.path.join(REPO, "configs", "digits_sim_zcu102_qat.yaml")
# small and fast: one epoch on a fifth of the digits (accuracy is not what these tests check)
SMALL = ["model.train.epochs=1", "data.split={train: 0.2, calib: 0.1, eval: 0.1}", "quantizer.max_accuracy_drop=1.0",
         "quantizer.require_float_above_chance=false"]
DUMPS = os.path.join("export", "deploy_check_data_int", "DigitsCNN")
ALL = ["train", "calib", "test", "export", "compile", "deploy"]


def _json(*parts):
    with open(os.path.join(*parts)) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """The digits config run with --set export.deploy_check=true: (run folder, report)."""
    work = str(tmp_path_factory.mktemp("deploy_check") / "run")
    report = pipeline.run(CONFIG, overrides=["run.work_dir=" + work, "export.deploy_check=true"] + SMALL, steps=ALL)
    return work, report


def test_deploy_check_dumps_are_written_recorded_and_bundled(dumped):
    work, report = dumped
    assert report["status"]["state"] == "ok"
    dumps = file_tree(os.path.join(work, DUMPS))
    assert "shape.txt" in dumps and any(n.endswith("_fix.bin") for n in dumps) and len(dumps) > 10
    names = [line.rsplit(": ", 1)[1] for line in dumps["shape.txt"].decode().splitlines()]
    assert all(n.replace(":", "_").replace("/", "_").replace(".", "_").replace("[", "_").replace("]", "_") + ".bin"
               in dumps for n in names)  # a float file per node of the deploy graph
    export = _json(work, "steps", "export.json")
    assert export["deploy_check"] == DUMPS.replace(os.sep, "/")
    recorded = {p: d for p, d in export["handed_on"].items() if p.startswith(export["deploy_check"] + "/")}
    assert sorted(recorded) == sorted(DUMPS.replace(os.sep, "/") + "/" + n for n in dumps)
    assert all(d["sha256"] == sha(os.path.join(work, p)) for p, d in recorded.items())
    assert "deploy_check" not in export["agreement"]["xmodel"]  # one record of them: the result's own field
    artifacts = {a["path"].replace(os.sep, "/"): a["sha256"] for a in report["artifacts"]}
    assert all(artifacts[p] == d["sha256"] for p, d in recorded.items())
    assert any(line.startswith("deploy-check dumps export/deploy_check_data_int/DigitsCNN/: %d files" % len(dumps))
               for line in report["summary"])
    with open(os.path.join(work, "report.md")) as f:
        assert "Deploy-check dumps (export.deploy_check): `export/deploy_check_data_int/DigitsCNN/`, %d files" \
            % len(dumps) in f.read()
    # the deploy bundle carries them in the model folder, byte for byte, in SHA256SUMS and the manifest
    manifest = _json(work, "deploy", "manifest.json")
    model_dir = os.path.join(work, "deploy", manifest["model_dir"])
    assert manifest["deploy_check"] == manifest["model_dir"] + "/deploy_check_data_int/DigitsCNN"
    assert file_tree(os.path.join(model_dir, "deploy_check_data_int", "DigitsCNN")) == dumps
    with open(os.path.join(model_dir, "SHA256SUMS")) as f:
        sums = dict(reversed(line.split("  ", 1)) for line in f.read().splitlines())
    listed = {f["path"]: f["sha256"] for f in manifest["files"]}
    for p, d in recorded.items():
        inside = "deploy_check_data_int/DigitsCNN/" + p.rsplit("/", 1)[1]
        assert sums[inside] == d["sha256"] and listed[manifest["model_dir"] + "/" + inside] == d["sha256"]


def test_deploy_check_dumps_equal_the_drop_ins_for_the_same_calibration(dumped, tmp_path):
    from pipeline.apis import torch_quantizer
    from pipeline.models.loading import build_model, load_weights
    work, _ = dumped
    quant_dir = str(tmp_path / "quantize_result")
    shutil.copytree(os.path.join(work, "quantize_result"), quant_dir)
    model = load_weights(build_model("digits_cnn", None, {}), os.path.join(work, "model", "float.pt")).eval()
    example = torch.from_numpy(np.load(os.path.join(work, "export", "example_input.npy")))
    q = torch_quantizer("test", model, (example.clone(),), output_dir=quant_dir, device="cpu")
    with torch.no_grad():
        q.quant_model(example.clone())
    out = str(tmp_path / "export")
    q.export_xmodel(out, deploy_check=True)
    drop_in = file_tree(os.path.join(out, "deploy_check_data_int", "DigitsCNN"))
    assert file_tree(os.path.join(work, DUMPS)) == drop_in  # float32 .bin, int8 _fix.bin and shape.txt, byte for byte
    with open(os.path.join(work, "export", "DigitsCNN_int.xmodel"), "rb") as f, \
            open(os.path.join(out, "DigitsCNN_int.xmodel"), "rb") as g:
        assert f.read() == g.read()


def test_deploy_check_codes_are_the_quantized_input(dumped):
    # the input's _fix.bin: the example (NCHW, one channel) on the input's grid, as int8 codes (NHWC)
    work, _ = dumped
    info = _json(work, "quantize_result", "quant_info.json")
    fp = [v for k, v in info["output"].items() if k.endswith("::nndct_input_0")][0][0][1]
    example = np.load(os.path.join(work, "export", "example_input.npy"))
    codes = np.clip(np.floor(example.astype(np.float64) * 2 ** fp + 0.5), -128, 127).astype(np.int8)
    fixes = {n: b for n, b in file_tree(os.path.join(work, DUMPS)).items() if n.endswith("input_0_fix.bin")}
    assert len(fixes) == 1
    assert np.frombuffer(list(fixes.values())[0], np.int8).tolist() == codes.transpose(0, 2, 3, 1).reshape(-1).tolist()


def test_deploy_check_defaults_to_false_and_bad_values_are_refused(tmp_path):
    assert load_config(CONFIG).cfg.export.deploy_check is False
    assert load_config(CONFIG, ["export.deploy_check=true"]).cfg.export.deploy_check is True
    for bad in ("1", '"true"', "null", "[xmodel]"):
        with pytest.raises(ConfigError, match=r"export\.deploy_check: Input should be a valid boolean"):
            load_config(CONFIG, ["export.deploy_check=" + bad])
    with pytest.raises(ConfigError, match=r"export\.deploy_check: the deploy-check dumps are written with the xmodel "
                                          r".*\['onnx_exact'\]; add xmodel to export\.formats"):
        load_config(CONFIG, ["export.deploy_check=true", "export.formats=[onnx_exact]"])
    with pytest.raises(ConfigError, match="did you mean 'deploy_check'"):
        load_config(CONFIG, ["export.deploy_chek=true"])


def test_deploy_check_rerun_without_the_key_leaves_no_dumps_and_deploy_refuses_a_changed_key(dumped, tmp_path):
    work = str(tmp_path / "copy")
    shutil.copytree(dumped[0], work)
    base = ["run.work_dir=" + work] + SMALL
    report = pipeline.run(CONFIG, overrides=base, steps=["export", "compile", "deploy"])  # the default: false
    assert report["status"]["state"] == "ok"
    assert not os.path.exists(os.path.join(work, "export", "deploy_check_data_int"))
    export = _json(work, "steps", "export.json")
    assert "deploy_check" not in export and not any("deploy_check" in p for p in export["handed_on"])
    manifest = _json(work, "deploy", "manifest.json")
    assert manifest["deploy_check"] is None and not any("deploy_check" in f["path"] for f in manifest["files"])
    assert not any("deploy_check" in a["path"] for a in report["artifacts"])
    # the key set again without a new export: the export on record is stale for this config
    with pytest.raises(PipelineError, match=r"export\.deploy_check is true in this config, but the export step in .* "
                                            r"ran with false .*--steps export,compile,deploy"):
        pipeline.run(CONFIG, overrides=base + ["export.deploy_check=true"], steps=["deploy"])
    # and the export run again with it writes them anew
    pipeline.run(CONFIG, overrides=base + ["export.deploy_check=true"], steps=["export"])
    assert file_tree(os.path.join(work, DUMPS)) == file_tree(os.path.join(dumped[0], DUMPS))
    with pytest.raises(PipelineError, match=r"export\.deploy_check is false in this config, but the export step"):
        pipeline.run(CONFIG, overrides=base, steps=["compile", "deploy"])


def test_deploy_check_with_qat_dumps_the_qat_result(tmp_path):
    work = str(tmp_path / "run")
    report = pipeline.run(QAT_CONFIG, overrides=["run.work_dir=" + work, "export.deploy_check=true",
                                                 "quantizer.qat.epochs=1", "quantizer.qat.max_steps=2",
                                                 "quantizer.qat.freeze_bn_after=null"] + SMALL,
                          steps=["train", "calib", "qat", "test", "export"])
    assert report["status"]["state"] == "ok"
    dumps = file_tree(os.path.join(work, DUMPS))
    assert "shape.txt" in dumps and any(n.endswith("_fix.bin") for n in dumps)
    assert _json(work, "steps", "export.json")["deploy_check"] == DUMPS.replace(os.sep, "/")
    # the input codes are on the QAT result's grid (qat/quant_info.json), not the calibration's
    fp = [v for k, v in _json(work, "qat", "quant_info.json")["output"].items()
          if k.endswith("::nndct_input_0")][0][0][1]
    example = np.load(os.path.join(work, "export", "example_input.npy"))
    codes = np.clip(np.floor(example.astype(np.float64) * 2 ** fp + 0.5), -128, 127).astype(np.int8)
    fix = [b for n, b in dumps.items() if n.endswith("input_0_fix.bin")][0]
    assert np.frombuffer(fix, np.int8).tolist() == codes.transpose(0, 2, 3, 1).reshape(-1).tolist()
