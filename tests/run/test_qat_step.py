"""The qat step end to end on digits: the config, the data through the quantizer boundary (one copy per
batch in every epoch), the report's QAT rows, test and export on the QAT result, a failed or killed
QAT step, and the refusals."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import pipeline
from pipeline.config import load_config
from pipeline.errors import ConfigError, PipelineError, QuantizationError
from pipeline.runner.status import read_status
from tests.support import REPO, make_case, sha

QAT = {"enabled": True, "epochs": 2, "lr": 1e-4, "batch_size": 40, "freeze_bn_after": 1}


def _case(tmp_path, **qat):
    return make_case(tmp_path, run={"name": "qat", "work_dir": str(tmp_path / "run"), "num_threads": 1},
                     model={"zoo": "digits_cnn", "train": {"epochs": 3}},
                     quantizer={"max_accuracy_drop": 1.0, "qat": dict(QAT, **qat)})[0]


@pytest.fixture(scope="module")
def qat_run(tmp_path_factory):
    """One run of train, calib, qat, test, export on 400 digits (QAT on): (config, run folder, report)."""
    tmp = tmp_path_factory.mktemp("qat")
    config = _case(tmp)
    report = pipeline.run(config, steps=["train", "calib", "qat", "test", "export"])
    return config, str(tmp / "run"), report


def _json(*parts):
    with open(os.path.join(*parts)) as f:
        return json.load(f)


def _positions(info):
    return {k: v[0][1] for group in ("param", "output") for k, v in info[group].items()}


def test_qat_step_trains_through_the_boundary_and_reports_side_by_side(qat_run):
    _, work, report = qat_run
    assert report["status"]["state"] == "ok" and report["status"]["steps"] == ["train", "calib", "qat", "test",
                                                                               "export"]
    result = _json(work, "steps", "qat.json")
    assert result["epochs"] == 2 and result["steps"] == 2 * 6  # 240 train images in batches of 40
    # every training batch went through the stages and the quantizer boundary: one copy per batch, each epoch
    assert result["copies_per_batch_by_epoch"] == [1, 1] and result["ledger"]["copies_per_batch"] == 1
    assert result["ledger"]["batches"] == 6 and result["eval_ledger"]["copies_per_batch"] == 1
    assert result["bn_frozen_at"] == 1 and len(result["epoch_losses"]) == 2 and len(result["loss_curve"]) == 12
    acc = report["qat"]["accuracy"]
    assert set(acc) == {"float", "ptq", "qat_trainable", "qat_deployed"}
    # exact_deploy (the default): the deployed model is the trained one, bit for bit
    assert report["qat"]["exact_deploy"] is True and report["qat"]["deployed_vs_trainable"]["identical"] is True
    assert acc["qat_deployed"] == acc["qat_trainable"]
    # the test step measured the deployed QAT model on the same eval split
    assert report["quant_accuracy"] == acc["qat_deployed"] and report["float_accuracy"] == acc["float"]
    rows = result["thresholds"]
    assert len(rows) == 15 and {r["group"] for r in rows} == {"param", "output"}
    shipped = _positions(_json(work, "qat", "quant_info.json"))
    raw = _positions(_json(work, "qat", "test", "quant_info.json"))
    assert {r["tensor"]: r["shipped"] for r in rows} == shipped and {r["tensor"]: r["end"] for r in rows} == raw
    with open(os.path.join(work, "report.md")) as f:
        md = f.read()
    for text in ("## Quantization-aware training", "| QAT trainable (eval mode) |", "| QAT deployed |",
                 "| PTQ (calib step) |", "### Fix positions (per quantized tensor)", "quantized (QAT deployed)"):
        assert text in md, text
    assert any(line.startswith("QAT: 2 epochs, 12 steps") for line in report["summary"])
    record = _json(work, "qat", "qat_record.json")
    assert record["accuracy"] == acc and record["thresholds"] == rows
    if report["qat"]["plots"]:
        assert "![QAT loss per step](qat/loss.png)" in md and os.path.getsize(os.path.join(work, "qat", "loss.png"))
    for name in ("quant_info.json", "test/quant_info.json", "deployable.pth", "qat_record.json"):
        assert result["handed_on"]["qat/" + name]["sha256"] == sha(os.path.join(work, "qat", name))


def test_qat_export_carries_the_qat_fix_positions_not_the_calibration(qat_run):
    from pipeline.xir.reader import read_xmodel
    _, work, _ = qat_run
    qat = _positions(_json(work, "qat", "quant_info.json"))
    ptq = _positions(_json(work, "quantize_result", "quant_info.json"))
    assert qat != ptq  # QAT moved thresholds (and trains without CLE): the check below can tell them apart
    fixes = [(op.op_name, op.op_attr["fix_point"].int32_value) for op in
             read_xmodel(os.path.join(work, "export", "DigitsCNN_int.xmodel")).op_node if op.op_type == "fix"]
    by_name = dict(fixes)
    params = {k: v for k, v in qat.items() if "." in k}
    for key, pos in params.items():  # DigitsCNN::conv1.weight -> DigitsCNN__conv1_weight_fix
        assert by_name[key.replace("::", "__").replace(".", "_") + "_fix"] == pos, key
    assert by_name["DigitsCNN__input_0_fix"] == qat["DigitsCNN::nndct_input_0"]
    outputs = [pos for name, pos in fixes if "_weight_" not in name and "_bias_" not in name
               and name != "DigitsCNN__input_0_fix"]
    assert outputs == [v for k, v in qat.items() if "." not in k and not k.endswith("nndct_input_0")]
    # ONNX and the xmodel were verified against the test handle, which is the QAT deployed model
    exported = _json(work, "steps", "export.json")
    assert exported["agreement"]["onnx_exact"]["mismatches"] == 0
    assert exported["agreement"]["xmodel"]["interpreter"]["mismatches"] == 0


def test_a_failed_qat_step_leaves_the_previous_state_and_reruns(qat_run, tmp_path, monkeypatch):
    config, work, _ = qat_run
    mine = str(tmp_path / "run")
    shutil.copytree(work, mine)  # a run folder can be copied: paths inside are relative
    calib = {n: sha(os.path.join(mine, "quantize_result", n)) for n in os.listdir(os.path.join(mine, "quantize_result"))}
    first = sha(os.path.join(mine, "qat", "quant_info.json"))
    from pipeline.steps import qat_train
    real = qat_train.evaluate

    def fails(*args, **kwargs):  # after qat/'s files are written: the worst moment
        raise RuntimeError("injected failure")
    monkeypatch.setattr(qat_train, "evaluate", fails)
    with pytest.raises(RuntimeError, match="injected"):
        pipeline.run(config, steps=["qat"], overrides=["run.work_dir=" + mine])
    assert read_status(mine)["state"] == "failed"
    assert not os.path.exists(os.path.join(mine, "qat")) and not os.path.exists(os.path.join(mine, "steps", "qat.json"))
    assert {n: sha(os.path.join(mine, "quantize_result", n)) for n in calib} == calib
    with pytest.raises(PipelineError, match="the qat step has not run"):  # test and export need it
        pipeline.run(config, steps=["test"], overrides=["run.work_dir=" + mine])
    monkeypatch.setattr(qat_train, "evaluate", real)
    report = pipeline.run(config, steps=["qat", "test"], overrides=["run.work_dir=" + mine])
    assert report["status"]["state"] == "ok"
    assert sha(os.path.join(mine, "qat", "quant_info.json")) == first  # seeded: the same training


KILL_IN_QAT_WRITE = r"""
import os, signal, sys
from pipeline import fileio
real = fileio.write_files
def write_files(items, *args, **kwargs):
    if items and os.sep + "qat" + os.sep in items[0][0]:
        real(items[:1])                       # one file of qat/ on disk, then the process dies
        os.kill(os.getpid(), signal.SIGKILL)
    return real(items, *args, **kwargs)
