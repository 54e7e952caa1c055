"""Sources (digits, npy/npz through mmap, numpy arrays, torch tensors) and batching."""
import numpy as np
import pytest
import torch

from pipeline.data.batching import iter_batches, split
from pipeline.data.sources import SOURCES, open_source
from pipeline.errors import ConfigError, DataError, StageError
from pipeline.stages import build_stages
from pipeline.tensors import fingerprint_array, shares_memory


def _images(shape=(10, 6, 5, 3), seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def test_digits_are_scikit_learns_real_digits_as_owned_uint8_nhwc():
    from sklearn.datasets import load_digits
    raw = load_digits()
    src = open_source({"type": "digits"}, ".")
    assert src.kind == "digits" and src.layout == "NHWC"
    assert src.images.shape == (1797, 8, 8, 1) and src.images.dtype == np.uint8
    assert not src.images.flags.writeable
    assert src.labels.dtype == np.int64 and sorted(set(src.labels.tolist())) == list(range(10))
    order = np.random.default_rng(0).permutation(1797)  # shuffled once with the seed
    assert np.array_equal(src.labels, raw.target[order])
    assert np.array_equal(src.images[..., 0], np.rint(raw.images[order] * 255 / 16).astype(np.uint8))
    assert src.images.max() == 255 and src.images.min() == 0
    again = open_source({"type": "digits", "seed": 0}, ".")
    assert fingerprint_array(again.images) == fingerprint_array(src.images)
    other = open_source({"type": "digits", "seed": 1}, ".")
    assert not np.array_equal(other.labels, src.labels)
    d = src.describe()
    assert d["shape"] == [1797, 8, 8, 1] and d["dtype"] == "uint8" and d["sha256"] == fingerprint_array(src.images)


def test_split_cuts_contiguous_ranges_in_order():
    assert split(1797, {"train": 0.6, "calib": 0.1, "eval": 0.3}) == {
        "train": slice(0, 1078), "calib": slice(1078, 1257), "eval": slice(1257, 1797)}
    assert split(10, {"calib": 0.25, "eval": 0.25}) == {"calib": slice(0, 2), "eval": slice(2, 5)}
    assert split(10, {"calib": 0.0, "eval": 1.0}) == {"calib": slice(0, 0), "eval": slice(0, 10)}
    with pytest.raises(ConfigError, match="sum to 1.2"):
        split(10, {"a": 0.6, "b": 0.6})
    with pytest.raises(ConfigError, match=r"data.split.a: a fraction must be a number in \[0, 1\]"):
        split(10, {"a": -0.1})
    with pytest.raises(ConfigError, match="n must be"):
        split(-1, {"a": 0.5})


def test_iter_batches_yields_views_and_labels_in_order():
    images = _images()
    labels = np.arange(10) % 3
    src = open_source({"type": "array", "images": images, "labels": labels}, ".")
    parts = split(len(src), {"calib": 0.3, "eval": 0.7})
    got = list(iter_batches(src, parts["eval"], 3))
    assert [tuple(v.shape) for v, _ in got] == [(3, 6, 5, 3), (3, 6, 5, 3), (1, 6, 5, 3)]
    for i, (view, lab) in enumerate(got):
        assert shares_memory(view, images)
        assert np.array_equal(view.numpy(), images[3 + 3 * i:min(10, 6 + 3 * i)])
        assert lab.dtype == np.int64 and np.array_equal(lab, labels[3 + 3 * i:min(10, 6 + 3 * i)])
    assert len(list(iter_batches(src, parts["eval"], 3, limit=2))) == 2
    assert list(iter_batches(src, parts["eval"], 3, limit=0)) == []
    assert list(iter_batches(src, slice(4, 4), 3)) == []
    with pytest.raises(ConfigError, match="batch_size"):
        next(iter_batches(src, parts["eval"], 0))
    with pytest.raises(DataError, match="step 1"):
        next(iter_batches(src, slice(0, 10, 2), 3))
    with pytest.raises(DataError, match="within the source"):
        next(iter_batches(src, slice(0, 11), 3))


def test_npy_is_memory_mapped_read_only_and_never_copied(tmp_path):
    images = _images()
    np.save(str(tmp_path / "x.npy"), images)
    np.save(str(tmp_path / "y.npy"), np.arange(10, dtype=np.int32))
    src = open_source({"type": "npy", "path": "x.npy", "labels": "y.npy"}, str(tmp_path))
    assert isinstance(src.images, np.memmap) and not src.images.flags.writeable
    assert src.mmap and src.path == str(tmp_path / "x.npy")
    assert shares_memory(src.tensor, src.images)
    view, lab = next(iter_batches(src, slice(2, 6), 4))
    assert shares_memory(view, src.images) and np.array_equal(view.numpy(), images[2:6])
    assert lab.dtype == np.int64 and lab.tolist() == [2, 3, 4, 5]
    assert src.describe()["mmap"] is True


def test_npz_members_are_memory_mapped_when_stored_and_read_when_compressed(tmp_path):
    images, labels = _images(), np.arange(10)
    np.savez(str(tmp_path / "d.npz"), images=images, labels=labels)
    np.savez_compressed(str(tmp_path / "c.npz"), x=images.transpose(0, 3, 1, 2))
    src = open_source({"type": "npz", "path": "d.npz"}, str(tmp_path))
    assert isinstance(src.images, np.memmap) and src.mmap and src.note == ""
    assert np.array_equal(src.images, images) and np.array_equal(src.labels, labels)
    comp = open_source({"type": "npz", "path": "c.npz", "images_key": "x", "layout": "NCHW"}, str(tmp_path))
    assert not comp.mmap and "compressed" in comp.note and comp.labels is None
    assert np.array_equal(comp.images, images.transpose(0, 3, 1, 2))
    with pytest.raises(ConfigError, match="has no member 'pixels'; members: images, labels"):
        open_source({"type": "npz", "path": "d.npz", "images_key": "pixels"}, str(tmp_path))


def test_numpy_sources_read_only_and_channel_flipped_without_a_copy():
    images = _images()
    images.flags.writeable = False
    src = open_source({"type": "array", "images": images}, ".")
    assert src.channel_order is None and shares_memory(src.tensor, images)
    bgr = _images()
    flipped = bgr[..., ::-1]
    fsrc = open_source({"type": "array", "images": flipped}, ".")
    assert fsrc.channel_order == [2, 1, 0] and fsrc.images is flipped
    assert shares_memory(fsrc.tensor, bgr) and np.array_equal(fsrc.tensor.numpy(), bgr)
    compose = build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"}], source=fsrc)
    assert compose.boundary_channel_order == [2, 1, 0]
    # the channel order travels with each batch, of either kind of part
    batch = next(fsrc.batches(slice(0, 4), 4))
    assert batch.channel_order == [2, 1, 0] and batch.rows is None and shares_memory(batch.view, bgr)
    assert next(fsrc.batches(np.arange(4), 4)).channel_order == [2, 1, 0]
    assert next(src.batches(slice(0, 4), 4)).channel_order is None
    compose(batch.view, channel_order=batch.channel_order)  # the stages built for this source take it
    with pytest.raises(StageError, match=r"flipped .*build_stages\(specs, source=source\)"):
        build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"}])(batch.view, channel_order=batch.channel_order)
    with pytest.raises(DataError, match=r"axis \[1\] of the NHWC images has a negative stride"):
        open_source({"type": "array", "images": bgr[:, ::-1]}, ".")


def test_torch_tensor_sources_of_any_memory_format():
    t = torch.from_numpy(_images((4, 3, 6, 5))).contiguous(memory_format=torch.channels_last)
    src = open_source({"type": "tensor", "images": t, "layout": "NCHW", "labels": torch.arange(4)}, ".")
    assert src.tensor.data_ptr() == t.data_ptr() and src.labels.dtype == np.int64
    view, _ = next(iter_batches(src, slice(0, 4), 2))
    assert view.stride() == t[:2].stride() and view.data_ptr() == t.data_ptr()
    assert src.describe()["dtype"] == "uint8"


@pytest.mark.parametrize("spec, error, message", [
    ({"type": "digit"}, ConfigError,
     "unknown type 'digit'; valid types: array, digits, image_folder, npy, npz, tensor; did you mean 'digits'"),
    ({"type": "npy", "pth": "x.npy"}, ConfigError, r"data.source.pth: unknown key.*did you mean 'path'"),
    ({"type": "npy", "path": "missing.npy"}, ConfigError, "does not exist"),
    ({"type": "digits", "seed": "1"}, ConfigError, "seed: expected an int"),
    ({"type": "array", "images": np.zeros((2, 3, 3))}, DataError, "4-D"),
    ({"type": "array", "images": np.zeros((2, 3, 3, 1)), "layout": "HWC"}, ConfigError, "layout"),
    ({"type": "array", "images": np.zeros((2, 3, 3, 1)), "labels": [1, 2, 3]}, DataError, "one entry per image"),
    ({"type": "array", "images": torch.zeros(2, 3, 3, 1)}, ConfigError, "use type 'tensor'"),
    ({"type": "tensor", "images": np.zeros((2, 3, 3, 1))}, ConfigError, "use type 'array'"),
])
def test_source_errors_name_the_problem(spec, error, message):
    with pytest.raises(error, match=message):
        open_source(spec, ".")


def test_the_source_registry_is_a_literal_table():
    assert sorted(SOURCES) == ["array", "digits", "image_folder", "npy", "npz", "tensor"]


def test_a_directory_as_npy_or_npz_path_says_it_is_a_directory(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for kind, expected in (("npy", "a .npy file written by numpy.save"), ("npz", "a .npz file written by numpy.savez")):
        with pytest.raises(ConfigError) as info:
            open_source({"type": kind, "path": "photos"}, str(tmp_path))
        msg = str(info.value)
        assert msg.startswith("data.source.path: %s is a directory; %s is expected" % (folder, expected)), msg
        assert "type: image_folder (root: %s)" % folder in msg and "does not exist" not in msg
    np.save(str(tmp_path / "x.npy"), _images())
    with pytest.raises(ConfigError) as info:
        open_source({"type": "npy", "path": "x.npy", "labels": "photos"}, str(tmp_path))
    assert str(info.value) == ("data.source.labels: %s is a directory; a .npy file written by numpy.save is "
                               "expected" % folder)


def _not_npy_files(tmp_path):
    import pickle
    (tmp_path / "text.npy").write_text("0 1 2 3\n")
    with open(str(tmp_path / "pickled.npy"), "wb") as f:
        pickle.dump([[1, 2], [3, 4]], f)
    (tmp_path / "empty.npy").write_bytes(b"")
    return {"text.npy": "it starts with b'0 1 2 '", "pickled.npy": "it starts with b'\\x80",
            "empty.npy": "it is empty"}


def test_a_file_that_is_not_a_npy_array_is_a_clear_data_error(tmp_path):
    np.save(str(tmp_path / "x.npy"), _images())
    for name, seen in _not_npy_files(tmp_path).items():
        for spec, where in (({"type": "npy", "path": name}, "data.source.path"),
                            ({"type": "npy", "path": "x.npy", "labels": name}, "data.source.labels")):
            with pytest.raises(DataError) as info:
                open_source(spec, str(tmp_path))
            msg = str(info.value)
            assert msg.startswith("%s: %s is not a .npy array written by numpy.save (%s" % (
                where, tmp_path / name, seen)), msg
            assert "refused on purpose" in msg and "allow_pickle=False" in msg
            assert "If you trust the file" not in msg and "load it unsafely" not in msg


def test_object_arrays_are_refused_on_purpose_in_npy_and_npz(tmp_path):
    objects = np.empty((2, 2, 2, 1), dtype=object)
    objects[...] = 1
    np.save(str(tmp_path / "o.npy"), objects, allow_pickle=True)
    with pytest.raises(DataError) as info:
        open_source({"type": "npy", "path": "o.npy"}, str(tmp_path))
    assert "%s holds an array of Python objects (dtype object)" % (tmp_path / "o.npy") in str(info.value)
    assert "refused on purpose" in str(info.value)
    for save, name in ((np.savez, "s.npz"), (np.savez_compressed, "c.npz")):  # memory-mapped and read members
        save(str(tmp_path / name), images=objects, allow_pickle=True)
        with pytest.raises(DataError, match=r"member images\.npy holds an array of Python objects"):
            open_source({"type": "npz", "path": name}, str(tmp_path))


def test_npy_and_npz_swapped_or_truncated(tmp_path):
    images = _images()
    np.savez(str(tmp_path / "d.npz"), images=images)
    with pytest.raises(ConfigError, match=r"d\.npz is a \.npz archive .*use type: npz"):
        open_source({"type": "npy", "path": "d.npz"}, str(tmp_path))
    np.save(str(tmp_path / "x.npy"), images)
    with pytest.raises(ConfigError, match=r"x\.npy is a \.npy array, not a \.npz archive; use type: npy"):
        open_source({"type": "npz", "path": "x.npy"}, str(tmp_path))
    (tmp_path / "t.npz").write_text("not a zip")
    with pytest.raises(DataError, match=r"t\.npz is not a \.npz archive written by numpy\.savez"):
        open_source({"type": "npz", "path": "t.npz"}, str(tmp_path))
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-10])
    with pytest.raises(DataError) as info:
        open_source({"type": "npy", "path": "cut.npy"}, str(tmp_path))
    assert "is truncated: its header says shape (10, 6, 5, 3) dtype uint8 (%d bytes of data), but only %d bytes " \
        "follow" % (images.nbytes, images.nbytes - 10) in str(info.value)


