"""capture's working copy (``pipeline.fx.work_copy``): weights shared with the caller's model, never
written, and the calibration it gives byte-identical to the one on a full deep copy; its trace
(``fx_trace``) is torch.fx's."""
import copy
import hashlib
import math
import os

import pytest
import torch
from torch import nn

from pipeline.fx import capture as capture_mod
from pipeline.fx.float_trace import FloatTrace, fx_trace
from pipeline.fx.work_copy import work_copy
from pipeline.models.zoo import digits_cnn, randomize_bn
from pipeline.quantizers.quant_config import load_quant_config
from pipeline.quantizers.sim.session import SimSession


class ListNet(nn.Module):
    """Tied weights, a plain (unregistered) list of its submodules used in forward, a tensor
    attribute, ReLU6 (swapped with CLE on), BatchNorms (folded, and one converted) and a conv
    without BatchNorm (CLE gives it new weights, not folding)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(2, 2, 1)
        self.act0 = nn.ReLU()
        self.conv1 = nn.Conv2d(2, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.act = nn.ReLU6()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.act2 = nn.ReLU()
        self.chain = [self.conv2, self.bn2, self.act2]  # not registered: plain attribute
        self.offset = torch.tensor(0.25)
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, 8)
        self.head.weight = self.fc.weight  # tied
        self.bn3 = nn.BatchNorm1d(8)

    def forward(self, x):
        x = self.act(self.bn1(self.conv1(self.act0(self.conv0(x)))))
        for m in self.chain:
            x = m(x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1) + self.offset
        return self.head(self.bn3(self.fc(x)))


def _model(name):
    torch.manual_seed(0)
    model = digits_cnn() if name == "digits" else ListNet()
    return randomize_bn(model, 3).train()  # train mode: the copy must still run in eval mode


def _digest(model):
    h = hashlib.sha256()
    h.update(repr([(n, m.training, sorted(m.__dict__)) for n, m in model.named_modules()]).encode())
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        h.update(repr((name, p._version, p.requires_grad, p.data_ptr())).encode())
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def _calibrate(model, data, folder, cle=True):
    cfg = load_quant_config(None)
    cfg.include_cle = cle
    session = SimSession(model, data[0], cfg)
    cal = session.calibrator()
    for x in data:
        cal.step(x)
    session.export_quant_config(cal, folder)
    out = session.load_test(folder)(data[0])
    files = {f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))}
    return files, out


def _deepcopy_work(model):
    # capture's copy before work_copy: a deep copy of everything
    work = copy.deepcopy(model).cpu().eval()
    for p in work.parameters():
        p.requires_grad_(False)
    return work


@pytest.mark.parametrize("name", ["digits", "listnet"])
@pytest.mark.parametrize("cle", [True, False])
def test_calibration_on_the_work_copy_equals_the_deep_copy_one_and_leaves_the_model(tmp_path, monkeypatch, name, cle):
    model = _model(name)
    shape = (16, 1, 8, 8) if name == "digits" else (16, 2, 6, 6)
    g = torch.Generator().manual_seed(1)
    data = [torch.randn(*shape, generator=g) for _ in range(3)]
    before = _digest(model)
    files, out = _calibrate(model, data, str(tmp_path / "work"), cle)
    assert _digest(model) == before  # weights, buffers, versions, flags, attributes: all as they were
    monkeypatch.setattr(capture_mod, "work_copy", _deepcopy_work)
    files_deep, out_deep = _calibrate(model, data, str(tmp_path / "deep"), cle)
    assert sorted(files) == ["bias_corr.pth", "quant_info.json"]
    assert files == files_deep
    assert torch.equal(out, out_deep)


def test_work_copy_shares_weights_in_new_objects_and_keeps_ties_and_attributes():
    model = _model("listnet")
    work = work_copy(model)
    assert type(work) is ListNet and not any(m.training for m in work.modules())
    assert model.training  # the caller's flags stay
    pairs = list(zip(model.modules(), work.modules()))
    assert all(a is not b and type(a) is type(b) for a, b in pairs)
    for a, b in zip(model.parameters(), work.parameters()):
        assert a is not b and a.data_ptr() == b.data_ptr() and not b.requires_grad and a.requires_grad
    assert work.head.weight is work.fc.weight  # tied in the copy as in the model
    assert work.chain[0] is work.conv2 and work.chain[1] is work.bn2  # the plain list points into the copy
    assert work.offset is not model.offset and torch.equal(work.offset, model.offset)
    work.conv1.weight.data = torch.zeros_like(work.conv1.weight)  # what CLE does: assign, not write
    assert model.conv1.weight.abs().sum() > 0
    with torch.no_grad():
        x = torch.randn(4, 2, 6, 6)
        assert torch.equal(work_copy(model)(x), _deepcopy_work(model)(x))


class MathNet(nn.Module):
    """Passes a traced value (a shape) to ``math``: torch.fx records ``math.sqrt`` as a call."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) * math.sqrt(x.shape[1]) + math.pi


@pytest.mark.parametrize("make", [MathNet, ListNet, digits_cnn])
def test_the_trace_is_torch_fx_s_with_or_without_math_calls(make):
    torch.manual_seed(0)
    model = make().eval()
    expected = str(torch.fx.Tracer().trace(_deepcopy_work(model)))
    root, graph = fx_trace(lambda: work_copy(model))
    assert str(graph) == expected
    assert ("math.sqrt" in expected) == (make is MathNet)
    assert str(FloatTrace.of(model).graph) == expected
    assert not hasattr(model, "_tensor_constant0")  # ListNet's tensor attribute went onto the copy
    graph = capture_mod.capture(model, torch.randn(2, 2, 6, 6) if make is not digits_cnn else torch.randn(2, 1, 8, 8),
                                load_quant_config(None).rewrites())
    assert any(n.target is math.sqrt for n in graph.fx_graph.nodes) == (make is MathNet)
