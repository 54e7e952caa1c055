"""Bad input, faults and untrusted files: a clear error naming the problem, nothing lost, the
caller's data unchanged (issue 6 and public cases P03, P05, P07, P12)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import yaml

from tests.support import REPO, artifact_hashes, cli, digits_u8, make_case, sha

import pipeline
from pipeline.errors import ConfigError, DataError, FingerprintMismatchError, PipelineError, QuantizationError


# ---------------------------------------------------------------------------- data

def test_p03_a_limit_of_zero_calibration_batches_is_refused_before_any_work(tmp_path):
    cfg, npy = make_case(tmp_path, data={"calib_batches": 0})
    before = sha(npy)
    with pytest.raises(ConfigError, match=r"data.calib_batches: .*calibration saw 0 batches"):
        pipeline.run(cfg)
    assert not (tmp_path / "run").exists()
    assert sha(npy) == before


def test_p03_an_empty_calibration_source_stops_before_anything_is_exported(tmp_path):
    """The backend's own guard, for a calibration iterator that turns out empty at run time."""
    import torch
    from pipeline.quantizers.base import QuantSettings, get_backend
    from pipeline.models.zoo import digits_cnn
    out = tmp_path / "quantize_result"
    with pytest.raises(QuantizationError, match="calibration saw 0 batches"):
        get_backend("sim").calibrate(digits_cnn().eval(), torch.zeros(1, 1, 8, 8), iter([]), str(out), QuantSettings())
    assert not (out / "quant_info.json").exists()


def test_p03_empty_calibration_split_through_the_command_line(tmp_path):
    cfg, npy = make_case(tmp_path, data={"split": {"train": 0.7, "calib": 0.0, "eval": 0.3}})
    proc = cli("--config", cfg)
    assert proc.returncode == 2
    assert "calibration saw 0 batches" in proc.stderr
    assert not (tmp_path / "run" / "model").exists()        # refused before training
    assert not (tmp_path / "run" / "quantize_result" / "quant_info.json").exists()


def test_p07_nan_and_inf_in_a_calibration_batch_name_the_batch_and_count(tmp_path):
    images, labels = digits_u8()
    images = images[:400].astype(np.float32)
    # contiguous split: calibration is rows 240..279 (split 0.6 / 0.1 / 0.3 of 400), batch size 50: batch 0
    images[250, 0, 0, 0] = np.nan
    images[251, 3, 3, 0] = np.inf
    images[252, 4, 4, 0] = -np.inf
    cfg, npy = make_case(tmp_path, images, labels[:400], model={"zoo": "digits_cnn", "weights": None,
                                                                "train": {"epochs": 1}},
                         data={"split_order": "contiguous"})
    before = sha(npy)
    with pytest.raises(DataError, match=r"calib batch 0 holds 3 non-finite values \(NaN or Inf\) out of 2560"):
        pipeline.run(cfg, steps=["calib"], overrides=["model.weights=" + _trained_weights(tmp_path)])
    assert not (tmp_path / "run" / "quantize_result" / "quant_info.json").exists()
    assert sha(npy) == before


def _trained_weights(tmp_path):
    import torch
    from pipeline.models.zoo import digits_cnn
    torch.manual_seed(0)
    path = str(tmp_path / "w.pt")
    torch.save(digits_cnn().state_dict(), path)
    return path


def test_p05_pixels_scaled_twice_are_flagged_in_the_report(tmp_path):
    images, labels = digits_u8()
    images = (images[:400].astype(np.float32) / 255.0) / 255.0      # all values below 0.004
    assert images.max() < 0.004
    cfg, npy = make_case(tmp_path, images, labels[:400])
    report = pipeline.run(cfg, steps=["calib"], overrides=["model.weights=" + _trained_weights(tmp_path)])
    stats = report["steps"]["calib"]["input_stats"]
    assert stats["plausible"] is False
    assert stats["source_max"][0] < 0.004
    assert any("scaled twice" in w for w in report["warnings"])
    with open(str(tmp_path / "run" / "report.md")) as f:
        assert "## Warnings" in f.read()


