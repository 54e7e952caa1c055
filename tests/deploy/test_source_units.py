"""A float source in 0..1 (or -1..1): the prototxt's mean and scale are in its units, not the 0..255 pixels the
Vitis AI Library feeds; the run, preprocess.json and the prototxt say so, with the values for 0..255 pixels."""
import json
import os

import numpy as np
import pytest

import pipeline
from pipeline import deploy
from pipeline.deploy.library import model_prototxt
from pipeline.deploy.spec import PIXEL_UNITS, units_warning
from tests.support import digits_u8, make_case

MEAN, STD = [0.39, 0.4, 0.41], [0.31, 0.32, 0.33]


def _pre(**over):
    p = {"mean": MEAN, "std": STD, "channel_order": None, "source_color": "RGB", "layout": "NCHW",
         "source_layout": "NCHW", "input_fix_pos": 6, "input_shape": [1, 3, 16, 16]}
    p.update(over)
    return p


@pytest.mark.parametrize("dtype, span, fires", [
    ("float32", [0.0, 1.0], True), ("float64", [-1.0, 1.0], True), ("float16", [0.0, 0.5], True),
    ("float32", [0.0, 255.0], False), ("float32", [-2.1, 2.6], False), ("uint8", [0.0, 1.0], False),
    (None, [0.0, 1.0], False), ("float32", None, False),
])
def test_units_warning_fires_for_a_float_source_within_minus_1_to_1(dtype, span, fires):
    warning = units_warning(dtype, span, MEAN, STD)
    assert (warning is not None) == fires
    if fires:
        assert warning.startswith("the source is %s with values in %.4g .. %.4g (the calib split's), and "
                                  "preprocess.mean [0.39, 0.4, 0.41] and std [0.31, 0.32, 0.33] are in those units, "
                                  "but the Vitis AI Library feeds the model 0..255 pixels" % (dtype, span[0], span[1]))  # rounded to 4 decimals


def test_the_spec_and_the_prototxt_say_it_and_give_the_pixel_values():
    plain = deploy.preprocess_spec(_pre())
    assert plain["units"] == PIXEL_UNITS and "units_warning" not in plain
    assert "kernel_mean_for_0_255_pixels" not in plain["vitis_ai_library"]
    assert "WARNING" not in model_prototxt("m", plain)
    spec = deploy.preprocess_spec(_pre(source_dtype="float32", source_range=[0.0, 1.0]))
    assert spec["units"] == ("the source's own units (float32), NOT the 0..255 pixels the Vitis AI Library feeds: "
                             "see units_warning")
    assert spec["units_warning"] == units_warning("float32", [0.0, 1.0], MEAN, STD)
    lib = spec["vitis_ai_library"]
    assert lib["kernel_mean"] == [0.41, 0.4, 0.39]  # the library's BGR order for an RGB model
    assert lib["kernel_mean_for_0_255_pixels"] == [104.55, 102.0, 99.45]
    assert lib["kernel_scale_for_0_255_pixels"] == [float("%.9g" % (1 / 0.33 / 255)), float("%.9g" % (1 / 0.32 / 255)),
                                                    float("%.9g" % (1 / 0.31 / 255))]
    text = model_prototxt("m", spec)
    assert "# mean/scale: the source's units, model input channel order RGB" in text
    assert "# WARNING: mean/scale below are in the source's units, not pixels: %s.\n" % spec["units_warning"] in text


def test_a_float_source_in_0_to_1_is_warned_in_the_run_the_report_and_the_bundle(tmp_path):
    images, labels = digits_u8()
    images = (images[:400].astype(np.float32) / 255.0)
    config, _ = make_case(tmp_path, images=images, labels=labels[:400],
                          preprocess={"mean": [77.85 / 255], "std": [95.85 / 255]},
                          quantizer={"max_accuracy_drop": 1.0, "require_float_above_chance": False},
                          model={"train": {"epochs": 1}})
    report = pipeline.run(config)
    work = str(tmp_path / "run")
    warned = [w for w in report["warnings"] if "Vitis AI Library feeds the model 0..255 pixels" in w]
    assert len(warned) == 1 and warned[0].startswith("deploy: the source is float32 with values in 0 .. 1 ")
    with open(os.path.join(work, "report.md")) as f:
        assert "- " + warned[0] in f.read()
    with open(os.path.join(work, "deploy", "case", "preprocess.json")) as f:
        spec = json.load(f)
    assert "deploy: " + spec["units_warning"] == warned[0]
    assert spec["vitis_ai_library"]["kernel_mean_for_0_255_pixels"] == [77.85]
    with open(os.path.join(work, "deploy", "case", "case.prototxt")) as f:
        assert "# WARNING: mean/scale below are in the source's units, not pixels" in f.read()
