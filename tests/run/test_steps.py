"""The step graph (pipeline.steps) and one torch.fx trace of the float model per step."""
import copy
import json
import os

import pytest
import torch
from torch import nn

from tests.support import make_case

from pipeline import steps
from pipeline.config import load_config
from pipeline.fx.float_trace import FloatTrace
from pipeline.quantizers.fingerprint import graph_hash
from pipeline.runner.driver import run_steps


def test_invalidation_is_derived_from_requires():
    assert steps.derived("train") == ("calib", "test", "export", "compile", "deploy")
    assert steps.derived("calib") == ("test", "export", "compile", "deploy")
    assert steps.derived("export") == ("compile", "deploy")
    assert steps.derived("compile") == ("deploy",)
    assert steps.derived("inspect") == steps.derived("test") == steps.derived("deploy") == ()


def test_each_step_traces_the_float_model_once(tmp_path, monkeypatch):
    cfg, _ = make_case(tmp_path)
    loaded = load_config(cfg)
    run_steps(loaded, ["train"])
    calls = []
    real = torch.fx.Tracer.trace

    def counting(self, root, *args, **kwargs):
        calls.append(type(root).__name__)
        return real(self, root, *args, **kwargs)

    monkeypatch.setattr(torch.fx.Tracer, "trace", counting)
    for step in ("calib", "test", "export"):
        del calls[:]
        run_steps(load_config(cfg), [step])
        assert calls == ["DigitsCNN"], (step, calls)
    with open(os.path.join(loaded.work_dir, "steps", "test.json")) as f:
        assert json.load(f)["sensitivity"]  # the sensitivity ran on the shared trace and session


class _Relu6Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU6()
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.drop(self.act(self.bn(self.conv(x))))
        return self.fc(x.mean((2, 3)) + 1)


class _MyReLU6(nn.ReLU6):
    """A ReLU6 subclass outside torch.nn: not an fx leaf, so the ReLU6 -> ReLU swap changes the trace."""


def test_the_shared_trace_gives_the_same_fingerprint_and_capture():
    from pipeline.fx.capture import capture
    from pipeline.quantizers.quant_config import load_quant_config
    cfg = load_quant_config(None, 8)
    for model in (_Relu6Net().eval(), _swapped(_Relu6Net().eval())):
        traced = FloatTrace.of(model)
        assert graph_hash(model, traced) == graph_hash(model)
        example = torch.randn(1, 1, 8, 8)
        a, b = capture(model, example, cfg.rewrites()), capture(model, example, cfg.rewrites(), traced=traced)
        assert [(n.name, n.op) for n in a.nodes] == [(n.name, n.op) for n in b.nodes]
        assert a.graph_md5() == b.graph_md5()
        assert [str(n) for n in a.gm.graph.nodes] == [str(n) for n in b.gm.graph.nodes]


def _swapped(model):
    model = copy.deepcopy(model)
    model.act = _MyReLU6()
    return model


def test_an_untraceable_model_keeps_its_fallback_and_error():
    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x
    model = Branchy()
    traced = FloatTrace.of(model)
    assert traced.graph is None and traced.error is not None
    assert graph_hash(model, traced) == graph_hash(model)
    assert graph_hash(model, traced)["graph_hash_method"] == "parameters"
    from pipeline.errors import QuantizationError
    from pipeline.fx.capture import capture
    from pipeline.quantizers.quant_config import load_quant_config
    with pytest.raises(QuantizationError, match="symbolic_trace, which failed"):
        capture(model, torch.randn(1, 1, 4, 4), load_quant_config(None, 8).rewrites(), traced=traced)