def test_plausible_digits_have_no_warning(tmp_path):
    cfg, _ = make_case(tmp_path, data={"split": {"train": 0.5, "calib": 0.3, "eval": 0.2}})  # 120 calibration images
    report = pipeline.run(cfg, steps=["calib"], overrides=["model.weights=" + _trained_weights(tmp_path)])
    assert report["steps"]["calib"]["input_stats"]["plausible"] is True
    assert report["warnings"] == []


def test_a_calibration_on_fewer_than_100_samples_warns_with_the_user_guide_s_advice(tmp_path):
    cfg, _ = make_case(tmp_path)  # 40 calibration images
    report = pipeline.run(cfg, steps=["calib"], overrides=["model.weights=" + _trained_weights(tmp_path),
                                                           "data.batch_size=1", "data.calib_batches=3"])
    assert report["steps"]["calib"]["batches"] == 3
    assert [w for w in report["warnings"] if w.startswith(
        "the calibration saw 3 samples: the Vitis AI user guide (UG1414, \"Vitis AI Quantizer Flow\") says the "
        "quantizer generally works well with 100 to 1000 calibration images")], report["warnings"]


def test_a_split_holding_some_classes_only_warns(tmp_path):
    images, labels = digits_u8()
    order = np.argsort(labels[:400], kind="stable")  # a file sorted by label
    cfg, _ = make_case(tmp_path, images=images[:400][order], labels=labels[:400][order],
                       data={"split_order": "contiguous"})
    report = pipeline.run(cfg, steps=["calib"], overrides=["model.weights=" + _trained_weights(tmp_path)])
    told = [w for w in report["warnings"] if w.startswith("the calib split holds ")]
    assert len(told) == 1 and told[0].endswith(": split_order contiguous cuts the file in slices, and its labels are "
                                               "grouped; give data.split_order: shuffled (splits stratified by label)")
    assert [w for w in report["warnings"] if w.startswith("the eval split holds ")]
    with open(str(tmp_path / "run" / "report.md")) as f:
        assert told[0] in f.read()


def test_declared_layout_contradicted_by_the_data_fails_before_any_work(tmp_path):
    images, labels = digits_u8()
    nchw = np.ascontiguousarray(images[:400].transpose(0, 3, 1, 2))      # (400, 1, 8, 8) but declared NHWC
    cfg, npy = make_case(tmp_path, nchw, labels[:400])
    with pytest.raises(DataError, match=r"data.source.layout is NHWC, but the images have shape \(400, 1, 8, 8\)"):
        pipeline.run(cfg)
    assert not (tmp_path / "run").exists()


def test_channel_count_contradicting_mean_std_fails_before_any_work(tmp_path):
    cfg, _ = make_case(tmp_path, preprocess={"mean": [1.0, 2.0, 3.0], "std": [1.0, 1.0, 1.0]})
    with pytest.raises(ConfigError, match="preprocess.mean/std have 3 values but the batch after the stages has 1"):
        pipeline.run(cfg)
    assert not (tmp_path / "run").exists()


def test_missing_data_file_is_named(tmp_path):
    cfg, npy = make_case(tmp_path)
    os.remove(npy)
    with pytest.raises(ConfigError, match="images.npy"):
        pipeline.run(cfg)


# ---------------------------------------------------------------------------- config

def test_net_name_cannot_leave_the_run_folder(tmp_path):
    cfg, _ = make_case(tmp_path)
    with pytest.raises(ConfigError, match="compile.net_name"):
        pipeline.load_config(cfg, ["compile.net_name=../../outside"])


# ---------------------------------------------------------------------------- calib/test mismatch