def test_a_source_says_its_channel_order_when_it_knows_it():
    assert open_source({"type": "digits"}, ".").color == "L"
    images = _images()
    assert open_source({"type": "array", "images": images}, ".").color is None
    assert open_source({"type": "array", "images": images, "color": "BGR"}, ".").color == "BGR"
    with pytest.raises(ConfigError, match="data.source.color: expected one of RGB, BGR, L"):
        open_source({"type": "array", "images": images, "color": "rgb"}, ".")
    with pytest.raises(ConfigError, match="L means 1 channel.*the images have 3"):
        open_source({"type": "array", "images": images, "color": "L"}, ".")


def test_digits_are_read_as_scikit_learn_loads_them_without_importing_it():
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from pipeline.data.sources import _sklearn_digits
    images, target = _sklearn_digits()
    ref = load_digits()
    assert images.dtype == ref.images.dtype and np.array_equal(images, ref.images)
    assert target.dtype == np.int64 and np.array_equal(target, ref.target)
    code = ("import sys\nfrom pipeline.data.sources import open_source\n"
            "s = open_source({'type': 'digits'}, '.')\nprint(len(s), 'sklearn' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    assert out.split() == ["1797", "False"]


def test_report_versions_name_packages_the_run_did_not_import():
    from importlib import metadata

    from pipeline.runner.report import versions
    v = versions()
    assert v["sklearn"] == metadata.version("scikit-learn") and v["yaml"] == metadata.version("PyYAML")
    assert v["torch"] == torch.__version__


def test_a_compressed_npz_member_declaring_more_than_it_holds_is_refused_before_allocation(tmp_path):
    import io
    import zipfile
    from numpy.lib import format as npy_format
    header = io.BytesIO()
    npy_format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (100000, 100000, 3)})
    with zipfile.ZipFile(str(tmp_path / "bomb.npz"), "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("images.npy", header.getvalue() + b"\0" * 64)  # 120 GB declared, 64 bytes held
    with pytest.raises(DataError, match=r"declares \(100000, 100000, 3\) float32 .* but the member holds"):
        open_source({"type": "npz", "path": str(tmp_path / "bomb.npz"), "layout": "NHWC"}, ".")
