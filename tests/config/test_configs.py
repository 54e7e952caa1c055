"""Every shipped config validates; the image-folder scenarios run end to end on the sample folder."""
import glob
import hashlib
import importlib.util
import json
import os

import numpy as np
import pytest

from tests.support import REPO

import pipeline
from pipeline.targets import get_target
from pipeline.config import load_config

CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))
KV260 = os.path.join(REPO, "configs", "imagefolder_sim_kv260.yaml")
VEK280 = os.path.join(REPO, "configs", "resnet18_sim_vek280.yaml")
SAMPLE_ROOT = os.path.join(REPO, "data", "sample_images")  # where the configs' comments tell users to write it


def _sample_script():
    spec = importlib.util.spec_from_file_location("make_sample_images",
                                                  os.path.join(REPO, "scripts", "make_sample_images.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree_hashes(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_the_configs_folder_holds_the_scenarios():
    names = [os.path.basename(p) for p in CONFIGS]
    assert {"digits_sim_zcu102.yaml", "imagefolder_sim_kv260.yaml", "resnet18_sim_vek280.yaml"} <= set(names)


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_every_config_loads_and_validates(path):
    loaded = load_config(path)
    assert loaded.cfg.run.name == os.path.splitext(os.path.basename(path))[0]   # run name = file name
    get_target(loaded.cfg.compile.target)
    assert len(loaded.cfg.preprocess.mean) == len(loaded.cfg.preprocess.std)


def test_image_folder_configs_point_at_the_documented_sample_folder():
    classes = len(_sample_script().CLASSES)
    for path in (KV260, VEK280):
        loaded = load_config(path)
        with open(path) as f:
            text = f.read()
        assert "python scripts/make_sample_images.py --out data/sample_images" in text
        source = loaded.absolute_raw()["data"]["source"]
        assert source["type"] == "image_folder" and source["root"] == SAMPLE_ROOT
        assert loaded.cfg.model.kwargs["num_classes"] == classes
        assert loaded.cfg.model.weights is None                    # the dry run trains first
    kv = load_config(KV260).cfg
    assert kv.compile.target == "DPUCZDX8G_ISA1_B4096" and "KV260" in get_target(kv.compile.target).boards
    assert kv.model.zoo == "digits_cnn" and kv.model.kwargs["in_channels"] == 3
    vek = load_config(VEK280).cfg
    assert vek.compile.target == "DPUCV2DX8G_ISA1_C20B14" and "VEK280" in get_target(vek.compile.target).boards
    assert get_target(vek.compile.target).arch_json == "/opt/vitis_ai/compiler/arch/DPUCV2DX8G/VEK280/arch.json"
    assert vek.model.zoo == "resnet18" and vek.data.source["crop"] == 224 and vek.data.source["resize"] == 256


# ----------------------------------------------------------------------------- the sample folder

@pytest.fixture(scope="module")
def sample_folder(tmp_path_factory):
    pytest.importorskip("skimage.data", reason="scikit-image is not installed (pip install -e '.[samples]')")
    out = str(tmp_path_factory.mktemp("samples") / "sample_images")
    written = _sample_script().make_sample_images(out, per_class=20, seed=0)
    return out, written


def test_sample_script_writes_a_deterministic_imagenet_style_folder(sample_folder, tmp_path):
    out, written = sample_folder
    script = _sample_script()
    assert sorted(written) == sorted(script.CLASSES) and all(len(v) == 20 for v in written.values())
    again = str(tmp_path / "again")
    script.make_sample_images(again, per_class=20, seed=0)
    assert _tree_hashes(again) == _tree_hashes(out)                 # same seed, same bytes
    other = str(tmp_path / "other")
    script.make_sample_images(other, per_class=20, seed=1)
    assert _tree_hashes(other) != _tree_hashes(out)
    from PIL import Image
    formats, shorter = set(), []
    for cls, files in written.items():
        for rel in files:
            with Image.open(os.path.join(out, rel)) as im:
                formats.add(im.format)
                shorter.append(min(im.size))
                assert im.mode == "RGB"
    assert formats == {"JPEG", "PNG"} and 224 <= min(shorter) and max(shorter) <= 320
    assert len(set(shorter)) > 10                                  # mixed sizes, like real data
    with pytest.raises(SystemExit, match="already exists"):
        script.make_sample_images(again, per_class=2)
    script.make_sample_images(again, per_class=2, force=True)      # its own folder: replaced
    assert sorted(len(v) for v in _tree_by_class(again).values()) == [2] * len(script.CLASSES)
    os.makedirs(str(tmp_path / "theirs"))
    with pytest.raises(SystemExit, match="already exists"):
        script.make_sample_images(str(tmp_path / "theirs"), per_class=2, force=True)   # not written by it
    assert not [n for n in os.listdir(str(tmp_path)) if n.endswith(".partial")]


def _tree_by_class(root):
    return {d: os.listdir(os.path.join(root, d)) for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}


# ----------------------------------------------------------------------------- the scenarios, end to end

def _run(config, sample, work, overrides):
    out, _ = sample
    before = _tree_hashes(out)
    report = pipeline.run(config, overrides=["run.work_dir=" + work, "data.source.root=" + out] + overrides)
    assert _tree_hashes(out) == before                             # the sample files are never written
    return report


@pytest.mark.slow
def test_kv260_image_folder_scenario_end_to_end(sample_folder, tmp_path):
    work = str(tmp_path / "kv260")
    report = _run(KV260, sample_folder, work, ["data.source.limit_per_class=16", "model.train.epochs=6"])
    # 5 classes x 16 = 80 images: train 40, calib 16, eval 24 (split 0.5 / 0.2 / 0.3)
    assert report["eval_images"] == 24
    assert report["float_accuracy"] >= 0.8                         # classes are crops of five different photos
    assert report["float_accuracy"] - report["quant_accuracy"] <= 0.04
    assert report["ledger"]["copies_per_batch"] == 1
    assert report["onnx_agreement"]["onnx_exact"]["max_abs_diff"] == 0
    assert report["run"]["target"] == "DPUCZDX8G_ISA1_B4096"
    assert "/opt/vitis_ai/compiler/arch/DPUCZDX8G/" in " ".join(report["compile_argv"])
    assert report["source"]["unchanged"] is True
    example = np.load(os.path.join(work, "export", "example_input.npy"))
    assert example.shape == (1, 3, 32, 32) and example.dtype == np.float32


@pytest.mark.slow
def test_vek280_resnet18_scenario_end_to_end(sample_folder, tmp_path):
    work = str(tmp_path / "vek280")
    report = _run(VEK280, sample_folder, work, ["data.source.limit_per_class=2", "model.train.epochs=1",
                                                "quantizer.max_accuracy_drop=1.0"])
    # 5 classes x 2 = 10 images: train 5, calib 2, eval 3; one epoch on 5 images: the accuracy means nothing
    assert report["eval_images"] == 3
    assert report["ledger"]["copies_per_batch"] == 1
    assert report["onnx_agreement"]["onnx_exact"]["max_abs_diff"] == 0
    qdq = report["onnx_agreement"]["onnx_qdq"]
    assert qdq["reference_mismatches"] == 0                       # bit-exact with the half-even simulation
    with open(os.path.join(work, "report.md")) as f:               # ResNet-18: ties add up over 32 points
        assert ("onnx_qdq differs from the simulation by up to" in f.read()) == (qdq["max_diff_lsb"] > 1)
    argv = report["compile_argv"]
    assert argv[argv.index("-a") + 1] == "/opt/vitis_ai/compiler/arch/DPUCV2DX8G/VEK280/arch.json"
    example = np.load(os.path.join(work, "export", "example_input.npy"))
    assert example.shape == (1, 3, 224, 224)
    with open(os.path.join(work, "deploy", "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["preprocess"]["input_shape"] == [1, 3, 224, 224]
    assert report["source"]["unchanged"] is True
