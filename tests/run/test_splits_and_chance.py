"""Runs that must not finish "ok" (issue 14, item 7): a float model at chance fails the test step with
the likely cause, and the default split does not depend on the file's order (a class-sorted file
gives every split every class, shown per split in the report) while staying an index: the boundary's
one copy gathers the rows."""
import json
import os

import numpy as np
import pytest
import yaml

import pipeline
from pipeline.data.batching import split_rows
from pipeline.errors import ConfigError, DataError

from tests.support import digits_u8, make_case


def _sorted_digits(n=400):
    images, labels = digits_u8()
    order = np.argsort(labels[:n], kind="stable")
    return images[:n][order], labels[:n][order]


def test_a_class_sorted_file_gives_every_split_every_class_and_the_report_shows_it(tmp_path):
    images, labels = _sorted_digits()
    config, _ = make_case(tmp_path, images=images, labels=labels, model={"train": {"epochs": 10}})
    report = pipeline.run(config, steps=["train", "calib", "test"])
    splits = report["source"]["splits"]
    assert report["source"]["split_order"] == "shuffled"
    assert {k: v["images"] for k, v in splits.items()} == {"train": 240, "calib": 40, "eval": 120}
    for part, info in splits.items():
        assert sorted(info["classes"]) == [str(c) for c in range(10)], (part, info)
        expected = np.bincount(labels, minlength=10) * {"train": 0.6, "calib": 0.1, "eval": 0.3}[part]
        assert all(abs(info["classes"][str(c)] - expected[c]) <= 1 for c in range(10)), (part, info)
    assert report["float_accuracy"] > 0.5
    # zero copies before the boundary: every stage shares storage, one copy per batch
    assert report["ledger"]["copies_per_batch"] == 1
    assert set(report["ledger"]["copies_by_stage"]) == {"quantizer_boundary"}, report["ledger"]
    with open(os.path.join(str(tmp_path / "run"), "report.md")) as f:
        md = f.read()
    assert "- calib split (shuffled): 40 images; classes 0 (4)" in md


def test_a_contiguous_split_stays_available_as_an_explicit_choice(tmp_path):
    images, labels = _sorted_digits()
    config, _ = make_case(tmp_path, images=images, labels=labels, data={"split_order": "contiguous"})
    loaded = pipeline.load_config(config)
    from pipeline.runner.folder import RunDir
    from pipeline.steps.context import StepContext
    run = StepContext(loaded, RunDir(loaded))
    assert run.feed.splits["calib"] == slice(240, 280)
    assert sorted(run.feed.split_summary()["calib"]["classes"]) == sorted({str(int(c)) for c in labels[240:280]})
    assert len(run.feed.split_summary()["calib"]["classes"]) < 10  # what the shuffled default avoids


def test_the_shuffled_split_is_seeded_and_covers_every_row_once():
    labels = np.repeat(np.arange(5), 37)
    a = split_rows(185, {"train": 0.5, "eval": 0.5}, 3, labels)
    b = split_rows(185, {"train": 0.5, "eval": 0.5}, 3, labels)
    c = split_rows(185, {"train": 0.5, "eval": 0.5}, 4, labels)
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["eval"], c["eval"])
    assert np.array_equal(np.sort(np.concatenate([a["train"], a["eval"]])), np.arange(185))
    assert sorted(np.bincount(labels[a["eval"]]).tolist()) in ([18, 18, 19, 19, 19], [18, 18, 18, 19, 19])
    unlabeled = split_rows(10, {"train": 0.7, "eval": 0.3}, 0)
    assert len(unlabeled["eval"]) == 3 and not np.array_equal(unlabeled["train"], np.arange(7))


def test_stages_that_change_the_batch_dimension_need_a_contiguous_split(tmp_path):
    config, _ = make_case(tmp_path, preprocess={"stages": [{"type": "layout", "src": "NHWC", "dst": "NCHW"},
                                                           {"type": "batch_slice", "start": 0, "stop": 4}]})
    with pytest.raises(ConfigError, match="set data.split_order: contiguous"):
        pipeline.run(config, steps=["calib"])


def test_a_float_model_at_chance_fails_the_test_step_with_the_likely_cause(tmp_path):
    config, _ = make_case(tmp_path, model={"train": {"epochs": 10}})
    assert pipeline.run(config, steps=["train", "calib", "test"])["float_accuracy"] > 0.5  # good weights
    weights = str(tmp_path / "float.pt")
    os.replace(str(tmp_path / "run" / "model" / "float.pt"), weights)
    # the same weights, with mean/std given in 0..1 units for 0..255 pixels
    with open(config) as f:
        raw = yaml.safe_load(f)
    raw["model"]["weights"] = weights
    raw["preprocess"].update(mean=[0.3053], std=[0.3759])
    with open(config, "w") as f:
        yaml.safe_dump(raw, f)
    with pytest.raises(DataError) as info:
        pipeline.run(config)
    text = str(info.value)
    assert "is at chance" in text and "Likely cause: the calibration inputs were implausible" in text, text
    work = str(tmp_path / "run")
    assert not os.path.exists(os.path.join(work, "deploy")) and not os.path.exists(os.path.join(work, "export"))
    with open(os.path.join(work, "status.json")) as f:
        status = json.load(f)
    assert status["state"] == "failed" and status["step"] == "test"
    # a smoke test with a useless model can say so
    report = pipeline.run(config, steps=["calib", "test"], overrides=["quantizer.require_float_above_chance=false"])
    assert report["float_accuracy"] < 0.3 and report["status"]["state"] == "ok"


@pytest.mark.parametrize("layout", ["NCHW", "channels_last"])
@pytest.mark.parametrize("order", [None, [2, 1, 0]])
def test_the_boundary_gathers_rows_as_indexing_then_the_boundary_would(layout, order):
    import torch
    from pipeline.boundary import QuantizerBoundary
    b = QuantizerBoundary([10.0, 20.0, 30.0], [2.0, 3.0, 4.0], layout=layout, channel_order=order)
    nhwc = np.arange(10 * 4 * 5 * 3, dtype=np.uint8).reshape(10, 4, 5, 3)
    rows = [7, 2, 3, 4, 9, 0]  # unsorted, with a run of three
    views = {"uint8 tensor (kernel)": torch.from_numpy(nhwc).permute(0, 3, 1, 2),
             "float16 tensor (torch pass)": torch.from_numpy(nhwc).half().permute(0, 3, 1, 2),
             "flipped numpy (negative strides)": nhwc[:, ::-1].transpose(0, 3, 1, 2)}
    for name, view in views.items():
        expect = b(np.ascontiguousarray(np.asarray(view)[rows]) if isinstance(view, np.ndarray)
                   else view[rows].contiguous()).clone()
        got = b(view, rows=rows)
        assert torch.equal(got, expect), name
        assert got.shape == (6, 3, 4, 5)
    with pytest.raises(DataError, match="gathers rows 0..9 of the view, got rows 0..10"):
        b(views["uint8 tensor (kernel)"], rows=[0, 10])
