"""Every hand-off between steps is checked (issue 34, round four): a file one step wrote and a later one
reads is recorded with its sha256 in the writer's steps/<step>.json (``handed_on``), and the reader
refuses it when it was truncated, emptied, corrupted (one byte flipped) or replaced by another model's,
naming the file, the recorded and the found sha256 and the step to run again; a refused deploy leaves
no bundle."""
import json
import os
import shutil

import pytest

from tests.support import REPO, cli, make_case

import pipeline
from pipeline.errors import HandoffError, QuantizationError

XMODEL = "export/DigitsCNN_int.xmodel"
FOREIGN = os.path.join(REPO, "tests", "data", "golden_xmodel", "golden", "mlp", "default", "xmodel", "MLP_int.xmodel")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A run folder through train, calib, export, compile (the plan: no vai_c_xir here) and deploy."""
    base = tmp_path_factory.mktemp("handoff")
    config, _ = make_case(base, model={"train": {"epochs": 1}})
    report = pipeline.run(config, steps=["train", "calib", "export", "compile", "deploy"])
    # the case's npy source names no classes: the bundle says so, and the summary has the bundle's line
    assert [w for w in report["warnings"] if w.startswith("deploy: the bundle has no class names (words.txt): none: "
                                                          "the source names no classes; set data.source.class_names")]
    assert [line for line in report["summary"] if line.startswith("deploy bundle ") and
            line.endswith(": quantized DigitsCNN_int.xmodel + compile plan, prototxt, preprocess.json; inputs "
                          "checked by sha256")], report["summary"]
    return config, str(base / "run")


@pytest.fixture
def run(made, tmp_path):
    """A copy of the made run folder and a function running steps of the config on it."""
    config, base = made
    work = str(tmp_path / "run")
    shutil.copytree(base, work)

    def steps(*names):
        return pipeline.run(config, steps=list(names), overrides=["run.work_dir=" + work])
    return work, steps


def _damage(path, how):
    with open(path, "rb") as f:
        data = f.read()
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "empty":
        data = b""
    elif how == "one byte flipped":
        data = data[:len(data) // 3] + bytes([data[len(data) // 3] ^ 0x01]) + data[len(data) // 3 + 1:]
    elif how == "another model's":
        with open(FOREIGN, "rb") as f:
            data = f.read()
    with open(path, "wb") as f:
        f.write(data)


def _no_bundle(work):
    assert not os.path.exists(os.path.join(work, "deploy", "manifest.json"))
    assert not [n for n in os.listdir(work) if n.startswith(".deploy")], "a temporary bundle was left behind"


def test_each_step_records_the_files_it_hands_on(made):
    _, work = made
    steps = {}
    for name in ("train", "export", "compile"):
        with open(os.path.join(work, "steps", name + ".json")) as f:
            steps[name] = json.load(f)["handed_on"]
    assert sorted(steps["train"]) == ["model/float.pt"]
    assert sorted(steps["export"]) == ["export/DigitsCNN_int.onnx", XMODEL, "export/DigitsCNN_int_exact.onnx",
                                       "export/example_input.npy"]
    assert sorted(steps["compile"]) == ["compile/compile.sh", "compile/compile_plan.md"]
    import hashlib
    for record in steps.values():
        for rel, digest in record.items():
            with open(os.path.join(work, rel), "rb") as f:
                data = f.read()
            assert digest == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    with open(os.path.join(work, "deploy", "manifest.json")) as f:
        manifest = json.load(f)
    assert all(s["checked"] for s in manifest["sources"]) and len(manifest["sources"]) == 3


@pytest.mark.parametrize("how, found", [
    ("truncated", r"it has (\d+) bytes, \1 fewer than written \(truncated\)"),
    ("empty", r"it is empty \(0 bytes\)"),
    ("one byte flipped", "it has the same size but other bytes"),
    ("another model's", r"it has 11082 bytes, \d+ fewer than written"),
])
def test_a_damaged_exported_xmodel_is_refused_by_compile_and_no_bundle_is_made(run, how, found):
    work, steps = run
    _damage(os.path.join(work, XMODEL), how)
    with pytest.raises(HandoffError, match=r"compile: export/DigitsCNN_int\.xmodel is not the file the export step "
                                           r"wrote: the record in steps/export\.json says sha256 [0-9a-f]{64} "
                                           r"\(\d+ bytes\), but " + found + r".*Run the export step again: "
                                           r"--steps export,compile,deploy"):
        steps("compile", "deploy")
    _no_bundle(work)


@pytest.mark.parametrize("how", ["truncated", "one byte flipped", "another model's"])
def test_deploy_alone_refuses_a_damaged_xmodel_and_writes_no_bundle(run, how):
    work, steps = run
    _damage(os.path.join(work, XMODEL), how)
    with pytest.raises(HandoffError, match=r"deploy: export/DigitsCNN_int\.xmodel is not the file the export step "
                                           r"wrote"):
        steps("deploy")
    _no_bundle(work)


@pytest.mark.parametrize("rel, writer", [("compile/compile.sh", "compile"), ("compile/compile_plan.md", "compile"),
                                         ("export/example_input.npy", "export")])
def test_deploy_refuses_every_other_file_it_reads(run, rel, writer):
    work, steps = run
    with open(os.path.join(work, rel), "ab") as f:
        f.write(b"\n# edited\n")
    with pytest.raises(HandoffError, match=r"deploy: %s is not the file the %s step wrote: .* more than written"
                                           % (rel.replace(".", r"\."), writer)):
        steps("deploy")
    _no_bundle(work)


def test_deploy_refuses_a_changed_calibration(run):
    work, steps = run
    path = os.path.join(work, "quantize_result", "quant_info.json")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("[[8,6]]", "[[8,5]]", 1))
    with pytest.raises(QuantizationError, match="quant_info.json is not the file the calibration wrote"):
        steps("deploy")
    _no_bundle(work)


@pytest.mark.parametrize("steps_run", [("compile", "deploy"), ("deploy",)])
@pytest.mark.parametrize("override, key", [("preprocess.mean=[0.0]", "config.preprocess.mean: calibrated [77.85], "
                                                                      "now [0.0]"),
                                           ("model.zoo=mobilenet_v2", "config.model.zoo: calibrated 'digits_cnn', now "
                                                                       "'mobilenet_v2'")])
def test_compile_and_deploy_refuse_a_config_the_calibration_was_not_made_under(made, run, steps_run, override, key):
    """The bundle carries this config's preprocessing beside the model the export made from the calibration: a
    changed preprocessing or model is refused by name, and no bundle is made."""
    config, _ = made
    work, _ = run
    with pytest.raises(QuantizationError) as err:
        pipeline.run(config, steps=list(steps_run), overrides=["run.work_dir=" + work, override])
    message = str(err.value)
    assert key in message and "was made for something else" in message
    assert "Run the calib step again, and the steps after it" in message
    _no_bundle(work)


def test_trained_weights_changed_after_training_are_refused_by_the_next_step(run):
    work, steps = run
    _damage(os.path.join(work, "model", "float.pt"), "one byte flipped")
    with pytest.raises(HandoffError, match=r"model/float\.pt is not the file the train step wrote.*Run the train "
                                           r"step again"):
        steps("calib")


def test_a_record_without_checksums_is_refused_not_trusted(run):
    work, steps = run
    path = os.path.join(work, "steps", "export.json")
    with open(path) as f:
        result = json.load(f)
    del result["handed_on"]
    with open(path, "w") as f:
        json.dump(result, f)
    with pytest.raises(HandoffError, match=r"the export step recorded no checksum of export/DigitsCNN_int\.xmodel"):
        steps("compile")


def test_a_foreign_xmodel_with_a_forged_record_is_caught_by_the_xmodel_check(run):
    """The sha256 catches a replaced file; the read-back check catches another model's xmodel even when
    its record was forged to match: the graph, its input shape and its input fix_pos are compared."""
    work, steps = run
    shutil.copyfile(FOREIGN, os.path.join(work, XMODEL))
    path = os.path.join(work, "steps", "export.json")
    with open(path) as f:
        result = json.load(f)
    from pipeline.handoff import digest_of
    result["handed_on"][XMODEL] = digest_of(os.path.join(work, XMODEL))
    with open(path, "w") as f:
        json.dump(result, f)
    with pytest.raises(HandoffError, match=r"export/DigitsCNN_int\.xmodel is not this model's quantized xmodel "
                                           r"\(its graph is 'MLP', not 'DigitsCNN': the xmodel of another model; its "
                                           r"input is \[1, 3, 4, 4\], not the model input \[1, 8, 8, 1\]"):
        steps("deploy")
    _no_bundle(work)


def test_the_command_line_says_it_in_one_line_and_exits_2(run):
    work, _ = run
    _damage(os.path.join(work, XMODEL), "truncated")
    proc = cli("run", _config_of(work), "--steps", "compile,deploy", "--set", "run.work_dir=" + work)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "export/DigitsCNN_int.xmodel is not the file the export step wrote" in errors[0]
    _no_bundle(work)


def _config_of(work):
    with open(os.path.join(work, "config.resolved.yaml")) as f:
        import yaml
        raw = yaml.safe_load(f)
    path = os.path.join(os.path.dirname(work), "resolved.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(raw, f)
    return path


@pytest.fixture
def fake_compiler(tmp_path, monkeypatch):
    from tests.support import fake_vai_c
    return fake_vai_c.install(tmp_path, monkeypatch)[1]


def test_the_compiled_xmodel_is_recorded_and_checked_by_deploy(made, tmp_path, fake_compiler):
    config, base = made
    work = str(tmp_path / "run")
    shutil.copytree(base, work)
    overrides = ["run.work_dir=" + work, "compile.arch_json=" + fake_compiler]
    pipeline.run(config, steps=["compile", "deploy"], overrides=overrides)
    with open(os.path.join(work, "steps", "compile.json")) as f:
        assert sorted(json.load(f)["handed_on"]) == ["compile/case.xmodel"]
    from tests.support.fake_vai_c import B4096_ARCH, compiled_xmodel
    with open(os.path.join(work, "export", "DigitsCNN_int.xmodel"), "rb") as f:
        expected = compiled_xmodel(f.read(), int(B4096_ARCH["fingerprint"], 16))
    with open(os.path.join(work, "deploy", "case", "case.xmodel"), "rb") as f:
        assert f.read() == expected
    _damage(os.path.join(work, "compile", "case.xmodel"), "one byte flipped")
    with pytest.raises(HandoffError, match=r"deploy: compile/case\.xmodel is not the file the compile step wrote: .*"
                                           r"Run the compile step again: --steps compile,deploy"):
        pipeline.run(config, steps=["deploy"], overrides=overrides)
    _no_bundle(work)


def test_a_model_of_two_outputs_is_bundled_without_the_classification_model_type(tmp_path):
    """The Vitis AI Library's CLASSIFICATION reads one score vector: a model returning a tuple gets a prototxt
    with no model_type, and a warning saying why and what to do."""
    import torch
    from tests.support.two_heads import two_heads
    torch.manual_seed(0)
    weights = str(tmp_path / "two.pt")
    torch.save(two_heads().state_dict(), weights)
    config, _ = make_case(tmp_path, model={"zoo": None, "factory": "tests.support.two_heads:two_heads",
                                           "weights": weights}, export={"formats": ["xmodel"]})
    report = pipeline.run(config, steps=["calib", "export", "compile", "deploy"])
    with open(str(tmp_path / "run" / "deploy" / "case" / "case.prototxt")) as f:
        prototxt = f.read()
    assert "model_type" not in prototxt and "classification_param" not in prototxt and "mean: " in prototxt
    assert [w for w in report["warnings"] if w.startswith(
        "deploy: the model's xmodel has 2 outputs ([1, 10], [1, 8, 8, 8]), not one [1, classes] tensor: the "
        "prototxt names no model_type")], report["warnings"]