def test_calib_test_mismatch_is_reported_field_by_field(tmp_path):
    cfg, _ = make_case(tmp_path, quantizer={"require_float_above_chance": False})  # untrained weights
    weights = ["model.weights=" + _trained_weights(tmp_path)]
    pipeline.run(cfg, steps=["calib"], overrides=weights)
    with pytest.raises(FingerprintMismatchError) as err:
        pipeline.run(cfg, steps=["test"], overrides=weights + [
            "quantizer.bitwidth=6",
            "preprocess.stages=[{type: layout, src: NHWC, dst: NCHW}, {type: center_crop, height: 6, width: 6}]"])
    msg = str(err.value)
    assert "bitwidth: calibrated 8, now 6" in msg
    assert "input_shape: calibrated [1, 8, 8], now [1, 6, 6]" in msg
    assert "config.quantizer.bitwidth: calibrated 8, now 6" in msg
    assert "config.preprocess.stages: calibrated" in msg
    assert "config_hash" not in msg and "compile_target" not in msg
    # a change that does not shape the calibration keeps it valid
    report = pipeline.run(cfg, steps=["test"], overrides=weights + ["export.formats=[onnx_exact]"])
    assert report["quant_accuracy"] is not None


# ---------------------------------------------------------------------------- artifacts

@pytest.mark.slow
def test_rerun_gives_byte_identical_artifacts_and_sigkill_during_export_loses_nothing(tmp_path):
    cfg, npy = make_case(tmp_path)
    work = str(tmp_path / "run")
    # 1. a clean run
    proc = cli("--config", cfg)
    assert proc.returncode == 0, proc.stderr[-2000:]
    clean = artifact_hashes(work)
    assert any(p.endswith(".onnx") for p in clean) and "model/float.pt" in clean
    # 2. the same config again from scratch: the same bytes
    import shutil
    shutil.rmtree(work)
    assert cli("--config", cfg).returncode == 0
    assert artifact_hashes(work) == clean
    # 3. kill the export step with SIGKILL while it writes, then rerun
    shutil.rmtree(os.path.join(work, "export"))
    child = subprocess.Popen([sys.executable, "-m", "pipeline", "--config", cfg, "--steps", "export"], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    export_dir = os.path.join(work, "export")
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.isdir(export_dir):
        time.sleep(0.001)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    # whatever is under a final name is complete: it equals the clean run's file
    for name in os.listdir(export_dir) if os.path.isdir(export_dir) else []:
        rel = "export/" + name
        if not name.endswith(".tmp"):
            assert sha(os.path.join(export_dir, name)) == clean[rel], rel
    assert cli("--config", cfg, "--steps", "export,compile,deploy").returncode == 0
    after = artifact_hashes(work)
    assert after == clean
    assert not [f for _, _, files in os.walk(work) for f in files if f.endswith(".tmp")]


def _image_folder(root, corrupt=True):
    from PIL import Image
    rng = np.random.default_rng(0)
    for c in range(2):
        os.makedirs(os.path.join(root, "class%d" % c))
        for i in range(20):
            pixels = rng.integers(0, 256, (10, 10, 3), dtype=np.uint8) // (1 + c)
            Image.fromarray(pixels).save(os.path.join(root, "class%d" % c, "%02d.png" % i))
    if corrupt:
        with open(os.path.join(root, "class1", "zz_truncated.png"), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + b"\x00" * 10)


def _folder_config(tmp_path, **source):
    raw = {"run": {"name": "folder", "work_dir": str(tmp_path / "run")},
           "data": {"source": dict({"type": "image_folder", "root": "imgs", "crop": 8}, **source), "batch_size": 8},
           "preprocess": {"stages": [{"type": "layout", "src": "NHWC", "dst": "NCHW"}],
                          "mean": [128.0] * 3, "std": [64.0] * 3},
           "model": {"zoo": "digits_cnn", "kwargs": {"in_channels": 3, "num_classes": 2}, "train": {"epochs": 1}},
           "quantizer": {"max_accuracy_drop": 1.0, "require_float_above_chance": False}}  # random pixels
    cfg = tmp_path / "folder.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    return str(cfg)


def test_corrupt_image_file_is_named_and_nothing_runs(tmp_path):
    _image_folder(str(tmp_path / "imgs"))
    proc = cli("--config", _folder_config(tmp_path))
    assert proc.returncode == 2
    assert "zz_truncated.png" in proc.stderr
    assert not (tmp_path / "run" / "quantize_result").exists()


def test_corrupt_image_file_skipped_on_request_is_counted_in_the_report(tmp_path):
    _image_folder(str(tmp_path / "imgs"))
    files_before = {f: sha(os.path.join(d, f)) for d, _, fs in os.walk(str(tmp_path / "imgs")) for f in fs}
    proc = cli("--config", _folder_config(tmp_path, skip_corrupt=True), "--steps", "train,calib,test")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipped 1 unreadable image files" in proc.stdout
    with open(str(tmp_path / "run" / "report.json")) as f:
        source = json.load(f)["source"]
    assert source["skipped"] == 1 and source["skipped_files"][0]["file"].endswith("zz_truncated.png")
    assert source["shape"] == [40, 8, 8, 3]
    with open(str(tmp_path / "run" / "report.md")) as f:
        assert "zz_truncated.png" in f.read()
    assert files_before == {f: sha(os.path.join(d, f)) for d, _, fs in os.walk(str(tmp_path / "imgs")) for f in fs}


def test_p05_imagenet_normalization_on_pixels_scaled_twice_is_flagged_per_channel(tmp_path):
    """Three channels with ImageNet mean/std (0..1 units) on data divided by 255 once too often:
    pooled over channels the spread looks healthy, per channel it has collapsed."""
    rng = np.random.default_rng(0)
    images = (rng.integers(0, 256, (120, 8, 8, 3)).astype(np.float32) / 255.0) / 255.0
    labels = rng.integers(0, 10, 120)
    cfg, _ = make_case(tmp_path, images, labels,
                       preprocess={"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
                       model={"zoo": "digits_cnn", "kwargs": {"in_channels": 3}, "train": {"epochs": 1}})
    import torch
    from pipeline.models.zoo import digits_cnn
    torch.save(digits_cnn(in_channels=3).state_dict(), str(tmp_path / "w3.pt"))
    report = pipeline.run(cfg, steps=["calib"], overrides=["model.weights=%s" % (tmp_path / "w3.pt")])
    stats = report["steps"]["calib"]["input_stats"]
    assert stats["plausible"] is False
    assert all(s < 0.05 for s in stats["std"]) and len(stats["std"]) == 3
    assert [w for w in report["warnings"] if "channel(s) [0, 1, 2]" in w]


# ---------------------------------------------------------------------------- run folder

def test_recalibrating_removes_the_results_derived_from_the_old_calibration(tmp_path):
    cfg, _ = make_case(tmp_path)
    run = tmp_path / "run"
    pipeline.run(cfg)
    assert (run / "deploy" / "manifest.json").exists() and (run / "export").exists()
    report = pipeline.run(cfg, steps=["calib"], overrides=["preprocess.mean=[60]"])
    assert not (run / "export").exists() and not (run / "compile").exists() and not (run / "deploy").exists()
    assert not (run / "steps" / "test.json").exists()
    assert report["onnx_agreement"] is None and report["float_accuracy"] is None
    assert not [a for a in report["artifacts"] if a["path"].startswith(("export/", "deploy/", "compile/"))]
    # and a step that needs what was removed says which step to run
    with pytest.raises(pipeline_errors().PipelineError, match="the export step has not run"):
        pipeline.run(cfg, steps=["compile"], overrides=["preprocess.mean=[60]"])


def pipeline_errors():
    import pipeline.errors
    return pipeline.errors


def test_steps_out_of_order_say_which_step_to_run_first(tmp_path):
    cfg, _ = make_case(tmp_path)
    weights = "model.weights=" + _trained_weights(tmp_path)
    for step, missing in [("test", "calib step has"), ("export", "calib step has"),
                          ("deploy", "calib, export and compile steps have")]:  # the whole chain at once
        proc = cli("--config", cfg, "--set", weights, "--steps", step)
        assert proc.returncode == 2
        assert "%s: the %s not run" % (step, missing) in proc.stderr


def test_a_second_run_into_a_busy_work_dir_is_refused(tmp_path):
    cfg, _ = make_case(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pipeline.runner.folder import lock_work_dir; "
                               "h = lock_work_dir(sys.argv[1]); print('locked', flush=True); time.sleep(60)",
                               str(tmp_path / "run")], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = cli("--config", cfg)       # a second run, same folder
        assert proc.returncode == 2
        assert "is in use by another run (pid %d)" % holder.pid in proc.stderr
    finally:
        holder.kill()
        holder.wait()
    assert cli("--config", cfg, "--steps", "train").returncode == 0   # the lock died with its holder


def test_a_busy_work_dir_is_refused_before_the_source_is_read(tmp_path):
    """The folder is probed first: a run into a busy folder waits for no decoding (here the source is not
    even readable: the refusal names the busy folder, not the source)."""
    cfg, images = make_case(tmp_path)
    with open(images, "wb") as f:
        f.write(b"not an npy file")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pipeline.runner.folder import lock_work_dir; "
                               "h = lock_work_dir(sys.argv[1]); print('locked', flush=True); time.sleep(60)",
                               str(tmp_path / "run")], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = cli("--config", cfg)
        assert proc.returncode == 2
        assert "is in use by another run (pid %d)" % holder.pid in proc.stderr, proc.stderr
    finally:
        holder.kill()
        holder.wait()


def test_a_work_dir_that_is_a_file_is_a_clear_error(tmp_path):
    cfg, _ = make_case(tmp_path)
    (tmp_path / "afile").write_text("x")
    proc = cli("--config", cfg, "--set", "run.work_dir=%s" % (tmp_path / "afile"))
    assert proc.returncode == 2 and "cannot be used as the run folder" in proc.stderr


def test_a_failed_step_is_named_in_the_report(tmp_path):
    cfg, _ = make_case(tmp_path, quantizer={"max_accuracy_drop": 0.0, "bitwidth": 3})
    proc = cli("--config", cfg)
    assert proc.returncode == 2
    with open(str(tmp_path / "run" / "report.json")) as f:
        status = json.load(f)["status"]
    assert status["state"] == "failed" and status["step"] == "test" and "QuantizationError" in status["error"]
    with open(str(tmp_path / "run" / "report.md")) as f:
        assert "**FAILED at step `test`**" in f.read()


def test_labels_beyond_the_model_outputs_are_a_clear_error(tmp_path):
    cfg, _ = make_case(tmp_path, model={"zoo": "digits_cnn", "kwargs": {"num_classes": 5}, "train": {"epochs": 1}})
    with pytest.raises(DataError, match="labels run from 0 to 9 but the model has 5 outputs"):
        pipeline.run(cfg)


def test_misspelt_model_kwarg_is_a_config_error(tmp_path):
    cfg, _ = make_case(tmp_path)
    with pytest.raises(ConfigError, match=r"model.kwargs \{'num_clases': 10\} do not fit digits_cnn"):
        pipeline.run(cfg, overrides=["model.kwargs.num_clases=10"])


def test_empty_eval_split_is_refused_before_any_work(tmp_path):
    cfg, _ = make_case(tmp_path, data={"split": {"train": 0.8, "calib": 0.2, "eval": 0.0}})
    with pytest.raises(DataError, match="the test step needs the eval split, which is empty"):
        pipeline.run(cfg)
    assert not (tmp_path / "run" / "model").exists()


def test_arch_json_of_another_dpu_fails_before_any_work(tmp_path):
    """P11 through the runner: the fingerprint is checked before training, not after export."""
    arch = tmp_path / "arch.json"
    arch.write_text('{"fingerprint": "0x101000016010407"}')       # the 2.5 release's B4096
    cfg, _ = make_case(tmp_path, compile={"arch_json": "arch.json"})
    proc = cli("--config", cfg)
    assert proc.returncode == 2
    assert "0x0101000016010407" in proc.stderr and "DPUCZDX8G_ISA1_B4096" in proc.stderr
    assert not (tmp_path / "run" / "model").exists()


def test_strict_types_no_silent_coercion(tmp_path):
    cfg, _ = make_case(tmp_path)
    with pytest.raises(ConfigError, match="data.batch_size: Input should be a valid integer"):
        pipeline.load_config(cfg, ["data.batch_size=true"])
    with pytest.raises(ConfigError, match="export.verify_max_lsb.*did you mean 'onnx_qdq'"):
        pipeline.load_config(cfg, ["export.verify_max_lsb={onnx_qdd: 0}"])
    with pytest.raises(ConfigError, match="quantizer.target DPUCVDX8G_ISA3_C32B3 differs from compile.target"):
        pipeline.load_config(cfg, ["quantizer.target=DPUCVDX8G_ISA3_C32B3"])
    with pytest.raises(ConfigError, match="mean and std must be finite"):
        pipeline.load_config(cfg, ["preprocess.mean=[.nan]"])
    with pytest.raises(ConfigError, match="model.zoo: expected one of"):
        pipeline.load_config(cfg, ["model.zoo=resnet19"])


def test_p09_leaky_relu_slope_change_is_shown_in_the_report(tmp_path):
    cfg, _ = make_case(tmp_path, model={"zoo": None, "factory": "tests.support.leaky_model:leaky_cnn",
                                        "train": {"epochs": 1}},
                       quantizer={"require_float_above_chance": False})  # one epoch: near chance
    report = pipeline.run(cfg, steps=["train", "inspect", "calib", "test"])
    with open(str(tmp_path / "run" / "report.md")) as f:
        md = f.read()
    assert "0.1015625" in md and "26/256" in md
    assert any("0.1015625" in change for change in report["quantizer_changes"])


def test_a_source_without_labels_cannot_be_trained_or_tested(tmp_path):
    cfg, _ = make_case(tmp_path)
    images, _ = digits_u8()
    with pytest.raises(DataError, match="train: the source has no labels"):
        pipeline.run(cfg, steps=["train"], images=images[:300])
    weights = ["model.weights=" + _trained_weights(tmp_path)]
    with pytest.raises(DataError, match="test: the source has no labels"):   # calib needs none
        pipeline.run(cfg, steps=["calib", "test"], images=images[:300], overrides=weights)
    assert (tmp_path / "run" / "quantize_result" / "quant_info.json").exists()


# ---- ownership: the run folder holds what the pipeline wrote, and it removes only that -----------

def test_a_user_folder_named_as_the_run_folder_is_refused_and_left_unchanged(tmp_path):
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    project = tmp_path / "project"
    (project / "model").mkdir(parents=True)
    (project / "model" / "mine.pt").write_text("the user's weights")
    (project / "export").mkdir()
    (project / "notes.txt").write_text("keep")
    before = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    with pytest.raises(PipelineError, match="already holds files the pipeline did not write"):
        pipeline.run(cfg, steps=["train"], overrides=["run.work_dir=" + str(project)])
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*")) == before  # no lock, no mark
    assert (project / "model" / "mine.pt").read_text() == "the user's weights"


def test_an_empty_folder_is_claimed_and_a_file_put_next_to_the_results_survives_a_rerun(tmp_path):
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    work = tmp_path / "run"
    work.mkdir()
    pipeline.run(cfg, steps=["train"])
    assert (work / ".pipeline-run").is_file()
    with open(str(work / "steps" / "train.files.json")) as f:
        assert json.load(f) == {"files": [os.path.join("model", "float.pt")]}
    (work / "model" / "notes.txt").write_text("mine")
    pipeline.run(cfg, steps=["train"])  # invalidation removes float.pt (recorded), not notes.txt
    assert (work / "model" / "notes.txt").read_text() == "mine" and (work / "model" / "float.pt").is_file()


def test_a_hand_edited_record_cannot_remove_files_outside_the_run_folder(tmp_path):
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    pipeline.run(cfg, steps=["train"])
    outside = tmp_path / "precious.txt"
    outside.write_text("keep")
    record = tmp_path / "run" / "steps" / "train.files.json"
    record.write_text(json.dumps({"files": ["../precious.txt", str(outside), "model/float.pt"]}))
    pipeline.run(cfg, steps=["train"])
    assert outside.read_text() == "keep"


def test_a_run_folder_from_before_the_mark_is_refused_not_adopted(tmp_path):
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    pipeline.run(cfg, steps=["train"])
    work = tmp_path / "run"
    os.remove(str(work / ".pipeline-run"))  # as an earlier version left it: status.json and steps/
    with pytest.raises(PipelineError, match="not adopted"):  # its shape proves nothing (tests/run/test_run_folder_state.py)
        pipeline.run(cfg, steps=["train"])
    assert not (work / ".pipeline-run").exists()


# ---- the split: the same rows in every process, whatever the order of the keys -------------------

def _rows(cfg_path, overrides=()):
    from pipeline.config import load_config
    from pipeline.runner.folder import RunDir
    from pipeline.steps.context import StepContext
    loaded = load_config(str(cfg_path), list(overrides))
    run = StepContext(loaded, RunDir(loaded))
    return {part: np.asarray(rows).tolist() for part, rows in run.feed.splits.items()}, run.feed.rows_sha256()


def test_the_split_does_not_depend_on_the_order_of_its_keys_nor_on_the_resolved_config(tmp_path):
    cfg, _ = make_case(tmp_path)
    with open(cfg) as f:
        raw = yaml.safe_load(f)
    raw["data"]["split"] = {"train": 0.6, "calib": 0.1, "eval": 0.3}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    raw["data"]["split"] = {"eval": 0.3, "calib": 0.1, "train": 0.6}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    rows_a, sha_a = _rows(tmp_path / "a.yaml")
    rows_b, sha_b = _rows(tmp_path / "b.yaml")
    assert rows_a == rows_b and sha_a == sha_b
    assert [len(rows_a[p]) for p in ("train", "calib", "eval")] == [240, 40, 120]  # 400 rows cut train first
    # what a child process of the run reads: config.resolved.yaml, written with sorted keys
    pipeline.run(str(tmp_path / "a.yaml"), steps=["train"])
    rows_c, sha_c = _rows(tmp_path / "run" / "config.resolved.yaml")
    assert rows_c == rows_a and sha_c == sha_a


def test_a_child_process_that_would_cut_other_rows_refuses_to_run(tmp_path, monkeypatch):
    from pipeline.runner.driver import ROWS_ENV
    from pipeline.runner.status import LOCK_ENV
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "run"))
    monkeypatch.setenv(ROWS_ENV, "0" * 64)
    with pytest.raises(PipelineError, match="other train/calib/eval rows than the run that started it"):
        pipeline.run(cfg, steps=["train"])


