"""The main job end to end, through the command line as users run it, and through the Python API."""
import json
import os

import numpy as np
import pytest

from tests.support import REPO, cli, digits_u8, python

import pipeline
from pipeline.tensors import fingerprint_array

CONFIG = os.path.join(REPO, "configs", "digits_sim_zcu102.yaml")


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("main") / "run")
    proc = python("scripts/run_pipeline.py", "--config", CONFIG, "--set", "run.work_dir=" + work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(work, "report.json")) as f:
        return work, proc, json.load(f)


@pytest.mark.slow
def test_main_job_meets_the_accuracy_goals_and_prints_them(main_job):
    work, proc, report = main_job
    assert report["float_accuracy"] >= 0.95
    assert report["float_accuracy"] - report["quant_accuracy"] <= 0.01
    assert report["eval_images"] == 540            # 30% of 1,797 digits
    assert "float accuracy %.4f, quant accuracy %.4f" % (report["float_accuracy"], report["quant_accuracy"]) \
        in proc.stdout


@pytest.mark.slow
def test_main_job_ledger_one_copy_per_batch_and_every_stage_a_view(main_job):
    _, _, report = main_job
    ledger = report["ledger"]
    assert ledger["copies_per_batch"] == 1
    stage_rows = [r for r in ledger["stages"] if r["stage"] != "quantizer_boundary"]
    [boundary] = [r for r in ledger["stages"] if r["stage"] == "quantizer_boundary"]
    assert {r["stage"] for r in stage_rows} == {"reshape", "layout", "center_crop"}
    assert ledger["batches"] == 6   # 179 calibration images in batches of 32
    assert all(r["views"] == r["batches"] == 6 and r["copies"] == r["bytes_allocated"] == 0 for r in stage_rows)
    assert boundary["copies"] == boundary["batches"] == 6 and boundary["views"] == 0
    # 32 images x 1 x 8 x 8 float32 = 8192 bytes; the split is 1078 train, 179 calib, 540 eval,
    # so the last calibration batch holds 179 - 5 * 32 = 19 images
    assert boundary["bytes_allocated"] == 5 * 8192 + 19 * 64 * 4 and ledger["bytes_allocated_per_batch"] == 8192


@pytest.mark.slow
def test_main_job_onnx_agreement_and_artifacts(main_job):
    work, _, report = main_job
    assert report["onnx_agreement"]["onnx_exact"]["max_abs_diff"] == 0
    qdq = report["onnx_agreement"]["onnx_qdq"]
    # exact check: the qdq file equals the half-to-even simulation in ONNX Runtime (optimizations off);
    # its difference from the simulation (default optimizations) is reported and warned about past 1 LSB
    assert qdq["reference_mismatches"] == 0 and qdq["ort_optimizations"] == "all"
    warned = [w for w in report["warnings"] if w.startswith("onnx_qdq differs from the simulation")]
    assert len(warned) == (1 if qdq["max_diff_lsb"] > 1 else 0)
    with open(os.path.join(work, "report.md")) as f:
        assert ("onnx_qdq differs from the simulation" in f.read()) == bool(warned)
    paths = {a["path"]: a for a in report["artifacts"]}
    for expected in ["model/float.pt", "quantize_result/quant_info.json", "quantize_result/calib_fingerprint.json",
                     "export/DigitsCNN_int_exact.onnx", "export/DigitsCNN_int.onnx", "export/DigitsCNN_int.xmodel",
                     "compile/compile.sh", "deploy/manifest.json", "deploy/digits_sim_zcu102/DigitsCNN_int.xmodel"]:
        assert expected in paths, expected
    # the xmodel: written, read back and checked, run against the simulation bit for bit
    x = report["xmodel"]
    assert x["path"] == "export/DigitsCNN_int.xmodel" and x["check"] == "ok"
    assert x["elements"] == 10 and x["mismatches"] == 0 and x["ops"] > 0 and x["fix_ops"] > 0
    assert paths["deploy/digits_sim_zcu102/DigitsCNN_int.xmodel"]["sha256"] == paths["export/DigitsCNN_int.xmodel"]["sha256"]
    import hashlib
    with open(os.path.join(work, "quantize_result/quant_info.json"), "rb") as f:
        assert paths["quantize_result/quant_info.json"]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert report["versions"]["torch"] and report["versions"]["onnxruntime"]
    assert report["source"]["unchanged"] is True


@pytest.mark.slow
def test_main_job_writes_quant_info_in_the_real_format(main_job):
    work, _, _ = main_job
    with open(os.path.join(work, "quantize_result", "quant_info.json")) as f:
        info = json.load(f)
    assert {"param", "output", "input", "fast_finetuned", "bias_corrected", "version", "graph_md5"} <= set(info)
    assert info["output"]["DigitsCNN::nndct_input_0"][0][0] == 8
    assert all(len(v) == 1 and v[0][0] == 8 and -10 < v[0][1] <= 12 for v in info["param"].values())


