"""The image_folder source: class folders decoded with Pillow into one owned uint8 NHWC array."""
import hashlib
import json
import os
import shutil
import socket

import numpy as np
import pytest
import yaml

from PIL import Image

import pipeline
from pipeline.data.batching import iter_batches
from pipeline.data.decode import center_box, resized_size
from pipeline.data.sources import SOURCES, open_source
from pipeline.errors import ConfigError, DataError
from pipeline.tensors import fingerprint_array, shares_memory

BILINEAR = getattr(Image, "Resampling", Image).BILINEAR


def _rgb(h, w, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def _save(root, rel, pixels, **kwargs):
    path = os.path.join(str(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(pixels).save(path, **kwargs)
    return path


def _folder(spec_root, **options):
    return open_source(dict({"type": "image_folder", "root": str(spec_root)}, **options), ".")


def _row(src, rel):
    return src.images[src.files.index(rel)]


def _tree_hashes(root):
    out = {}
    for folder, _, names in os.walk(str(root)):
        for name in names:
            p = os.path.join(folder, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, str(root))] = (hashlib.sha256(f.read()).hexdigest(), os.stat(p).st_mtime_ns)
    return out


# ----------------------------------------------------------------------------- generated files

def test_png_pixels_arrive_exactly_with_sorted_classes_and_int64_labels(tmp_path):
    arrays = {"b/2.png": _rgb(6, 10, 0), "b/1.png": _rgb(6, 10, 1), "a/x.png": _rgb(6, 10, 2)}
    for rel, px in arrays.items():
        _save(tmp_path, rel, px)
    src = _folder(tmp_path, shuffle=False)
    assert "image_folder" in SOURCES and src.kind == "image_folder" and src.layout == "NHWC"
    assert src.classes == ["a", "b"]
    assert src.files == ["a/x.png", "b/1.png", "b/2.png"]         # classes by name, then files by name
    assert src.labels.dtype == np.int64 and src.labels.tolist() == [0, 1, 1]
    assert src.images.shape == (3, 6, 10, 3) and src.images.dtype == np.uint8
    for i, rel in enumerate(src.files):
        assert np.array_equal(src.images[i], arrays[rel])           # PNG is lossless: the very bytes written


def test_resize_and_center_crop_give_pillows_values_with_torchvision_geometry(tmp_path):
    px = _rgb(40, 60, 3)                      # H=40, W=60
    _save(tmp_path, "c/img.png", px)
    # torchvision Resize(20): the shorter side (H) becomes 20, W = int(20 * 60 / 40) = 30
    assert resized_size((40, 60), 20) == (20, 30) and resized_size((60, 40), 20) == (30, 20)
    assert resized_size((41, 60), 20) == (20, 29)                  # int(29.27): truncated
    # CenterCrop offsets int(round((H - h) / 2)): 2.5 rounds to 2 and 7.5 to 8 (half to even)
    assert center_box((20, 30), (16, 16)) == (2, 7) and center_box((20, 30), (15, 15)) == (2, 8)
    resized = Image.fromarray(px).resize((30, 20), resample=BILINEAR)
    src = _folder(tmp_path, resize=20, crop=[15, 15])
    assert src.images.shape == (1, 15, 15, 3)
    assert np.array_equal(src.images[0], np.asarray(resized)[2:17, 8:23])
    src = _folder(tmp_path, resize=20, crop=16)
    assert np.array_equal(src.images[0], np.asarray(resized)[2:18, 7:23])
    src = _folder(tmp_path, resize=[10, 12])                       # [h, w]: exactly that size
    assert np.array_equal(src.images[0], np.asarray(Image.fromarray(px).resize((12, 10), resample=BILINEAR)))
    src = _folder(tmp_path, crop=[40, 60], resize=40)              # shorter side already 40: untouched
    assert np.array_equal(src.images[0], px)
    assert src.describe()["settings"]["crop"] == [40, 60]


def test_jpeg_and_bmp_decode_as_pillow_does_and_mode_l_gives_one_channel(tmp_path):
    px = _rgb(24, 32, 4)
    jpg = _save(tmp_path, "cls/a.JPG", px, quality=85)            # extension matched case-insensitively
    bmp = _save(tmp_path, "cls/b.bmp", px)
    src = _folder(tmp_path, shuffle=False)
    assert src.files == ["cls/a.JPG", "cls/b.bmp"]
    with Image.open(jpg) as im:
        assert np.array_equal(src.images[0], np.asarray(im.convert("RGB")))
    assert np.array_equal(src.images[1], px)
    gray = _folder(tmp_path, mode="L", shuffle=False)
    assert gray.images.shape == (2, 24, 32, 1)
    with Image.open(bmp) as im:
        assert np.array_equal(gray.images[1, ..., 0], np.asarray(im.convert("L")))
    only_bmp = _folder(tmp_path, extensions=["BMP"])
    assert only_bmp.files == ["cls/b.bmp"]


def test_order_is_a_seeded_permutation_and_limit_per_class_takes_the_first_files(tmp_path):
    for c in "abc":
        for i in range(5):
            _save(tmp_path, "%s/%d.png" % (c, i), np.full((4, 4, 3), 10 * i + ord(c) - 97, np.uint8))
    _save(tmp_path, ".hidden/0.png", _rgb(4, 4, 0))               # hidden folders and files are ignored
    _save(tmp_path, "a/._0.png", _rgb(4, 4, 0))
    (tmp_path / "loose.png").write_bytes(b"ignored: not in a class folder")
    sorted_src = _folder(tmp_path, shuffle=False)
    assert sorted_src.classes == ["a", "b", "c"] and len(sorted_src) == 15
    shuffled = _folder(tmp_path)
    perm = np.random.default_rng(0).permutation(15)
    assert shuffled.files == [sorted_src.files[i] for i in perm]
    assert np.array_equal(shuffled.labels, sorted_src.labels[perm])
    assert np.array_equal(shuffled.images, sorted_src.images[perm])
    assert fingerprint_array(_folder(tmp_path).images) == fingerprint_array(shuffled.images)
    assert _folder(tmp_path, seed=1).files != shuffled.files
    limited = _folder(tmp_path, limit_per_class=2, shuffle=False)
    assert limited.files == ["a/0.png", "a/1.png", "b/0.png", "b/1.png", "c/0.png", "c/1.png"]
    d = limited.describe()
    assert d["classes"] == ["a", "b", "c"] and d["class_counts"] == {"a": 2, "b": 2, "c": 2}
    assert d["shape"] == [6, 4, 4, 3] and d["skipped"] == 0 and d["skipped_files"] == []


def test_the_array_is_owned_read_only_and_batches_are_views_of_it(tmp_path):
    for i in range(7):
        _save(tmp_path, "k%d/%d.png" % (i % 2, i), _rgb(5, 5, i))
    src = _folder(tmp_path)
    assert src.images.base is None and not src.images.flags.writeable
    with pytest.raises(ValueError):
        src.images[0, 0, 0, 0] = 1
    batches = list(iter_batches(src, slice(0, 7), 3))
    assert [tuple(b.shape) for b, _ in batches] == [(3, 5, 5, 3), (3, 5, 5, 3), (1, 5, 5, 3)]
    assert all(shares_memory(b, src.images) for b, _ in batches)
    assert all(lab.dtype == np.int64 for _, lab in batches)


def test_no_progress_bar_when_stderr_is_not_a_terminal_and_describe_is_json(tmp_path, capfd):
    for i in range(4):
        _save(tmp_path, "c%d/%d.png" % (i % 2, i), _rgb(5, 5, i))
    src = _folder(tmp_path)
    assert capfd.readouterr().err == ""                            # pytest's stderr is a pipe: no tqdm output
    d = json.loads(json.dumps(src.describe()))
    assert d["kind"] == "image_folder" and d["path"] == str(tmp_path) and d["sha256"] == fingerprint_array(src.images)
    assert d["settings"] == {"resize": None, "crop": None, "mode": "RGB",
                             "extensions": [".bmp", ".jpeg", ".jpg", ".png"], "skip_corrupt": False, "limit_per_class": None, "shuffle": True, "seed": 0,
                             "max_pixels": 89478485}


def test_relative_root_resolves_against_the_config_folder(tmp_path):
    _save(tmp_path, "data/imgs/c/0.png", _rgb(3, 3, 0))
    src = open_source({"type": "image_folder", "root": "data/imgs"}, str(tmp_path))
    assert src.root == str(tmp_path / "data" / "imgs") and src.path == src.root


# ----------------------------------------------------------------------------- real photos

@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails: the bundled photos must load without a download."""
    def refuse(*args, **kwargs):
        raise AssertionError("a network connection was attempted")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_real_photos_bundled_with_scikit_image(tmp_path, no_network):
    skdata = pytest.importorskip("skimage.data", reason="scikit-image is not installed (pip install -e '.[dev]')")
    photos = {"astronaut": skdata.astronaut(), "coffee": skdata.coffee(), "cat": skdata.chelsea(),
              "rocket": skdata.rocket()}
    assert {k: v.shape for k, v in photos.items()} == {
        "astronaut": (512, 512, 3), "coffee": (400, 600, 3), "cat": (300, 451, 3), "rocket": (427, 640, 3)}
    # the photos' own files from the scikit-image wheel, copied unchanged: astronaut/chelsea/coffee are PNG,
    # rocket is a JPEG. scikit-image decodes them with its own reader (imageio), we with Pillow.
    data_dir = os.path.dirname(skdata.__file__)
    for cls, name in [("astronaut", "astronaut.png"), ("coffee", "coffee.png"), ("cat", "chelsea.png"),
                      ("rocket", "rocket.jpg")]:
        os.makedirs(str(tmp_path / "photos" / cls))
        shutil.copy(os.path.join(data_dir, name), str(tmp_path / "photos" / cls / name))
    # full size, one class at a time (sizes differ): the pixels skimage.data returns, exactly
    for cls, name in [("astronaut", "astronaut.png"), ("rocket", "rocket.jpg")]:
        one = tmp_path / ("only_" + cls)
        shutil.copytree(str(tmp_path / "photos" / cls), str(one / cls))
        src = _folder(one)
        assert np.array_equal(src.images[0], photos[cls])
    # the classic ImageNet evaluation geometry: Resize(256) + CenterCrop(224)
    src = _folder(tmp_path / "photos", resize=256, crop=224, shuffle=False)
    assert src.classes == ["astronaut", "cat", "coffee", "rocket"]
    assert src.images.shape == (4, 224, 224, 3) and src.labels.tolist() == [0, 1, 2, 3]
    # coffee is 400x600: shorter side 256 -> 256x384; crop offsets (16, 80)
    coffee = np.asarray(Image.fromarray(photos["coffee"]).resize((384, 256), resample=BILINEAR))
    assert np.array_equal(_row(src, "coffee/coffee.png"), coffee[16:240, 80:304])
    # chelsea is 300x451: 256x384 (int(256 * 451 / 300) = 384); crop (16, 80)
    cat = np.asarray(Image.fromarray(photos["cat"]).resize((384, 256), resample=BILINEAR))
    assert np.array_equal(_row(src, "cat/chelsea.png"), cat[16:240, 80:304])
    # a real photo resized stays close to the original's mean color (a sanity check on the channel order)
    for cls, name in [("astronaut", "astronaut.png"), ("rocket", "rocket.jpg")]:
        got = _row(src, "%s/%s" % (cls, name)).reshape(-1, 3).mean(0)
        assert np.abs(got - photos[cls].reshape(-1, 3).mean(0)).max() < 25, cls


# ----------------------------------------------------------------------------- errors

def test_a_truncated_jpeg_and_a_garbage_file_are_named_or_skipped_and_counted(tmp_path):
    for i in range(3):
        _save(tmp_path, "good/%d.jpg" % i, _rgb(16, 16, i))
    whole = _save(tmp_path, "bad/cut.jpg", _rgb(64, 64, 9), quality=95)
    with open(whole, "rb") as f:
        data = f.read()
    with open(whole, "wb") as f:
        f.write(data[:len(data) // 2])                             # truncated: the header is intact
    _save(tmp_path, "bad/fine.jpg", _rgb(16, 16, 5))
    with pytest.raises(DataError) as err:
        _folder(tmp_path, resize=16, crop=16)
    msg = str(err.value)
    assert os.path.join(str(tmp_path), "bad", "cut.jpg") in msg and "truncated" in msg
    assert "skip_corrupt: true" in msg
    (tmp_path / "good" / "junk.png").write_bytes(b"this is not a PNG file at all" * 10)
    with pytest.raises(DataError) as err:
        _folder(tmp_path, resize=16, crop=16, shuffle=False)
    # headers are read first, so the file that is not an image at all is found before the truncated one
    assert os.path.join(str(tmp_path), "good", "junk.png") in str(err.value)
    assert "cannot identify image file" in str(err.value)
    src = _folder(tmp_path, resize=16, crop=16, skip_corrupt=True, shuffle=False)
    assert src.files == ["bad/fine.jpg", "good/0.jpg", "good/1.jpg", "good/2.jpg"]
    assert src.labels.tolist() == [0, 1, 1, 1] and src.images.shape == (4, 16, 16, 3)
    d = src.describe()
    assert d["skipped"] == 2 and [s["file"] for s in d["skipped_files"]] == ["bad/cut.jpg", "good/junk.png"]
    assert "truncated" in d["skipped_files"][0]["error"] and "2 unreadable" in d["note"]
    assert d["class_counts"] == {"bad": 1, "good": 3}
    with Image.open(str(tmp_path / "good" / "2.jpg")) as im:
        assert np.array_equal(src.images[3], np.asarray(im.convert("RGB")))


def test_mixed_sizes_without_resize_or_crop_list_the_sizes(tmp_path):
    _save(tmp_path, "a/0.png", _rgb(40, 60, 0))
    _save(tmp_path, "a/1.png", _rgb(40, 60, 1))
    _save(tmp_path, "b/0.png", _rgb(30, 30, 2))
    with pytest.raises(DataError) as err:
        _folder(tmp_path)
    msg = str(err.value)
    assert "2 different sizes" in msg and "40x60 (2 file(s)" in msg and "30x30 (1 file(s), e.g. b/0.png)" in msg
    assert "crop" in msg and "resize" in msg
    with pytest.raises(DataError, match="with resize=20 and no crop"):
        _folder(tmp_path, resize=20)                               # 20x30 and 20x20: still mixed
    assert _folder(tmp_path, resize=20, crop=20).images.shape == (3, 20, 20, 3)
    with pytest.raises(DataError, match=r"smaller than crop 32x32; set data.source.resize"):
        _folder(tmp_path, crop=32)                                 # the 30x30 image cannot give a 32x32 crop


def test_folder_structure_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist.*make_sample_images"):
        _folder(tmp_path / "nope")
    (tmp_path / "file.png").write_bytes(b"x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        _folder(tmp_path / "file.png")
    with pytest.raises(DataError, match=r"no class folders.*1 image file\(s\) directly \(e.g. file.png\)"):
        _folder(tmp_path)
    _save(tmp_path, "full/0.png", _rgb(4, 4, 0))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    with pytest.raises(DataError) as err:
        _folder(tmp_path)
    assert os.path.join(str(tmp_path), "empty") in str(err.value)
    assert "holds no image files" in str(err.value) and "1 other file(s)" in str(err.value)


def test_bad_options_are_config_errors(tmp_path):
    _save(tmp_path, "c/0.png", _rgb(4, 4, 0))
    with pytest.raises(ConfigError, match=r"data.source.crp: unknown key.*did you mean 'crop'"):
        _folder(tmp_path, crp=3)
    with pytest.raises(ConfigError, match="data.source.crop: expected an int >= 1 or"):
        _folder(tmp_path, crop=[3])
    with pytest.raises(ConfigError, match="data.source.resize"):
        _folder(tmp_path, resize=0)
    with pytest.raises(ConfigError, match="data.source.mode: expected one of L, RGB"):
        _folder(tmp_path, mode="RGBA")
    with pytest.raises(ConfigError, match="data.source.skip_corrupt: expected true or false"):
        _folder(tmp_path, skip_corrupt="yes")
    with pytest.raises(ConfigError, match="data.source.limit_per_class"):
        _folder(tmp_path, limit_per_class=0)
    with pytest.raises(ConfigError, match="data.source.extensions"):
        _folder(tmp_path, extensions=[])
    with pytest.raises(ConfigError, match="missing required key"):
        open_source({"type": "image_folder"}, ".")


# ----------------------------------------------------------------------------- end to end

@pytest.mark.slow
def test_pipeline_end_to_end_on_an_image_folder_leaves_the_files_unchanged(tmp_path):
    rng = np.random.default_rng(0)
    colors = {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200)}
    data = tmp_path / "data"
    for cls, color in colors.items():
        for i in range(20):
            px = np.clip(np.array(color) + rng.normal(0, 25, size=(10 + i % 3, 12, 3)), 0, 255).astype(np.uint8)
            _save(data, "%s/%02d.%s" % (cls, i, "png" if i % 2 else "jpg"), px)
    before = _tree_hashes(data)
    config = {
        "run": {"name": "folder_e2e", "work_dir": str(tmp_path / "run"), "seed": 0},
        "data": {"source": {"type": "image_folder", "root": "data", "resize": 10, "crop": 8},
                 "split": {"train": 0.5, "calib": 0.2, "eval": 0.3}, "batch_size": 8},
        "preprocess": {"stages": [{"type": "layout", "src": "NHWC", "dst": "NCHW"}],
                       "mean": [127.5, 127.5, 127.5], "std": [64.0, 64.0, 64.0]},
        "model": {"zoo": "digits_cnn", "kwargs": {"in_channels": 3, "num_classes": 3},
                  "train": {"epochs": 8, "batch_size": 16, "lr": 0.01}},
        "quantizer": {"backend": "sim", "max_accuracy_drop": 0.2},
        "compile": {"target": "DPUCZDX8G_ISA1_B4096"},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    report = pipeline.run(str(path))
    assert _tree_hashes(data) == before                            # the caller's files: same bytes, same mtimes
    assert report["eval_images"] == 18                              # 30 % of 60
    assert report["float_accuracy"] >= 0.9                          # three well separated colors
    assert report["float_accuracy"] - report["quant_accuracy"] <= 0.2
    assert report["ledger"]["copies_per_batch"] == 1
    assert report["onnx_agreement"]["onnx_exact"]["max_abs_diff"] == 0
    assert report["source"]["unchanged"] is True
    src = open_source(dict(config["data"]["source"], root=str(data)), ".")
    assert report["source"]["sha256_after"] == fingerprint_array(src.images)


# ----------------------------------------------------------------------------- hostile trees

def test_a_fifo_named_like_an_image_is_not_decoded_and_a_link_loop_is_walked_once(tmp_path):
    root = tmp_path / "imgs"
    _save(root, "cat/a.png", _rgb(4, 4, 1))
    _save(root, "dog/b.png", _rgb(4, 4, 2))
    os.mkfifo(str(root / "cat" / "blocked.png"))  # opening it for reading would wait forever
    os.symlink(str(root / "cat"), str(root / "cat" / "loop"))  # a link back up: a loop
    src = _folder(root)
    assert src.files == ["cat/a.png", "dog/b.png"]


def test_a_link_from_one_class_folder_into_another_is_refused(tmp_path):
    root = tmp_path / "imgs"
    _save(root, "cat/a.png", _rgb(4, 4, 1))
    _save(root, "dog/b.png", _rgb(4, 4, 2))
    os.symlink(str(root / "dog"), str(root / "cat" / "more"))
    with pytest.raises(DataError, match="reaches into the class folder .*dog"):
        _folder(root)
