"""Bounded input and errors that reach the user as one clear line (issue 14, items 3, 5 and 6):
a YAML alias bomb, an .npz member shorter than its header, refused and truncated torch files, a
full disk, a closed pipe."""
import io
import os
import pickle
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import torch
import yaml

from tests.support import REPO

from pipeline.config import load_config
from pipeline.data.sources import open_source
from pipeline.errors import ConfigError, DataError, PipelineError, QuantizationError, StorageError
from pipeline.config.yamlsafe import load_bounded


def _bomb(levels=9, width=9):
    lines = ['a0: &a0 [%s]' % ", ".join(['"lol"'] * width)]
    for i in range(1, levels + 1):
        lines.append("a%d: &a%d [%s]" % (i, i, ", ".join(["*a%d" % (i - 1)] * width)))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- item 3: YAML bounds

def test_a_yaml_alias_bomb_is_refused_at_once_with_the_line(tmp_path):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text("run: {name: bomb}\n" + _bomb())
    # in a child process with a deadline: before the fix the config was expanded while validated and
    # formatted into the error (minutes, gigabytes), which must not hang the test session
    code = ("import sys, time\nfrom pipeline.config import load_config\nfrom pipeline.errors import ConfigError\n"
            "t = time.perf_counter()\ntry:\n    load_config(sys.argv[1])\nexcept ConfigError as e:\n"
            "    print('%.3f' % (time.perf_counter() - t)); print(e)\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, str(cfg)], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("loading a 1 KiB alias bomb did not finish within 60 s")
    seconds, message = out.stdout.split("\n", 1)
    assert float(seconds) < 2.0
    assert "was refused: the document expands to more than 100000 values" in message and "line 7" in message, message
    assert len(message) < 1000


def test_the_bound_counts_expansion_not_text():
    # nine levels of nine: 9**10 values; four levels (9**5) stay under the bound and load as shared lists
    with pytest.raises(yaml.YAMLError, match="billion laughs"):
        load_bounded(_bomb(9))
    small = load_bounded(_bomb(4))
    assert len(small["a4"]) == 9 and small["a4"][0][0][0][0] == ["lol"] * 9


def test_anchors_and_merge_keys_still_load():
    raw = load_bounded("base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  z: 3\nlist: [*b, *b]\n")
    assert raw["other"] == {"x": 1, "y": [1, 2], "z": 3} and raw["list"] == [raw["base"]] * 2


@pytest.mark.parametrize("text, match", [
    ("a: &a [1, *a]\n", "refers to a node that contains it"),
    ("[" * 200 + "]" * 200, "nests deeper than 64 levels"),
])
def test_recursive_and_deep_documents_are_refused(text, match):
    with pytest.raises(yaml.YAMLError, match=match):
        load_bounded(text)


def test_a_bomb_in_a_set_override_is_refused(tmp_path):
    cfg = os.path.join(REPO, "configs", "digits_sim_zcu102.yaml")
    flow = "{%s}" % ", ".join(line.replace(": ", ": ", 1) for line in _bomb().strip().splitlines())
    with pytest.raises(ConfigError, match="billion laughs"):
        load_config(cfg, ["model.kwargs.junk=" + flow])


def test_a_huge_config_file_is_refused_before_it_is_read(tmp_path):
    cfg = tmp_path / "huge.yaml"
    cfg.write_text("run: {name: x}\n# " + "x" * (5 << 20) + "\n")
    with pytest.raises(ConfigError, match="more than the 4194304 a config may have"):
        load_config(str(cfg))


# ---------------------------------------------------------------------------- item 5: .npz members

def _npy_bytes(array, header_shape=None):
    """The .npy bytes of ``array`` with the header claiming ``header_shape`` (default: its own)."""
    buf = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False,
              "shape": tuple(header_shape or array.shape)}
    np.lib.format.write_array_header_1_0(buf, header)
    buf.write(np.ascontiguousarray(array).tobytes())
    return buf.getvalue()


def test_an_npz_member_shorter_than_its_header_is_refused_like_numpy_does(tmp_path):
    images = np.arange(10 * 8 * 8, dtype=np.uint8).reshape(10, 8, 8, 1)
    after = np.full((10, 8, 8, 1), 255, np.uint8)  # the next member, which a map past the end would read
    path = str(tmp_path / "short.npz")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("images.npy", _npy_bytes(images, header_shape=(20, 8, 8, 1)))
        zf.writestr("other.npy", _npy_bytes(after))
    with pytest.raises(ValueError):  # numpy itself refuses the member
        with np.load(path) as npz:
            npz["images"]
    with pytest.raises(DataError, match=r"images.npy is shorter than its .npy header says: shape \(20, 8, 8, 1\) "
                                        r"dtype uint8 needs 1280 bytes of data, but the member holds 640"):
        open_source({"type": "npz", "path": path}, str(tmp_path))


