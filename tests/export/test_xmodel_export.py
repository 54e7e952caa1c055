"""The export step's xmodel (sim backend): written after the ONNX files, with a clear error naming the
node when the model holds an op the xmodel writer cannot carry, and nothing else lost."""
import json
import os

import pytest
import torch
from torch import nn

import pipeline
from tests.support import make_case
from pipeline.errors import PipelineError


class ReplicatePadNet(nn.Module):
    """A conv, a replicate pad of 2, a conv: the ONNX exporters write it (Pad mode edge); the real quantizer
    writes it as XIR pad SYMMETRIC, which computes other values for a pad over 1, so the xmodel writer
    refuses it."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.pad = nn.ReplicationPad2d(2)
        self.conv2 = nn.Conv2d(4, 4, 5)
        self.fc = nn.Linear(4 * 8 * 8, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.conv2(self.pad(torch.relu(self.conv(x)))), 1))


def replicate_pad_net(num_classes: int = 10) -> nn.Module:
    """``model.factory`` for the runner."""
    return ReplicatePadNet(num_classes)


@pytest.mark.slow
def test_an_op_the_xmodel_cannot_carry_is_named_after_the_onnx_files_are_written(tmp_path):
    config, _ = make_case(tmp_path, model={"zoo": None, "factory": "tests.export.test_xmodel_export:replicate_pad_net",
                                           "train": {"epochs": 1}},
                          export={"formats": ["xmodel", "onnx_exact"]})  # xmodel named first: still written last
    with pytest.raises(PipelineError) as err:
        pipeline.run(config, steps=["train", "calib", "export"])
    text = str(err.value)
    assert "xmodel: node nndct_pad_nd_" in text and "cannot be written" in text and "SYMMETRIC" in text
    export = tmp_path / "run" / "export"
    assert sorted(os.listdir(str(export))) == ["ReplicatePadNet_int_exact.onnx"]  # the ONNX file is kept, no xmodel
    with open(str(tmp_path / "run" / "status.json")) as f:
        status = json.load(f)
    assert status["state"] == "failed" and status["step"] == "export"


@pytest.mark.slow
def test_a_run_folder_is_compiled_later_elsewhere_without_quantizing_again(tmp_path, monkeypatch):
    """What ``scripts/docker_run.sh CONFIG --steps compile,deploy`` does in the image: the run folder
    (here moved, as the image sees the repository at another path) is compiled from its exported
    xmodel; calib, test and export are not run again; the bundle holds the compiled model."""
    import shutil
    from tests.support import fake_vai_c
    config, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    pipeline.run(config, steps=["train", "calib", "export"])
    moved = tmp_path / "mounted" / "run"
    shutil.move(str(tmp_path / "run"), str(moved))
    xmodel = moved / "export" / "DigitsCNN_int.xmodel"
    before = {p: os.path.getmtime(str(moved / p)) for p in ("quantize_result/quant_info.json", "export/DigitsCNN_int.xmodel")}
    fake_vai_c.install(tmp_path, monkeypatch)
    report = pipeline.run(config, steps=["compile", "deploy"],
                          overrides=["run.work_dir=" + str(moved), "compile.arch_json=" + str(tmp_path / "arch.json")])
    with open(str(tmp_path / "argv.json")) as f:
        argv = json.load(f)
    assert argv[argv.index("-x") + 1] == str(xmodel)  # the moved folder's file, not the recorded path
    assert report["compile"]["compiled"]
    line = [l for l in report["summary"] if l.startswith("compiled ")]
    assert line == ["compiled compile/case.xmodel for DPUCZDX8G_ISA1_B4096 (arch.json fingerprint 0x0101000056010407); "
                    "log compile/vai_c_xir.log"]  # the report's paths are the run folder's
    assert {p: os.path.getmtime(str(moved / p)) for p in before} == before  # nothing quantized again
    with open(str(moved / "deploy" / "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["compiled"] is True and manifest["quantized_xmodel"] is None
