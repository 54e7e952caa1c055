"""The drop-in checks its output_dir when the quantizer is made, and each export its own (issue 34, item 5).

Before: an output_dir that is an existing file gave a raw FileExistsError from os.makedirs, and a new
folder under a read-only one a raw OSError.
"""
import errno
import os

import pytest
import torch

from pipeline.errors import ConfigError, ExportError, StorageError


def _quantizer(output_dir, mode="calib"):
    from pipeline.apis import torch_quantizer
    from tests.support.small_net import SmallNet
    torch.manual_seed(0)  # the same weights in calib and test mode
    return torch_quantizer(mode, SmallNet().eval(), (torch.rand(2, 3, 8, 8),), output_dir=output_dir, device="cpu")


def test_an_output_dir_that_is_a_file_is_refused_at_construction(tmp_path):
    path = tmp_path / "quantize_result"
    path.write_text("a file")
    for mode in ("calib", "test"):
        with pytest.raises(StorageError, match="output_dir %s is a file, not a folder" % path):
            _quantizer(str(path), mode)
    assert path.read_text() == "a file"
    with pytest.raises(StorageError, match="a file is in the way above it"):
        _quantizer(str(path / "sub"))


def test_an_output_dir_that_cannot_be_made_is_refused_at_construction(tmp_path, monkeypatch):
    def refused(path, exist_ok=False):
        raise OSError(errno.EROFS, "Read-only file system", path)
    monkeypatch.setattr(os, "makedirs", refused)  # root passes permission checks: refuse as a read-only mount
    with pytest.raises(StorageError, match=r"output_dir .*new cannot be created \(Read-only file system\); give a "
                                           r"folder you may write to"):
        _quantizer(str(tmp_path / "new"))


@pytest.mark.parametrize("value", [None, "", 3])
def test_an_output_dir_that_is_no_path_is_refused(value):
    with pytest.raises(ConfigError, match="output_dir must be a folder path"):
        _quantizer(value)


def test_an_export_into_a_file_is_refused_before_anything_is_written(tmp_path):
    q = _quantizer(str(tmp_path / "q"))
    q.quant_model(torch.rand(2, 3, 8, 8))
    q.export_quant_config()
    t = _quantizer(str(tmp_path / "q"), "test")
    t.quant_model(torch.rand(1, 3, 8, 8))
    (tmp_path / "f").write_text("x")
    for export in (t.export_xmodel, t.export_onnx_model, t.export_torch_script):
        with pytest.raises(StorageError, match="is a file, not a folder"):
            export(str(tmp_path / "f"))
    with pytest.raises(ExportError, match="output_dir must be a folder path"):
        t.export_xmodel(None)
