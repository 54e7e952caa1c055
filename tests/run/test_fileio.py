"""``pipeline.fileio.write_files``: several files, each atomic, every fsync before the first rename,
renames in order; the same bytes and permissions as ``write_bytes``."""
import os
import stat

import pytest

from pipeline import fileio
from pipeline.errors import StorageError


def _mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_write_files_gives_the_bytes_and_modes_of_write_bytes(tmp_path):
    items = [(str(tmp_path / "a" / "one.pth"), b"\x00\x01" * 5000), (str(tmp_path / "two.json"), b"{}")]
    assert fileio.write_files(items) == [p for p, _ in items]
    for path, data in items:
        single = str(tmp_path / ("single_" + os.path.basename(path)))
        fileio.write_bytes(single, data)
        assert open(path, "rb").read() == data == open(single, "rb").read()
        assert _mode(path) == _mode(single) == 0o666 & ~fileio.process_umask()
    fileio.write_files([(str(tmp_path / "run.sh"), b"#!/bin/sh\n")], executable=True)
    assert _mode(tmp_path / "run.sh") == 0o777 & ~fileio.process_umask()
    assert sorted(os.listdir(str(tmp_path))) == ["a", "run.sh", "single_one.pth", "single_two.json", "two.json"]


def test_every_fsync_comes_before_the_first_rename_and_the_renames_keep_their_order(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        real_fsync(fd)
        events.append(("fsync", fd))

    def replace(src, dst):
        events.append(("replace", os.path.basename(dst)))
        real_replace(src, dst)
    monkeypatch.setattr(fileio.os, "fsync", fsync)
    monkeypatch.setattr(fileio.os, "replace", replace)
    names = ["bias_corr.pth", "quant_info.json", "third.json"]
    fileio.write_files([(str(tmp_path / n), n.encode()) for n in names])
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync"] * 3 + ["replace"] * 3
    assert [what for kind, what in events if kind == "replace"] == names


def test_a_failing_fsync_renames_nothing_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    old = {"bias_corr.pth": b"old bias", "quant_info.json": b"old info"}
    for name, data in old.items():
        (tmp_path / name).write_bytes(data)
    real_fsync = os.fsync
    failing = []

    def fsync(fd):
        if os.readlink("/proc/self/fd/%d" % fd).rsplit("/", 1)[-1].startswith(".quant_info.json."):
            failing.append(fd)
            raise OSError(28, "No space left on device")
        real_fsync(fd)
    monkeypatch.setattr(fileio.os, "fsync", fsync)
    with pytest.raises(StorageError) as info:
        fileio.write_files([(str(tmp_path / n), b"new") for n in sorted(old)])
    assert failing
    assert "cannot write quant_info.json in %s: No space left on device" % tmp_path in str(info.value)
    assert sorted(os.listdir(str(tmp_path))) == sorted(old)
    for name, data in old.items():
        assert (tmp_path / name).read_bytes() == data
