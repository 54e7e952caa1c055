"""What a board application needs from the deploy bundle (issue 34, round four): the class names
(words.txt, line i names output i) and the full preprocessing (the resize and crop the model was
calibrated with, mean, scale, channel order, layout, input fix_pos) in preprocess.json and in the form
the Vitis AI Library reads (docs/deploy.md); the quantized xmodel read back and checked."""
import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import yaml

from tests.support import REPO, make_case

import pipeline
from pipeline import deploy
from pipeline.data.sources import open_source
from pipeline.errors import ConfigError, HandoffError
from pipeline.stages import build_stages
from pipeline.stages.geometry import source_box

GOLDEN = os.path.join(REPO, "tests", "data", "golden_xmodel", "golden")
CONVNET = os.path.join(GOLDEN, "convnet", "default", "xmodel", "ConvNet_int.xmodel")  # input [1,16,16,3], fix_pos 5
MLP = os.path.join(GOLDEN, "mlp", "default", "xmodel", "MLP_int.xmodel")
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]


def _pre(**over):
    p = {"mean": MEAN, "std": STD, "channel_order": None, "source_color": "RGB", "layout": "NCHW",
         "source_layout": "NHWC", "input_fix_pos": 5, "input_shape": [1, 3, 224, 224]}
    p.update(over)
    return p


# ---- class names --------------------------------------------------------------------------------------

def test_every_source_says_its_class_names_or_that_it_has_none(tmp_path):
    assert open_source({"type": "digits"}, ".").classes == [str(d) for d in range(10)]
    np.save(str(tmp_path / "x.npy"), np.zeros((4, 2, 2, 3), np.uint8))
    np.save(str(tmp_path / "y.npy"), np.array([0, 2, 1, 2]))
    (tmp_path / "words.txt").write_bytes(b"cat\r\ndog\r\nbird, a small one\r\n")
    npy = {"type": "npy", "path": "x.npy", "labels": "y.npy"}
    assert open_source(npy, str(tmp_path)).classes is None
    assert open_source(dict(npy, class_names="words.txt"), str(tmp_path)).classes == ["cat", "dog", "bird, a small one"]
    assert open_source(dict(npy, class_names=["a", "b", "c"]), str(tmp_path)).classes == ["a", "b", "c"]
    images = np.zeros((2, 2, 2, 1), np.uint8)
    assert open_source({"type": "array", "images": images, "class_names": ["x"]}, ".").classes == ["x"]


@pytest.mark.parametrize("names, match", [
    (["cat", "dog"], "2 names for labels that run up to 2"),
    (["cat", "", "bird"], "name 1 is ''"),
    (["cat", "do\ng", "bird"], "non-empty line"),
    ([], "non-empty list"),
    ("missing.txt", "is not a file"),
])
def test_bad_class_names_are_refused_when_the_source_opens(tmp_path, names, match):
    np.save(str(tmp_path / "x.npy"), np.zeros((4, 2, 2, 3), np.uint8))
    np.save(str(tmp_path / "y.npy"), np.array([0, 2, 1, 2]))
    with pytest.raises(ConfigError, match=match):
        open_source({"type": "npy", "path": "x.npy", "labels": "y.npy", "class_names": names}, str(tmp_path))


def test_a_class_names_file_resolves_against_the_yaml_folder(tmp_path):
    config, _ = make_case(tmp_path)
    (tmp_path / "names.txt").write_text("".join("digit %d\n" % d for d in range(10)))
    loaded = pipeline.load_config(config, overrides=["data.source.class_names=names.txt"])
    assert loaded.absolute_raw()["data"]["source"]["class_names"] == str(tmp_path / "names.txt")