fileio.write_files = write_files
from pipeline.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_qat_step_is_refused_by_later_steps_and_reruns_cleanly(qat_run, tmp_path):
    config, work, _ = qat_run
    mine = str(tmp_path / "run")
    shutil.copytree(work, mine)
    first = sha(os.path.join(mine, "qat", "deployable.pth"))
    proc = subprocess.run([sys.executable, "-c", KILL_IN_QAT_WRITE, "run", "--config", config, "--steps", "qat",
                           "--set", "run.work_dir=" + mine, "-q"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    status = read_status(mine)
    assert status["state"] == "interrupted" and status["step"] == "qat"
    assert not os.path.exists(os.path.join(mine, "steps", "qat.json"))
    with pytest.raises(PipelineError, match="the qat step has not run"):
        pipeline.run(config, steps=["export"], overrides=["run.work_dir=" + mine])
    report = pipeline.run(config, steps=["qat", "test"], overrides=["run.work_dir=" + mine])
    assert report["status"]["state"] == "ok"
    assert sha(os.path.join(mine, "qat", "deployable.pth")) == first


def test_test_refuses_a_qat_result_trained_with_other_settings(qat_run, tmp_path):
    config, work, _ = qat_run
    mine = str(tmp_path / "run")
    shutil.copytree(work, mine)
    with pytest.raises(QuantizationError, match=r"quantizer\.qat\.lr is 0\.001 in this config, but the qat step"):
        pipeline.run(config, steps=["test"], overrides=["run.work_dir=" + mine, "quantizer.qat.lr=0.001"])


def test_qat_warmup_without_exact_deploy_and_max_steps(qat_run, tmp_path):
    config, work, _ = qat_run
    mine = str(tmp_path / "run")
    shutil.copytree(work, mine)
    report = pipeline.run(config, steps=["qat"], overrides=[
        "run.work_dir=" + mine, "quantizer.qat.init=warmup", "quantizer.qat.exact_deploy=false",
        "quantizer.qat.max_steps=3", "quantizer.qat.freeze_bn_after=null"])
    result = _json(mine, "steps", "qat.json")
    assert result["steps"] == 3 and result["epochs"] == 1 and result["init"] == "warmup"
    assert result["exact_deploy"] is False and result["bn_frozen_at"] is None
    assert set(report["qat"]["deployed_vs_trainable"]) >= {"identical", "max_abs_diff", "top1_differ"}
    assert not os.path.exists(os.path.join(mine, "steps", "test.json"))  # a new QAT result makes test stale


def test_qat_off_is_left_out_and_asking_for_it_alone_is_refused(tmp_path):
    config = _case(tmp_path, enabled=False)
    with pytest.raises(ConfigError, match=r"nothing to run: the qat step is off \(quantizer.qat.enabled is false\)"):
        pipeline.run(config, steps=["qat"])
    report = pipeline.run(config, steps=["train", "calib", "qat", "test"])
    assert report["status"]["steps"] == ["train", "calib", "test"] and report["qat"] is None
    assert report["quant_accuracy"] > 0 and "QAT" not in "".join(report["summary"])


def test_qat_turned_off_after_a_qat_run_leaves_the_report_without_it(tmp_path):
    config = _case(tmp_path, epochs=1)
    pipeline.run(config, steps=["train", "calib", "qat", "test"])
    off = _case(tmp_path, epochs=1, enabled=False)
    report = pipeline.run(off, steps=["test"])
    assert report["qat"] is None
    assert [w for w in report["warnings"] if w.startswith("qat/ holds an earlier result of the qat step, which the "
                                                          "config now turns off (quantizer.qat.enabled is false)")]
    assert "steps" in report and "qat" not in report["steps"]
    assert os.path.isfile(str(tmp_path / "run" / "qat" / "quant_info.json"))  # kept
    with open(str(tmp_path / "run" / "report.md")) as f:
        assert "QAT trainable" not in f.read()


@pytest.mark.parametrize("override,message", [
    ("quantizer.qat.epoch=2", "quantizer.qat.epoch: unknown key; allowed keys: enabled, epochs, lr, threshold_lr, "
                              "batch_size, init, freeze_bn_after, exact_deploy, weight_decay, quantizer_norm, seed, "
                              "max_steps; did you mean 'epochs'?"),
    ("quantizer.qat.init=ptq", "quantizer.qat.init: String should match pattern '^(calib|warmup)$'"),
    ("quantizer.qat.lr=1e-5", "quantizer.qat.lr: Input should be a valid number (got '1e-5'); YAML reads 1e-5 as "
                              "text: write 1.0e-5"),
    ("quantizer.qat.lr=0", "quantizer.qat.lr: Input should be greater than 0"),
    ("quantizer.qat.epochs=0", "quantizer.qat.epochs: Input should be greater than or equal to 1"),
    ("quantizer.qat.freeze_bn_after=3", "freeze_bn_after is 3 but training runs 2 epochs"),
    ("quantizer.qat.max_steps=0", "quantizer.qat.max_steps: Input should be greater than or equal to 1"),
    ("quantizer.backend=nndct", "quantizer.qat.enabled: the nndct backend does not run quantization-aware training "
                                "here; use quantizer.backend sim"),
])
def test_bad_qat_settings_are_refused_with_the_dotted_path(tmp_path, override, message):
    config = _case(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(config, [override])
    assert message in str(info.value), str(info.value)
