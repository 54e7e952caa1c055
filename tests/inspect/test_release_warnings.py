"""Warnings for the Vitis AI 3.0/3.5 differences a model meets when its target's boards run 3.0
(pipeline/inspect/releases.py; docs/targets.md#vitis-ai-30-and-35-differences)."""
import torch
from torch import nn

from pipeline.inspect import releases
from pipeline.inspect.trace import trace_model
from pipeline.steps.export import ExportResult
from pipeline.targets import get_target

MPSOC = get_target("DPUCZDX8G_ISA1_B4096")   # boards run 3.0
VCK190 = get_target("DPUCVDX8G_ISA3_C32B3")  # boards run 3.0, compiled in 3.0
VEK280 = get_target("DPUCV2DX8G_ISA1_C20B14")  # boards run 3.5
ALVEO = get_target("DPUCAHX8H_ISA2_DWC")     # boards run 2.5: not the 3.0 table's business


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)  # multiplier 1: the same in both releases
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.dw(torch.relu(self.bn(self.conv(x)))))
        return self.fc(torch.flatten(x, 1))


class Differing(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dw2 = nn.Conv2d(8, 16, 3, padding=1, groups=8)  # channel multiplier 2

    def forward(self, x):
        a, b = torch.chunk(self.dw2(self.stem(x)), 2, dim=1)
        c, d = (a + b).split(4, dim=1)
        return torch.sqrt(torch.relu(c * d))


class Volumetric(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv3 = nn.Conv3d(2, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv3(x))


def _warnings(model, example, target):
    return releases.check_model(model.eval(), example, target)


def test_a_model_that_meets_the_differences_gets_one_warning_per_node_on_a_3_0_board():
    found = _warnings(Differing(), torch.randn(1, 3, 8, 8), MPSOC)
    assert len(found) == 4, found
    dw, chunk, split, sqrt = found
    assert dw.startswith("DPUCZDX8G_ISA1_B4096 boards run Vitis AI 3.0: node 'dw2' (nn.Conv2d 'dw2') is a depthwise "
                         "conv with channel multiplier 2 (groups = in_channels = 8, out_channels = 16).")
    assert "grouped conv2d" in dw and "To do: check the compiled model's DPU/CPU split" in dw
    assert "node 'chunk' (torch.chunk) is a chunk of one tensor into pieces" in chunk
    assert "strided_slice" in chunk and "XIR don't support multi-outputs op" in chunk
    assert "node 'split' (Tensor.split) is a split of one tensor into pieces" in split
    assert "node 'sqrt' (torch.sqrt) is a square root" in sqrt and "nndct_sqrt" in sqrt


def test_vck190_warns_too_and_names_its_target():
    found = _warnings(Differing(), torch.randn(1, 3, 8, 8), VCK190)
    assert len(found) == 4 and all(w.startswith("DPUCVDX8G_ISA3_C32B3 boards run Vitis AI 3.0: ") for w in found)


def test_conv3d_is_named():
    found = _warnings(Volumetric(), torch.randn(1, 2, 4, 6, 6), MPSOC)
    assert len(found) == 1 and "node 'conv3' (nn.Conv3d 'conv3') is a 3-D convolution" in found[0]
    assert "bias-corrects Conv3d" in found[0]


def test_no_warning_where_the_boards_do_not_run_3_0(monkeypatch):
    def no_trace(*args):
        raise AssertionError("a target whose boards do not run 3.0 must not be traced")
    monkeypatch.setattr(releases, "trace_model", no_trace)
    for target in (VEK280, ALVEO, get_target("DPUCZDI4G_ISA0_B4096_DEMO_SSD")):
        assert _warnings(Differing(), torch.randn(1, 3, 8, 8), target) == []


def test_a_plain_cnn_warns_nothing():
    assert _warnings(Plain(), torch.randn(1, 3, 8, 8), MPSOC) == []


def test_release_warnings_reads_the_trace_given():
    traced = trace_model(Differing().eval(), torch.randn(1, 3, 8, 8))
    assert len(releases.release_warnings(MPSOC, traced)) == 4
    assert releases.release_warnings(VEK280, traced) == []


def test_a_model_torch_fx_cannot_trace_gets_one_warning_not_an_error():
    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x
    found = _warnings(Branchy(), torch.randn(1, 3), MPSOC)
    assert len(found) == 1 and "could not be checked for the differences between 3.0 and 3.5" in found[0]


def test_every_difference_is_documented_with_its_source():
    assert [d.key for d in releases.DIFFERENCES] == ["depthwise_multiplier", "split_chunk", "sqrt", "conv3d"]
    for d in releases.DIFFERENCES:
        assert d.differs and d.todo and d.source.count("/") >= 1, d.key


def test_the_export_result_reports_the_release_warnings():
    result = ExportResult(warnings=["onnx"], release_warnings=["DPUCZDX8G_ISA1_B4096 boards run Vitis AI 3.0: x"])
    assert result.step_warnings() == ["onnx", "DPUCZDX8G_ISA1_B4096 boards run Vitis AI 3.0: x"]
    saved = ExportResult.from_json(result.to_json())
    assert saved.release_warnings == result.release_warnings
    assert ExportResult.from_json({"files": {}}).release_warnings == []  # an export.json from before the field