def test_words_txt_names_each_output_and_a_bundle_without_names_says_why(tmp_path):
    (tmp_path / "compile").mkdir()
    for name in deploy.PLAN_FILES:
        (tmp_path / "compile" / name).write_text("plan\n")
    m = deploy.build_bundle(str(tmp_path), str(tmp_path / "deploy"), None,
                            _pre(class_names=["cat", "dog"], class_names_from="data.source.class_names"), "net")
    assert (tmp_path / "deploy" / "net" / "words.txt").read_text() == "cat\ndog\n"
    assert m["class_names"] == "net/words.txt" and m["preprocess"]["class_names"] == ["cat", "dog"]
    sums = (tmp_path / "deploy" / "net" / "SHA256SUMS").read_text()
    assert "%s  words.txt" % hashlib.sha256(b"cat\ndog\n").hexdigest() in sums.splitlines()
    assert "words.txt" in (tmp_path / "deploy" / "net" / "net.prototxt").read_text()
    m = deploy.build_bundle(str(tmp_path), str(tmp_path / "deploy"), None, _pre(), "net")
    assert not (tmp_path / "deploy" / "net" / "words.txt").exists() and m["class_names"] is None
    assert m["preprocess"]["class_names_from"].startswith("none: the source names no classes; set "
                                                          "data.source.class_names")


# ---- the resize and crop -------------------------------------------------------------------------------

@pytest.mark.parametrize("stages, image, layout, box", [
    ([{"type": "reshape", "shape": [8, 8, 1]}, {"type": "layout", "src": "NHWC", "dst": "NCHW"},
      {"type": "center_crop", "height": 8, "width": 8}], (8, 8, 1), "NHWC", (0, 0, 8, 8)),
    ([{"type": "layout", "src": "NHWC", "dst": "NCHW"}, {"type": "center_crop", "height": 5, "width": 4}],
     (8, 8, 3), "NHWC", (2, 2, 5, 4)),
    ([{"type": "layout", "src": "NHWC", "dst": "NCHW"}, {"type": "crop", "top": 1, "left": 2, "height": 3,
                                                         "width": 4}, {"type": "bgr_to_rgb"}], (8, 8, 3), "NHWC",
     (1, 2, 3, 4)),
    ([{"type": "layout", "src": "NHWC", "dst": "NCHW"}, {"type": "narrow", "dim": 3, "start": 2, "length": 3}],
     (8, 8, 3), "NHWC", (0, 2, 8, 3)),
    ([], (3, 8, 6), "NCHW", (0, 0, 8, 6)),
    ([{"type": "permute", "dims": [0, 3, 2, 1]}], (8, 6, 3), "NHWC", None),  # H and W swapped: not a crop
])
def test_the_box_the_stages_keep_is_read_off_the_stages_themselves(stages, image, layout, box):
    assert source_box(build_stages(stages), image, layout) == box


def _library(**over):
    return deploy.preprocess_spec(_pre(**over))["vitis_ai_library"]


def test_an_image_folder_resized_to_256_and_center_cropped_is_the_librarys_vgg_preprocess():
    decode = {"resize": 256, "crop": [224, 224], "mode": "RGB"}
    spec = deploy.preprocess_spec(_pre(image_size=[224, 224], box=[0, 0, 224, 224], decode=decode))
    assert [s["op"] for s in spec["image_steps"]] == ["decode", "resize", "center_crop"]
    assert spec["image_steps"][1]["shorter_side"] == 256 and spec["image_steps"][2]["size"] == [224, 224]
    lib = spec["vitis_ai_library"]
    assert lib["preprocess_type"] == "VGG_PREPROCESS" and lib["same_geometry"]
    assert lib["kernel_mean"] == MEAN[::-1]  # B, G, R: the library swaps the BGR image to RGB itself
    assert any("Pillow" in n and "cv::resize" in n for n in lib["notes"])
    assert any("rounds down" in n for n in lib["notes"])
    text = deploy.model_prototxt("net", spec, {"top_k": 5})
    assert "preprocess_type: VGG_PREPROCESS" in text and "mean: 103.53\n" in text.split("kernel")[1]
    # a BGR model of the same geometry: RESNET50_TF2 (fed BGR), mean and scale in the model's order
    bgr = deploy.preprocess_spec(_pre(image_size=[224, 224], box=[0, 0, 224, 224], decode=decode,
                                      channel_order=[2, 1, 0]))["vitis_ai_library"]
    assert bgr["preprocess_type"] == "RESNET50_TF2" and bgr["kernel_mean"] == MEAN


