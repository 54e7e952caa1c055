"""A forward that branches in Python on a traced value, captured as the real quantizer's torch.jit trace
records it (``pipeline/fx/capture.py``, ``concrete_trace.py``).

Plain torch.fx refuses ``if x.dim() == 4:`` and ``assert x.shape[1] == 3`` ("symbolically traced variables
cannot be used as inputs to control flow"); torch.jit.trace runs the forward on the example and records the
path it takes. The capture then traces the model on the example: the branch takes the example's path,
the other path leaves no node. A branch on the input's data (``if y.sum() > 0:``) is refused: the real
quantizer specialises on it too, with only torch's TracerWarning, and its quantized model then computes
the example's path for every input (tests/data/branches_real/data_branch: the real quantizer's output on
the negated example is the sigmoid path, the float model's the ReLU one).

References: tests/data/branches_real/ (tests/data/README.md), made by the real quantizer on the models
below, driven as ``_run`` drives the simulation.
"""
import json
import os

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline.errors import QuantizationError
from pipeline.fx import capture as capture_module
from pipeline.fx.capture import capture
from pipeline.fx.float_trace import FloatTrace
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.base import QuantSettings
from pipeline.quantizers.fingerprint import graph_hash
from pipeline.quantizers.sim.backend import SimBackend
from pipeline.quantizers.sim.sensitivity import layer_sensitivity
from tests.support import DATA
from tests.support.xmodel_compare import assert_same_xmodel

REAL = os.path.join(DATA, "branches_real")


class DimBranch(nn.Module):
    """A check and a branch on sizes: the example (rank 4, 3 channels) takes the ReLU path."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        assert x.shape[1] == 3
        y = self.conv(x)
        if y.dim() == 4:
            y = torch.relu(y)
        else:
            y = torch.sigmoid(y)
        return y


class DataBranch(DimBranch):
    """A branch on the data: the example (seed 1) takes the sigmoid path, its negation the ReLU one."""

    def forward(self, x):
        y = self.conv(x)
        if y.sum() > 0:
            return torch.relu(y)
        return torch.sigmoid(y)


class ChannelBranch(nn.Module):
    def forward(self, x):
        if x.shape[1] == 3:
            return torch.relu(x)
        return torch.sigmoid(x)


class FlagBranch(DimBranch):
    """A default the example does not give (traced in) and a branch on the rank."""

    def forward(self, x, flag=True):
        y = self.conv(x)
        if flag and x.dim() == 4:
            return torch.relu(y)
        return torch.sigmoid(y)


class ParamBranch(DimBranch):
    """A branch on a parameter: the model's own, the same for every input."""

    def forward(self, x):
        y = self.conv(x)
        if self.conv.bias.sum() > 100:
            return torch.sigmoid(y)
        return torch.relu(y)


def _model(cls):
    torch.manual_seed(0)
    return cls().eval()


def _example():
    return torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(1)) * 2 - 1


def _targets(graph):
    return [n.fx_node.target for n in graph.nodes]


def test_a_branch_on_sizes_takes_the_examples_path_and_leaves_no_other_node():
    graph = capture(_model(DimBranch), _example(), None)
    assert [n.name for n in graph.nodes] == ["nndct_input_0", "nndct_conv2d_1", "nndct_relu_2"]
    assert torch.sigmoid not in _targets(graph)
    relu = capture(ChannelBranch(), torch.rand(1, 3, 4, 4), None)
    sigmoid = capture(ChannelBranch(), torch.rand(1, 2, 4, 4), None)
    assert [n.op for n in relu.nodes] == ["nndct_input", "nndct_relu"]
    assert [n.op for n in sigmoid.nodes] == ["nndct_input", "nndct_sigmoid"]


def test_a_branch_on_a_parameter_is_followed():
    graph = capture(_model(ParamBranch), _example(), None)
    assert [n.name for n in graph.nodes] == ["nndct_input_0", "nndct_conv2d_1", "nndct_relu_2"]


def test_a_default_and_a_branch_on_sizes_together():
    graph = capture(_model(FlagBranch), _example(), None)
    assert [n.name for n in graph.nodes] == ["nndct_input_0", "nndct_conv2d_1", "nndct_relu_2"]