@pytest.mark.slow
def test_main_job_compile_plan_says_the_image_is_needed(main_job):
    work, proc, report = main_job
    assert report["compile"]["compiled"] is None
    assert "compiling needs the Vitis AI image" in proc.stdout
    with open(os.path.join(work, "compile", "compile.sh")) as f:
        script = f.read()
    assert "vai_c_xir" in script and "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json" in script
    # the run folder's own paths relative to the script's folder: a moved folder compiles as it is
    assert "xmodel=../export/DigitsCNN_int.xmodel\n" in script and os.path.abspath(work) not in script
    assert "xmodel %s written and verified" % os.path.join(work, "export", "DigitsCNN_int.xmodel") in proc.stdout
    with open(os.path.join(work, "compile", "compile_plan.md")) as f:
        assert "It is there: only the compile step is left" in f.read()


@pytest.mark.slow
def test_steps_run_in_separate_processes_read_the_run_folder(main_job, tmp_path):
    work = str(tmp_path / "run")
    weights = os.path.join(main_job[0], "model", "float.pt")
    common = ["--config", CONFIG, "--set", "run.work_dir=" + work, "--set", "model.weights=" + weights]
    for steps in ["calib", "test", "export,compile,deploy"]:
        proc = cli("run", *common, "--steps", steps)
        assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(work, "report.json")) as f:
        report = json.load(f)
    # same weights, same calibration data: the same numbers as the all-in-one run
    assert report["quant_accuracy"] == main_job[2]["quant_accuracy"]
    with open(os.path.join(work, "quantize_result", "quant_info.json")) as a, \
            open(os.path.join(main_job[0], "quantize_result", "quant_info.json")) as b:
        assert a.read() == b.read()


def test_test_step_without_calibration_is_a_clear_error(tmp_path):
    proc = cli("--config", CONFIG, "--set", "run.work_dir=" + str(tmp_path / "r"),
               "--steps", "test", "--set", "model.weights=" + str(tmp_path / "none.pt"))
    assert proc.returncode == 2
    assert "model.weights" in proc.stderr and "does not exist" in proc.stderr


@pytest.mark.parametrize("entry", [["scripts/run_pipeline.py", "--help"], ["-m", "pipeline", "--help"],
                                   ["-m", "pipeline", "run", "--help"]])
def test_help(entry):
    proc = python(*entry)
    assert proc.returncode == 0
    assert "--config" in proc.stdout or "run" in proc.stdout


def test_misspelt_key_fails_before_any_work_with_exit_code_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    with open(CONFIG) as f:
        bad.write_text(f.read().replace("calib_batches:", "calib_batchs:"))
    work = tmp_path / "never"
    proc = python("scripts/run_pipeline.py", "--config", str(bad), "--set", "run.work_dir=%s" % work)
    assert proc.returncode == 2
    assert "data.calib_batchs: unknown key" in proc.stderr and "did you mean 'calib_batches'?" in proc.stderr
    assert not work.exists()   # nothing ran, nothing was written


def test_unknown_step_is_rejected():
    proc = cli("--config", CONFIG, "--steps", "calib,quantize")
    assert proc.returncode == 2 and "unknown steps ['quantize']" in proc.stderr


@pytest.mark.slow
def test_callers_array_is_bit_identical_after_every_step(tmp_path):
    """P08 through the whole runner: a writable array, every step, a quantizer that would round in place."""
    images, labels = digits_u8()
    images.setflags(write=True)
    before = fingerprint_array(images)
    copy = images.copy()
    report = pipeline.run(CONFIG, overrides=["run.work_dir=%s" % (tmp_path / "r"), "model.train.epochs=3",
                                             "quantizer.max_accuracy_drop=1"],
                          images=images, labels=labels)
    assert fingerprint_array(images) == before
    assert np.array_equal(images, copy)
    assert report["source"]["unchanged"] is True
    assert report["ledger"]["copies_per_batch"] == 1


@pytest.mark.slow
def test_main_job_reports_per_layer_sensitivity_with_plots(main_job):
    work, _, report = main_job
    rows = report["sensitivity"]
    assert [r["node"] for r in rows][0] == "nndct_input_0"
    assert [r["float_node"] for r in rows] == ["x", "relu1", "relu2", "pool", "relu3", "gap", "fc"]
    for r in rows:
        assert 20 < float(r["sqnr_db"]) < 80 and 0.99 < r["cosine"] <= 1.0
    with open(os.path.join(work, "report.md")) as f:
        md = f.read()
    assert "## Per-layer sensitivity" in md and "| nndct_dense_10 | fc |" in md
    for name in ("sensitivity", "activation_ranges"):
        path = os.path.join(work, report["plots"][name])
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert "](%s)" % report["plots"][name] in md