def test_a_center_crop_stage_after_a_shorter_side_resize_is_the_same_geometry():
    lib = _library(image_size=[256, 341], box=[16, 58, 224, 224], decode={"resize": 256, "crop": None, "mode": "RGB"})
    assert lib["preprocess_type"] == "VGG_PREPROCESS" and lib["same_geometry"]
    off_center = _library(image_size=[256, 341], box=[0, 0, 224, 224],
                          decode={"resize": 256, "crop": None, "mode": "RGB"})
    assert off_center["preprocess_type"] == "RGB_PREPROCESS" and not off_center["same_geometry"]


def test_images_resized_whole_to_the_input_size_are_the_librarys_own_resize():
    lib = _library(image_size=[224, 224], box=[0, 0, 224, 224], decode={"resize": [224, 224], "crop": None,
                                                                         "mode": "RGB"})
    assert lib["preprocess_type"] == "RGB_PREPROCESS" and lib["same_geometry"]
    assert _library(channel_order=[2, 1, 0], image_size=[224, 224], box=[0, 0, 224, 224],
                    decode=None)["preprocess_type"] == "CAFFE"


def test_a_crop_no_preprocess_type_makes_says_what_the_board_must_do():
    spec = deploy.preprocess_spec(_pre(image_size=[256, 256], box=[0, 0, 224, 224],
                                       decode={"resize": 256, "crop": [256, 256], "mode": "RGB"}))
    lib = spec["vitis_ai_library"]
    assert lib["preprocess_type"] == "RGB_PREPROCESS" and not lib["same_geometry"]
    assert "give Classification::run an image of exactly 224x224" in lib["notes"][0]
    assert spec["image_steps"][-1] == {"op": "crop", "top": 0, "left": 0, "size": [224, 224], "of": [256, 256],
                                       "rule": "rows top..top+h-1, columns left..left+w-1 (the stages' crop)"}
    assert "does not cut the input as the calibration did" in deploy.model_prototxt("net", spec, {"top_k": 5})


def test_a_gray_model_gets_no_preprocess_type_and_the_int8_rounding_is_said():
    spec = deploy.preprocess_spec(_pre(mean=[77.85], std=[95.85], source_color="L", input_shape=[1, 1, 8, 8],
                                       image_size=[8, 8], box=[0, 0, 8, 8]))
    lib = spec["vitis_ai_library"]
    assert lib["preprocess_type"] is None and "takes 3-channel BGR images" in lib["notes"][0]
    assert any("XLNX_ENABLE_ROUND_SETINPUT=1" in n for n in lib["notes"])
    assert spec["image_steps"] == [{"op": "as_stored", "size": [8, 8], "note": spec["image_steps"][0]["note"]}]
    assert "preprocess_type:" not in deploy.model_prototxt("net", spec, {"top_k": 5})


def test_an_image_folder_run_carries_its_class_folders_and_its_resize_and_crop(tmp_path):
    from PIL import Image
    rng = np.random.default_rng(0)
    for label in ("dog", "cat", "bird"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(10):
            Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).save(
                str(tmp_path / "images" / label / ("%d.png" % i)))
    raw = {"run": {"name": "folder", "work_dir": str(tmp_path / "run")},
           "data": {"source": {"type": "image_folder", "root": "images", "resize": 10, "crop": [8, 8]},
                    "batch_size": 4},
           "preprocess": {"stages": [{"type": "layout", "src": "NHWC", "dst": "NCHW"}],
                          "mean": [120.0, 120.0, 120.0], "std": [70.0, 70.0, 70.0]},
           "model": {"zoo": "digits_cnn", "kwargs": {"in_channels": 3, "num_classes": 3}, "train": {"epochs": 1}},
           "quantizer": {"max_accuracy_drop": 1.0, "require_float_above_chance": False}}
    config = tmp_path / "folder.yaml"
    config.write_text(yaml.safe_dump(raw))
    pipeline.run(str(config), steps=["train", "calib", "export", "compile", "deploy"])
    model = tmp_path / "run" / "deploy" / "folder"
    assert (model / "words.txt").read_text() == "bird\ncat\ndog\n"  # label i is the i-th class folder, sorted
    spec = json.loads((model / "preprocess.json").read_text())
    assert spec["class_names_from"] == "the class folder names of the image folder images, sorted by name"
    assert [s["op"] for s in spec["image_steps"]] == ["decode", "resize", "center_crop"]
    assert spec["image_steps"][1]["shorter_side"] == 10 and spec["image_steps"][2]["size"] == [8, 8]
    assert spec["input_size"] == [8, 8] and spec["channel_order"] == "RGB"
    lib = spec["vitis_ai_library"]
    assert lib["preprocess_type"] == "RGB_PREPROCESS" and not lib["same_geometry"]
    text = (model / "folder.prototxt").read_text()
    assert "preprocess_type: RGB_PREPROCESS" in text and "top_k: 3" in text