def test_a_complete_stored_npz_member_is_still_memory_mapped(tmp_path):
    images = np.arange(10 * 8 * 8, dtype=np.uint8).reshape(10, 8, 8, 1)
    np.savez(str(tmp_path / "ok.npz"), images=images, labels=np.arange(10))
    src = open_source({"type": "npz", "path": "ok.npz"}, str(tmp_path))
    assert src.mmap and np.array_equal(np.asarray(src.images), images)


def test_a_compressed_member_shorter_than_its_header_is_a_data_error(tmp_path):
    path = str(tmp_path / "short_c.npz")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("images.npy", _npy_bytes(np.zeros((10, 8, 8, 1), np.uint8), header_shape=(20, 8, 8, 1)))
    with pytest.raises(DataError, match=r"images.npy: its header declares \(20, 8, 8, 1\) uint8 .* holds 768 bytes"):
        open_source({"type": "npz", "path": path}, str(tmp_path))


# ---------------------------------------------------------------------------- item 6: errors

class _Evil:
    def __reduce__(self):
        return (os.system, ("true",))


def test_a_refused_bias_corr_is_a_quantization_error_without_torch_advice(tmp_path):
    from pipeline.quantizers.quant_info import read_bias_corr
    torch.save({"Net::nndct_conv2d_0": _Evil()}, str(tmp_path / "bias_corr.pth"))
    with pytest.raises(QuantizationError) as info:
        read_bias_corr(str(tmp_path))
    text = str(info.value)
    assert "was refused: loading it could run code" in text and "posix.system" in text
    assert "weights_only" not in text and "Run the calibration again" in text


def test_a_truncated_checkpoint_is_called_truncated(tmp_path):
    from pipeline.models.loading import load_state_dict_file
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(1000)}, buf)
    zipped = tmp_path / "cut.pt"
    zipped.write_bytes(buf.getvalue()[:len(buf.getvalue()) // 2])
    legacy = tmp_path / "cut_legacy.pt"
    legacy.write_bytes(pickle.dumps({"w": [0.0] * 100}, protocol=2)[:40])
    for path in (zipped, legacy):
        with pytest.raises(PipelineError) as info:
            load_state_dict_file(str(path))
        assert "is truncated or damaged" in str(info.value) and "could run code" not in str(info.value)
    from pipeline.quantizers.quant_info import read_bias_corr
    os.replace(str(zipped), str(tmp_path / "bias_corr.pth"))
    with pytest.raises(QuantizationError, match="bias_corr.pth is truncated or damaged"):
        read_bias_corr(str(tmp_path))


def test_a_write_that_fails_for_lack_of_space_is_one_storage_error(tmp_path, monkeypatch):
    from pipeline import fileio
    target = tmp_path / "out" / "report.json"
    target.parent.mkdir()
    target.write_text("old")

    def full(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fileio.os, "fsync", full)
    with pytest.raises(StorageError) as info:
        fileio.write_json(str(target), {"a": 1})
    assert "cannot write report.json in %s: No space left on device" % target.parent in str(info.value)
    assert target.read_text() == "old" and os.listdir(str(target.parent)) == ["report.json"]


def test_a_full_disk_during_a_run_is_one_line_and_exit_code_2(tmp_path):
    from tests.support import make_case
    config, _ = make_case(tmp_path)
    # RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG, as a full disk fails them with ENOSPC
    code = ("import resource, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))\n"
            "from pipeline.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    out = subprocess.run([sys.executable, "-c", code, "run", "--config", config, "--steps", "train,calib,test,export",
                          "-q"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert "Traceback" not in out.stderr
    assert lines[-1].startswith("error: cannot write ") and "File too large" in lines[-1], out.stderr
    run_dir = tmp_path / "run"
    for folder, _, files in os.walk(str(run_dir)):
        assert not [f for f in files if f.endswith(".tmp")], (folder, files)


def test_a_closed_pipe_ends_the_command_quietly():
    r, w = os.pipe()
    os.close(r)  # like `python -m pipeline schema | head` once head has exited
    try:
        out = subprocess.run([sys.executable, "-m", "pipeline", "schema"], stdout=w, stderr=subprocess.PIPE,
                             cwd=REPO, timeout=120)
    finally:
        os.close(w)
    assert out.stderr.decode() == "" and out.returncode == 141
