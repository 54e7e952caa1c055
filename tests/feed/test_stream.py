"""The streamed image folder (data.source stream: true): the in-memory source's batches, bit for bit,
decoded by a DataLoader batch by batch, only a rank's own batches."""
import os

import numpy as np
import pytest
import torch
from PIL import Image

import pipeline
from pipeline.data.batching import iter_batches, split
from pipeline.data.sources import open_source
from pipeline.errors import ConfigError, DataError
from pipeline.models.loading import build_model


def _make_folder(root, per_class=7, sizes=((14, 18), (16, 12))):
    rng = np.random.default_rng(0)
    for c in range(3):
        for i in range(per_class):
            h, w = sizes[(c + i) % len(sizes)]
            path = os.path.join(str(root), "class%d" % c, "%02d.png" % i)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(path)
    return str(root)


def _spec(root, **kw):
    return dict({"type": "image_folder", "root": root, "resize": 12, "crop": 10}, **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_streamed_batches_equal_the_in_memory_ones_and_a_rank_reads_only_its_shard(tmp_path, workers):
    root = _make_folder(tmp_path)
    memory = open_source(_spec(root), ".")
    stream = open_source(_spec(root, stream=True, workers=workers, prefetch=1), ".")
    assert stream.shape == memory.shape == (21, 10, 10, 3)
    assert not stream.gathers_at_boundary and memory.gathers_at_boundary  # a stream decodes only a batch's rows
    assert stream.color == memory.color == "RGB"  # the deploy bundle names the channel order from it
    assert np.array_equal(stream.labels, memory.labels)
    assert [p.decode() for p in stream.paths] == memory.files
    part = split(21, {"calib": 0.5, "eval": 0.5})["eval"]  # 10:21, 11 images: batches of 4, 4, 3
    expected = list(iter_batches(memory, part, 4))
    got = list(stream.batches(part, 4))
    assert len(got) == len(expected) == 3
    for batch, (xm, ym) in zip(got, expected):
        x, y = batch.view, batch.labels
        assert x.dtype == torch.uint8 and torch.equal(x, xm) and np.array_equal(y, ym)
        assert batch.rows is None and batch.channel_order is None
    # rank 1 of 2 decodes batch 1 only; a limit counts batches over all ranks
    shard = list(stream.batches(part, 4, limit=None, rank=1, world=2))
    assert len(shard) == 1 and torch.equal(shard[0].view, expected[1][0])
    assert [torch.equal(b.view, e[0]) for b, e in zip(stream.batches(part, 4, limit=2, rank=0, world=2), expected)] == [True]


def test_stream_options_are_checked(tmp_path):
    root = _make_folder(tmp_path, per_class=1)
    with pytest.raises(ConfigError, match="skip_corrupt cannot be combined with stream"):
        open_source(_spec(root, stream=True, skip_corrupt=True), ".")
    with pytest.raises(ConfigError, match="workers and prefetch configure the streamed"):
        open_source(_spec(root, workers=2), ".")
    with pytest.raises(ConfigError, match="prefetch: expected an int >= 1"):
        open_source(_spec(root, stream=True, prefetch=0), ".")


def test_a_size_the_stream_did_not_expect_names_the_file(tmp_path):
    root = _make_folder(tmp_path, per_class=2)  # without crop the two sizes differ
    stream = open_source({"type": "image_folder", "root": root, "stream": True, "workers": 0, "shuffle": False}, ".")
    with pytest.raises(DataError, match=r"class0/01.png decodes to 16x12x3 .* set data.source.crop"):
        list(stream.batches(slice(0, len(stream)), 2))


def test_a_streamed_run_calibrates_like_the_in_memory_one(tmp_path):
    root = _make_folder(tmp_path / "images", per_class=8)
    torch.manual_seed(0)
    weights = str(tmp_path / "w.pt")
    torch.save(build_model("digits_cnn", None, {"num_classes": 3, "in_channels": 3})
               .state_dict(), weights)
    config = str(tmp_path / "c.yaml")
    with open(config, "w") as f:
        f.write("""
run: {name: s, num_threads: 1, verify_source_unchanged: true}
data:
  source: {type: image_folder, root: %s, resize: 12, crop: 8}
  split: {calib: 0.5, eval: 0.5}
  batch_size: 5
preprocess:
  stages: [{type: layout, src: NHWC, dst: NCHW}]
  mean: [127.5, 127.5, 127.5]
  std: [64.0, 64.0, 64.0]
  layout: NCHW
model: {zoo: digits_cnn, kwargs: {num_classes: 3, in_channels: 3}, weights: %s}
quantizer: {backend: sim, max_accuracy_drop: 1.0, require_float_above_chance: false}  # untrained weights
compile: {target: DPUCZDX8G_ISA1_B4096}
""" % (root, weights))
    reports = {}
    for name, extra in (("memory", []), ("stream", ["data.source.stream=true", "data.source.workers=1"])):
        work = str(tmp_path / name)
        reports[name] = pipeline.run(config, steps=["calib", "test"], overrides=["run.work_dir=" + work] + extra)
        with open(os.path.join(work, "quantize_result", "quant_info.json"), "rb") as f:
            reports[name]["qi"] = f.read()
    assert reports["memory"]["qi"] == reports["stream"]["qi"]
    assert reports["memory"]["quant_accuracy"] == reports["stream"]["quant_accuracy"]