# ---- the quantized xmodel, read back and checked ---------------------------------------------------------

def test_the_xmodel_check_compares_graph_input_shape_and_input_fix_pos():
    with open(CONVNET, "rb") as f:
        data = f.read()
    summary = deploy.check_quantized_xmodel(data, "export/ConvNet_int.xmodel", [1, 3, 16, 16], 5)
    assert summary["graph"] == "ConvNet"
    with pytest.raises(HandoffError, match="its input is quantized with fix_pos 5, the calibration's "
                                           "quant_info.json says 6: the xmodel of another calibration"):
        deploy.check_quantized_xmodel(data, "export/ConvNet_int.xmodel", [1, 3, 16, 16], 6)
    with pytest.raises(HandoffError, match=r"its input is \[1, 16, 16, 3\], not the model input \[1, 8, 8, 3\]"):
        deploy.check_quantized_xmodel(data, "export/ConvNet_int.xmodel", [1, 3, 8, 8], 5)
    with open(MLP, "rb") as f:
        with pytest.raises(HandoffError, match="its graph is 'MLP', not 'ConvNet': the xmodel of another model"):
            deploy.check_quantized_xmodel(f.read(), "export/ConvNet_int.xmodel", None, None)
    for damaged in (data[:len(data) // 2], b""):
        with pytest.raises(HandoffError, match="does not pass the xmodel check"):
            deploy.check_quantized_xmodel(damaged, "export/ConvNet_int.xmodel", [1, 3, 16, 16], 5)


def test_a_flipped_weight_passes_the_xmodel_check_which_is_why_the_sha256_is_checked_too():
    from pipeline.xir import reader
    with open(CONVNET, "rb") as f:
        data = f.read()
    msg = reader.read_xmodel(data)
    const = [n for n in msg.op_node if n.op_type == "const"][0]
    weight = reader.schema.attr_python(const.op_attr["data"])[1]
    at = data.index(weight) + 1
    flipped = data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:]
    assert flipped != data
    deploy.check_quantized_xmodel(flipped, "export/ConvNet_int.xmodel", [1, 3, 16, 16], 5)  # a valid graph


def test_a_file_that_changes_after_its_check_is_not_bundled_and_nothing_is_left(tmp_path):
    run = tmp_path / "run"
    (run / "compile").mkdir(parents=True)
    for name in deploy.PLAN_FILES:
        (run / "compile" / name).write_text("plan\n")
    (run / "export").mkdir()
    quantized = run / "export" / "ConvNet_int.xmodel"
    shutil.copyfile(CONVNET, str(quantized))
    recorded = hashlib.sha256(quantized.read_bytes()).hexdigest()
    with open(str(quantized), "ab") as f:
        f.write(b"\0")
    with pytest.raises(HandoffError, match=r"ConvNet_int\.xmodel changed after it was checked: it has \d+ bytes, 1 "
                                           r"more than written"):
        deploy.build_bundle(str(run), str(run / "deploy"), None, _pre(input_shape=[1, 3, 16, 16]), "net",
                            quantized_xmodel=str(quantized),
                            expected={str(quantized): {"sha256": recorded, "bytes": os.path.getsize(CONVNET)}})
    assert sorted(os.listdir(str(run))) == ["compile", "export"]
