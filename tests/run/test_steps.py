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
    assert steps.derived("train") == ("calib", "qat", "test", "export", "compile", "deploy")
    assert steps.derived("calib") == ("qat", "test", "export", "compile", "deploy")
    assert steps.derived("qat") == ("test", "export", "compile", "deploy")  # they use its result when QAT is on
    assert steps.derived("export") == ("compile", "deploy")
    assert steps.derived("compile") == ("deploy",)
    assert steps.derived("test") == ("deploy",)  # the bundle's prototxt carries the measured accuracy
    assert steps.derived("inspect") == steps.derived("deploy") == ()


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
    """fx refuses the branch; the capture traces it on the example and refuses the branch on the data."""
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
    with pytest.raises(QuantizationError, match="branches in Python on the input.s data"):
        capture(model, torch.randn(1, 1, 4, 4), load_quant_config(None, 8).rewrites(), traced=traced)


def test_a_step_whose_requirement_is_missing_is_refused_before_any_work(tmp_path):
    from pipeline.errors import PipelineError
    cfg, _ = make_case(tmp_path)
    with pytest.raises(PipelineError, match=r"test: the calib step has not run in .*; run it first, e\.g\. "
                                            r"--steps calib,test"):
        run_steps(load_config(cfg), ["test"])
    assert not os.path.exists(str(tmp_path / "run"))  # no folder, no status.json: nothing was done


def test_the_whole_missing_chain_is_named_at_once(tmp_path):
    from pipeline.errors import PipelineError
    cfg, _ = make_case(tmp_path)
    with pytest.raises(PipelineError, match=r"^deploy: the calib, export and compile steps have not run in .*; run "
                                            r"them first, e\.g\. --steps calib,export,compile,deploy$"):
        run_steps(load_config(cfg), ["deploy"])
    with pytest.raises(PipelineError, match=r"^compile: the calib and export steps have not run in .*; run them first, "
                                            r"e\.g\. --steps calib,export,compile$"):
        run_steps(load_config(cfg), ["compile"])
    assert not os.path.exists(str(tmp_path / "run"))


def test_a_requirement_an_earlier_step_of_the_run_makes_stale_is_refused_up_front(tmp_path):
    from pipeline.errors import PipelineError
    cfg, _ = make_case(tmp_path)
    run_steps(load_config(cfg), ["train", "calib"])
    before = sorted(os.listdir(str(tmp_path / "run" / "steps")))
    with pytest.raises(PipelineError, match="would be removed by an earlier step of this run"):
        run_steps(load_config(cfg), ["train", "test"])  # train would remove the calibration test needs
    assert sorted(os.listdir(str(tmp_path / "run" / "steps"))) == before


@pytest.mark.parametrize("kwargs, message", [
    ({"steps": "train"}, "steps must be a list of step names"),
    ({"steps": ["bogus"]}, r"unknown steps \['bogus'\]"),
    ({"steps": ["train"], "labels": [0, 1]}, "labels= goes with images="),
])
def test_the_python_api_refuses_bad_arguments(tmp_path, kwargs, message):
    import pipeline
    from pipeline.errors import ConfigError
    cfg, _ = make_case(tmp_path)
    with pytest.raises(ConfigError, match=message):
        pipeline.run(cfg, **kwargs)
    assert not os.path.exists(str(tmp_path / "run"))


def test_the_caller_array_is_refused_where_steps_would_run_in_child_processes(tmp_path, monkeypatch):
    # a child process reads data.source from the config: it cannot see the caller's array
    import numpy as np

    import pipeline
    from pipeline.errors import ConfigError
    from pipeline.quantizers.sim.backend import SimBackend
    cfg, npy = make_case(tmp_path)
    monkeypatch.setattr(SimBackend, "separate_processes", True)
    with pytest.raises(ConfigError, match="cannot see the array passed as images="):
        pipeline.run(cfg, steps=["calib", "test"], images=np.load(npy), labels=np.load(str(tmp_path / "labels.npy")))


def test_an_inspection_of_other_settings_is_left_out_of_the_report_with_a_warning(tmp_path):
    """inspect derives from the config alone (model architecture, preprocessing, compile.target): a run under
    other settings that does not inspect again leaves the old partition out of its report, saying why."""
    import pipeline
    cfg, _ = make_case(tmp_path)
    report = pipeline.run(cfg, steps=["inspect"])
    assert "inspect" in report["steps"] and not report["warnings"]
    report = pipeline.run(cfg, steps=["train"])  # the same settings: still this run's inspection
    assert "inspect" in report["steps"]
    with open(os.path.join(str(tmp_path), "run", "report.md")) as f:
        assert "partition: 1 subgraph" in f.read()
    report = pipeline.run(cfg, steps=["train"], overrides=["compile.target=DPUCZDX8G_ISA1_B512"])
    assert "inspect" not in report["steps"]
    assert [w for w in report["warnings"] if w.startswith(
        "inspect/ holds a result of the inspect step made under other settings than this config's (compile.target: "
        "then \"DPUCZDX8G_ISA1_B4096\", now \"DPUCZDX8G_ISA1_B512\"): this report leaves it out; run the inspect "
        "step again")], report["warnings"]
    with open(os.path.join(str(tmp_path), "run", "report.md")) as f:
        assert "partition: " not in f.read()