def test_a_model_fx_traces_plainly_never_takes_the_example_trace(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the concrete trace ran for a model fx traces")
    monkeypatch.setattr(capture_module, "concrete_trace", refuse)
    graph = capture(nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU()).eval(), _example(), None)
    assert [n.op for n in graph.nodes] == ["nndct_input", "nndct_conv2d", "nndct_relu"]


def test_a_branch_on_the_data_is_refused_with_the_reason():
    with pytest.raises(QuantizationError) as e:
        capture(_model(DataBranch), _example(), None)
    text = str(e.value)
    assert "DataBranch branches in Python on the input's data" in text and "'gt'" in text
    assert "specialise on the example input" in text and "wrong for inputs that take the other one" in text


def test_the_real_quantizer_specialises_on_a_data_branch():
    """What the refusal avoids, as the real quantizer did it: quantized the example's (sigmoid) path, so its
    output on the negated example, which the float model sends through the ReLU, is a sigmoid's."""
    folder = os.path.join(REAL, "data_branch")
    with open(os.path.join(folder, "log.txt")) as f:
        assert "Converting a tensor to a Python boolean" in f.read()
    model, x = _model(DataBranch), _example()
    with torch.no_grad():
        y = model(-x)
        assert model.conv(-x).sum() > 0 and model.conv(x).sum() <= 0
    real = torch.from_numpy(np.load(os.path.join(folder, "y_1.npy")))
    assert real.min() > 0.2 and float((real - y).abs().max()) > 0.4  # sigmoid values, not the ReLU's


def _run(tmp_path):
    """Both phases with the drop-in, as the reference was made (tests/data/README.md)."""
    x = _example()
    q = torch_quantizer("calib", _model(DimBranch), (x,), output_dir=str(tmp_path), device=torch.device("cpu"))
    with torch.no_grad():
        q.quant_model(x)
        q.quant_model(-x)
    q.export_quant_config()
    t = torch_quantizer("test", _model(DimBranch), (x,), output_dir=str(tmp_path), device=torch.device("cpu"))
    with torch.no_grad():
        t.quant_model(x[:1])
        ys = [t.quant_model(x), t.quant_model(-x)]
    t.export_xmodel(str(tmp_path / "xmodel"))
    return ys


def test_a_branch_on_sizes_is_quantized_and_exported_as_the_real_quantizer_does(tmp_path):
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ys = _run(tmp_path)
    finally:
        torch.set_num_threads(saved)
    folder = os.path.join(REAL, "dim_branch")
    with open(str(tmp_path / "quant_info.json")) as f:
        mine = json.load(f)
    with open(os.path.join(folder, "quant_info.json")) as f:
        real = json.load(f)
    for key in ("param", "output", "input"):
        assert list(mine[key].items()) == list(real[key].items()), key
    assert mine["graph_md5"] == real["graph_md5"]
    for i, y in enumerate(ys):
        want = np.load(os.path.join(folder, "y_%d.npy" % i))
        assert np.array_equal(y.numpy().view(np.int32), want.view(np.int32))
    assert_same_xmodel(str(tmp_path / "xmodel" / "DimBranch_int.xmodel"), os.path.join(folder, "DimBranch_int.xmodel"))


def test_the_float_trace_consumers_of_a_branchy_model(tmp_path):
    """The step's FloatTrace has no graph (fx refused the branch); the fingerprint hashes the parameters,
    and the per-layer sensitivity traces the float model on its first batch as the capture does, so it
    finds every quantized point's float twin."""
    model, x = _model(DimBranch), _example()
    traced = FloatTrace.of(model)
    assert traced.graph is None and "control flow" in str(traced.error)
    assert graph_hash(model, traced) == graph_hash(model) and graph_hash(model)["graph_hash_method"] == "parameters"
    settings = QuantSettings()
    SimBackend().calibrate(model, x[:1], [x], str(tmp_path), settings)
    handle = SimBackend().load_test(model, x[:1], str(tmp_path), settings)
    rows = layer_sensitivity(model, handle, qi.read_quant_info(str(tmp_path)), [x, -x], settings, traced=traced)
    assert [(r["node"], r["float_node"]) for r in rows] == [("nndct_input_0", "x"), ("nndct_relu_2", "relu")]
    assert all(r["sqnr_db"] > 20 for r in rows)
