"""A float accuracy of 0, and an eval split of a single class, do not pass the above-chance check silently."""
import json
import os

import numpy as np
import pytest

import pipeline
from pipeline.checks import check_above_chance, chance_warnings
from pipeline.errors import DataError
from tests.support import digits_u8, make_case


def test_none_right_is_refused_also_where_chance_is_1():
    with pytest.raises(DataError) as info:
        check_above_chance(0, 200, {3: 200}, [])
    assert str(info.value) == (
        "test: the float model got none of the 200 eval images right (float accuracy 0.0000; the eval split holds the "
        "single label 3): it does not work on this data, so its quantized model and deploy bundle would be useless. "
        "Likely cause: the weights do not fit this data or its preprocessing, or they never saw the eval split's class "
        "(a train split without it: see the split warnings). (For a smoke test with an untrained model set "
        "quantizer.require_float_above_chance: false.)")
    with pytest.raises(DataError, match=r"none of the 12 eval images right \(float accuracy 0\.0000\): .* never saw the "
                                        r"eval split's classes \(a train split without them"):
        check_above_chance(0, 12, {0: 6, 1: 6}, [])
    check_above_chance(0, 9, {0: 9}, [])  # too few images to tell: the warnings say it
    check_above_chance(200, 200, {3: 200}, [])  # a single class, all right: nothing to refuse


def test_chance_warnings():
    assert chance_warnings(150, 200, {0: 100, 1: 100}) == []
    single, none = chance_warnings(0, 9, {4: 9})
    assert single.startswith("the eval split holds a single class (label 4, 9 images): the accuracy says nothing of "
                             "the other classes, and the check that the float model is above chance cannot decide")
    assert none.startswith("the float model got none of the 9 eval images right (float accuracy 0): it does not work")
    assert chance_warnings(3, 9, {4: 9}) == [single]


def test_grouped_labels_cut_in_slices_fail_the_test_step_with_the_warnings(tmp_path):
    images, labels = digits_u8()
    keep = np.concatenate([np.flatnonzero(labels < 9)[:280], np.flatnonzero(labels == 9)[:120]])
    order = keep[np.argsort(labels[keep], kind="stable")]  # grouped by label: the last 120 images are all 9s
    config, _ = make_case(tmp_path, images=images[order], labels=labels[order], data={"split_order": "contiguous"})
    with pytest.raises(DataError, match=r"none of the 120 eval images right .*the single label 9\)"):
        pipeline.run(config)
    work = str(tmp_path / "run")
    with open(os.path.join(work, "steps", "test.json")) as f:
        warnings = json.load(f)["warnings"]
    assert warnings[0].startswith("the eval split holds a single class (label 9, 120 images)")
    assert warnings[1].startswith("the float model got none of the 120 eval images right")
    with open(os.path.join(work, "report.md")) as f:
        report = f.read()
    for warning in warnings:
        assert "- " + warning in report
    assert "- the train split holds 8 of the data's 10 classes (none of 8, 9): split_order contiguous" in report
