"""``export_xmodel(deploy_check=True)``: the real quantizer's deploy-check dumps
(tests/data/deploy_check_real, see its README; docs/xmodel.md#deploy-check-dumps).

Each stored case is driven through the drop-in API exactly as the real dumps were made (calibration in
one process, then in a NEW process test mode, one batch-1 forward first, ``export_xmodel(OUT,
deploy_check=True)``), and every file must equal the real one byte for byte: the same files, the same
float32 values, the same int8 codes, the same ``shape.txt`` (compared by sha256 where the reference
stores a ``manifest.json`` instead of the files). The real dumps are deterministic (two runs gave the
same bytes). File names carry torch.jit trace numbers (``..._ret_3``): under a torch of the
references' line they are compared exactly; under another (torch 1.13) each node name of the real
``shape.txt`` may differ from the one at the same line of ours in its runs of digits only, and the
real files are renamed by that pairing before the comparison (tests/support/xmodel_compare.py states
the same rule for op names).
"""
import errno
import hashlib
import json
import os
import re

import numpy as np
import pytest

from pipeline.apis import torch_quantizer
from pipeline.errors import ExportError, StorageError
from pipeline.quantizers.sim.xmodel import deploy_check
from tests.export.conftest import run_phases
from tests.support import file_tree
from tests.support.deploy_check_helper import CASES, REAL, folder
from tests.support.small_net import calibrate_with_api, small_batches, small_net
from tests.support.xmodel_compare import names_differ_only_in_numbers, numbering_matches_references

_SHAPE_LINE = re.compile(r"^(\[[0-9, ]*\]): (.*)$")


@pytest.fixture(scope="module")
def deploy_check_dumps(tmp_path_factory):
    """The simulation's dumps of every stored case (tests/support/deploy_check_helper.py, one process per
    mode); the root folder (``deploy_check_helper.folder(root, model, config)``)."""
    return run_phases("deploy_check_helper.py", str(tmp_path_factory.mktemp("deploy_check")))


def _shape_lines(data):
    lines = [_SHAPE_LINE.match(line) for line in data.decode("utf-8").splitlines()]
    assert all(lines), data
    return [(m.group(1), m.group(2)) for m in lines]


def _digest(data):
    return hashlib.sha256(data).hexdigest()