def test_status_of_a_mistyped_folder_is_an_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "status", str(tmp_path / "no_such_run")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 2 and "not a run folder" in proc.stderr


def test_nan_weights_are_refused_at_load_naming_the_tensor(tmp_path):
    from pipeline.models.loading import load_state_dict_file
    state = {"fc.weight": torch.ones(2, 3), "fc.bias": torch.tensor([0.0, float("nan")])}
    torch.save(state, str(tmp_path / "w.pt"))
    with pytest.raises(PipelineError, match=r"NaN or Inf values in fc.bias \(1 of 2\)"):
        load_state_dict_file(str(tmp_path / "w.pt"))


def test_training_that_diverges_is_refused_and_saves_nothing(tmp_path):
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 2, "lr": 1e30}})
    with pytest.raises(DataError, match="training diverged"):
        pipeline.run(cfg, steps=["train"])
    assert not (tmp_path / "run" / "model" / "float.pt").exists()


def test_a_status_json_that_is_not_an_object_reads_as_unknown_and_the_next_run_goes_on(tmp_path):
    from pipeline.runner.status import read_status
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    pipeline.run(cfg, steps=["train"])
    (tmp_path / "run" / "status.json").write_text("[1, 2, 3]")
    status = read_status(str(tmp_path / "run"))
    assert status["state"] == "unknown" and "expected the run's status (a JSON object), found a list" in status["error"]
    assert pipeline.run(cfg, steps=["train"])["status"]["state"] == "ok"
