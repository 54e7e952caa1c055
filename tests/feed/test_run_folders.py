"""Sources never read inside a run folder (a folder holding the pipeline's mark): an image folder's
listing leaves out every run folder below its root (and a class folder that holds nothing else),
says so in its description and the report; a source path inside a run folder is refused when the
source is opened; a config whose run folder would lie inside its image folder, or whose source lies
inside its own run folder, is refused when it is loaded.

Issue 34: a run folder inside the image folder (config next to the data) made the second run read
the first run's plots/*.png as a class, train and evaluate on them, and exit 0.
"""
import os

import numpy as np
import pytest
import yaml
from PIL import Image

from pipeline.config import load_config
from pipeline.data.sources import open_source
from pipeline.data.summary import source_section, source_summary
from pipeline.errors import ConfigError
from pipeline.runner.folder import MARK_FILE, lock_work_dir, unlock


def _png(path, value=0, size=(12, 10)):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    Image.fromarray(np.full(size + (3,), value, np.uint8)).save(str(path))


def _run_folder(path):
    """A run folder as the pipeline makes one (its lock claims and marks it), with plots and a model."""
    unlock(lock_work_dir(str(path)))
    _png(os.path.join(str(path), "plots", "sensitivity.png"), 200, (30, 40))
    _png(os.path.join(str(path), "plots", "activation_ranges.png"), 250, (30, 40))
    os.makedirs(os.path.join(str(path), "model"), exist_ok=True)
    with open(os.path.join(str(path), "model", "float.pt"), "wb") as f:
        f.write(b"weights")
    assert os.path.isfile(os.path.join(str(path), MARK_FILE))


def _images(root):
    for cls, n in (("cat", 3), ("dog", 2)):
        for i in range(n):
            _png(root / cls / ("%d.png" % i), 10 * i)


@pytest.mark.parametrize("stream", [False, True])
def test_run_folders_inside_an_image_folder_are_left_out_and_listed(tmp_path, stream):
    root = tmp_path / "data"
    _images(root)
    _run_folder(root / "runs" / "first")            # config next to the data: runs/<name> inside the folder
    _run_folder(root / "cat" / "old_run")           # a run folder inside a class folder
    spec = {"type": "image_folder", "root": str(root), "resize": 10, "crop": 8, "shuffle": False}
    if stream:
        spec.update(stream=True, workers=0)
    src = open_source(spec, ".")
    assert src.classes == ["cat", "dog"]           # "runs" held only run folders: it is no class
    files = [p.decode() for p in src.paths] if stream else src.files
    assert files == ["cat/0.png", "cat/1.png", "cat/2.png", "dog/0.png", "dog/1.png"]
    described = src.describe()
    assert described["excluded_run_folders"] == ["cat/old_run", "runs/first"]
    section = "\n".join(source_section(described))
    assert "left out 2 run folders" in section and "`runs/first`" in section and "`cat/old_run`" in section
    assert any("2 run folders inside the image folder were left out" in line for line in source_summary(described))


def test_a_class_folder_that_is_a_run_folder_is_no_class(tmp_path):
    root = tmp_path / "data"
    _images(root)
    _run_folder(root / "run1")
    src = open_source({"type": "image_folder", "root": str(root), "resize": 10, "crop": 8}, ".")
    assert src.classes == ["cat", "dog"] and src.describe()["excluded_run_folders"] == ["run1"]
    assert all(not f.startswith("run1") for f in src.files)


def test_a_source_inside_a_run_folder_is_refused_when_opened(tmp_path):
    run = tmp_path / "runs" / "old"
    _run_folder(run)
    _images(run / "export" / "images")
    np.save(str(run / "export" / "x.npy"), np.zeros((2, 4, 4, 1), np.uint8))
    np.save(str(tmp_path / "x.npy"), np.zeros((2, 4, 4, 1), np.uint8))
    np.save(str(run / "labels.npy"), np.zeros(2, np.int64))
    np.savez(str(run / "export" / "x.npz"), images=np.zeros((2, 4, 4, 1), np.uint8))
    cases = [
        ({"type": "image_folder", "root": str(run / "export" / "images")}, "data.source.root"),
        ({"type": "image_folder", "root": str(run)}, "data.source.root"),
        ({"type": "npy", "path": str(run / "export" / "x.npy")}, "data.source.path"),
        ({"type": "npy", "path": str(tmp_path / "x.npy"), "labels": str(run / "labels.npy")}, "data.source.labels"),
        ({"type": "npz", "path": str(run / "export" / "x.npz")}, "data.source.path"),
    ]
    for spec, where in cases:
        with pytest.raises(ConfigError) as info:
            open_source(spec, ".")
        message = str(info.value)
        assert message.startswith(where + ": ") and "inside the run folder %s" % run in message, message
        assert MARK_FILE in message and "never data" in message


def _config(folder, source, work_dir):
    raw = {"run": {"name": "r", "work_dir": str(work_dir)},
           "data": {"source": source, "batch_size": 4},
           "preprocess": {"stages": [{"type": "layout", "src": "NHWC", "dst": "NCHW"}], "mean": [0.0], "std": [1.0]},
           "model": {"zoo": "digits_cnn"}}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_a_config_whose_run_folder_lies_inside_its_image_folder_is_refused_at_load(tmp_path):
    root = tmp_path / "data"
    _images(root)
    for work in (root / "runs" / "r", root):
        with pytest.raises(ConfigError) as info:
            load_config(_config(root, {"type": "image_folder", "root": "."}, work))
        message = str(info.value)
        assert "run.work_dir: %s lies inside data.source.root %s" % (work, root) in message, message
        assert "--set run.work_dir=" in message
    load_config(_config(root, {"type": "image_folder", "root": "."}, tmp_path / "runs" / "r"))  # next to it: fine


def test_a_config_whose_source_lies_inside_its_own_run_folder_is_refused_at_load(tmp_path):
    work = tmp_path / "run"
    (work / "data").mkdir(parents=True)
    np.save(str(work / "data" / "x.npy"), np.zeros((2, 4, 4, 1), np.uint8))
    inside = r"data.source.path: %s lies inside run.work_dir %s" % (work / "data" / "x.npy", work)
    with pytest.raises(ConfigError, match=inside):
        load_config(_config(tmp_path, {"type": "npy", "path": "run/data/x.npy"}, work))
    np.save(str(tmp_path / "x.npy"), np.zeros((2, 4, 4, 1), np.uint8))
    load_config(_config(tmp_path, {"type": "npy", "path": "x.npy"}, work))  # next to the run folder: fine