def _reference(name, config):
    """``{path under the export folder: sha256}`` of the real dumps of a case and the real
    ``shape.txt``: the files themselves where they are stored, else ``manifest.json``."""
    top = os.path.join(REAL, name, config)
    files = file_tree(os.path.join(top, deploy_check.FOLDER))
    shape = [k for k in files if k.endswith("/" + deploy_check.SHAPE_FILE)]
    assert len(shape) == 1, sorted(files)
    manifest = os.path.join(top, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            digests = {k[len(deploy_check.FOLDER) + 1:]: v["sha256"] for k, v in json.load(f)["files"].items()}
        assert digests[shape[0]] == _digest(files[shape[0]])
    else:
        digests = {k: _digest(v) for k, v in files.items()}
    return digests, shape[0], files[shape[0]]


def _renamed_reference(real, shape_file, real_shape, my_shape):
    """The real files' digests under the names this torch gives their nodes (the module docstring's rule)."""
    real_lines, my_lines = _shape_lines(real_shape), _shape_lines(my_shape)
    if numbering_matches_references():
        return real
    real_nodes, my_nodes = [n for _, n in real_lines], [n for _, n in my_lines]
    assert not names_differ_only_in_numbers(my_nodes, real_nodes), names_differ_only_in_numbers(my_nodes, real_nodes)
    stems = {deploy_check.file_stem(r): deploy_check.file_stem(m) for r, m in zip(real_nodes, my_nodes)}
    renamed = {}
    for path, digest in real.items():
        folder_, name = path.rsplit("/", 1)
        if path == shape_file:
            digest = _digest("".join("%s: %s\n" % (shape, m) for (shape, _), m in zip(real_lines, my_nodes)).encode())
        else:
            stem = name[:-len(".bin")]
            for suffix in (deploy_check.FIX_SUFFIX, ""):
                base = stem[:len(stem) - len(suffix)]
                if stem.endswith(suffix) and base in stems:
                    name = stems[base] + suffix + ".bin"
                    break
        renamed[folder_ + "/" + name] = digest
    return renamed


@pytest.mark.slow
@pytest.mark.parametrize("set_name,name,config", CASES)
def test_deploy_check_dumps_equal_the_real_quantizers(set_name, name, config, deploy_check_dumps):
    export = os.path.join(folder(deploy_check_dumps, name, config), "export")
    assert sorted(os.listdir(export)) == sorted(
        ["deploy_check_data_int", [f for f in os.listdir(export) if f.endswith("_int.xmodel")][0]])
    mine = file_tree(os.path.join(export, deploy_check.FOLDER))
    real, shape_file, real_shape = _reference(name, config)
    assert shape_file in mine, sorted(mine)
    real = _renamed_reference(real, shape_file, real_shape, mine[shape_file])
    assert sorted(mine) == sorted(real)
    differing = [k for k in sorted(real) if _digest(mine[k]) != real[k]]
    assert not differing, differing


def test_deploy_check_references_are_stored():
    assert len(CASES) == 16, CASES  # golden and golden_wide models x default, nocle


def _tested(tmp_path):
    calibrate_with_api(tmp_path)
    x = small_batches(1)[0]
    q = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    q.quant_model(x[:1])
    return q


def test_deploy_check_drop_in_writes_the_dumps_with_the_xmodel(tmp_path):
    q = _tested(tmp_path)
    path = q.export_xmodel(str(tmp_path / "plain"))
    assert os.listdir(str(tmp_path / "plain")) == ["SmallNet_int.xmodel"]  # deploy_check=False: the xmodel only
    assert q.export_xmodel(str(tmp_path / "check"), deploy_check=True) == str(tmp_path / "check" / "SmallNet_int.xmodel")
    with open(path, "rb") as a, open(str(tmp_path / "check" / "SmallNet_int.xmodel"), "rb") as b:
        assert a.read() == b.read()
    dumps = file_tree(str(tmp_path / "check" / deploy_check.FOLDER))
    assert all(k.startswith("SmallNet/") for k in dumps) and "SmallNet/shape.txt" in dumps
    lines = _shape_lines(dumps["SmallNet/shape.txt"])
    assert lines[0] == ("[1, 8, 8, 3]", "SmallNet::input_0")  # batch 1, NHWC
    names = [k.split("/")[1] for k in dumps]
    for name in names:  # a code file has its float32 file
        if name.endswith(deploy_check.FIX_SUFFIX + ".bin"):
            assert name[:-len(deploy_check.FIX_SUFFIX + ".bin")] + ".bin" in names
    for shape, node in lines:  # every node's output has a float32 file of its shape's size
        size = 1
        for d in json.loads(shape):
            size *= d
        assert len(dumps["SmallNet/%s.bin" % deploy_check.file_stem(node)]) == 4 * size
    assert "SmallNet__input_0_fix.bin" in names
    x = np.frombuffer(dumps["SmallNet/SmallNet__input_0.bin"], "<f4")
    codes = np.frombuffer(dumps["SmallNet/SmallNet__input_0_fix.bin"], np.int8)
    pos = [v for k, v in q._model.quant_info["output"].items() if k.endswith("input_0")][0][0][1]
    assert np.array_equal(codes.astype(np.float32) / 2 ** pos, x)  # the float file holds the quantized input


def test_deploy_check_codes_follow_nndct():
    x = np.array([0.5, -0.25, 1.75, -2.0], np.float32)
    assert deploy_check.codes(x, 8, 2) == np.array([2, -1, 7, -8], np.int8).tobytes()
    assert deploy_check.codes(x, 16, 2) == np.array([2, -1, 7, -8], "<i2").tobytes()
    assert deploy_check.codes(np.array([1, -1, 3], np.float32), 4, 0) == np.array([0x1F, 0x30], np.int8).tobytes()
    with pytest.raises(ExportError, match="6-bit"):
        deploy_check.codes(x, 6, 2)
    # an entry moved up to a parent: half up, clamped
    r = deploy_check._requantize(np.array([0.125, -0.125, -0.375, 100.0, -100.0], np.float32), 8, 2)
    assert r.tolist() == [0.25, 0.0, -0.25, 31.75, -32.0]
    assert not np.signbit(deploy_check._requantize(np.array([-0.1, -0.125], np.float32), 8, 2)).any()


def test_deploy_check_failure_in_the_dumps_writes_nothing(tmp_path, monkeypatch):
    q = _tested(tmp_path)

    def broken(*args):
        raise ExportError("a broken dump")
    monkeypatch.setattr(deploy_check, "codes", broken)
    with pytest.raises(ExportError, match="a broken dump"):
        q.export_xmodel(str(tmp_path / "out" / "x"), deploy_check=True)
    assert not os.path.exists(str(tmp_path / "out"))


def test_deploy_check_failure_in_the_writes_leaves_nothing_half_written(tmp_path, monkeypatch):
    q = _tested(tmp_path)
    (tmp_path / "out").mkdir()
    real_fsync, calls = os.fsync, []

    def full(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError):
        q.export_xmodel(str(tmp_path / "out" / "x"), deploy_check=True)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert os.listdir(str(tmp_path / "out")) == []  # no file, no temporary file, no folder it created
    q.export_xmodel(str(tmp_path / "out" / "x"), deploy_check=True)  # and it works once there is room
    assert len(file_tree(str(tmp_path / "out" / "x" / deploy_check.FOLDER))) > 3
