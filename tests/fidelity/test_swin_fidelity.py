"""torchvision's Swin window attention against the real quantizer (pytorch_nndct 3.5).

torchvision marks ``shifted_window_attention`` and ``_get_relative_position_bias`` with
``torch.fx.wrap``; the real quantizer traces with torch.jit, which sees through them. The capture
traces through every wrapped function on the example (``pipeline/fx/concrete_trace.py``), so the
sim has nndct's nodes: the qkv/proj dense layers, select, matmul, softmax, the size arithmetic
(remainder, rsub, floor_divide, mul: int64 tensors nndct registers as ``[[8,null]]``), the
``(C // heads) ** -0.5`` scale as a quantized 0-dim tensor, roll, the mask's nine item assignments
(strided_slice + fill_), masked_fill, ... References: ``tests/data/corpus_real/tv_swin`` (the
torchvision family) and ``tests/data/window_attention_real`` (the small model below), both made
by the real quantizer (tests/data/README.md).
"""
import hashlib
import json
import operator
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.support import DATA
from pipeline.apis import torch_quantizer
from pipeline.fx.capture import capture
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config
from pipeline.quantizers.sim.plan import QuantPlan

from tests.support import corpus_models, corpus_torchvision

corpus_torchvision.require_torchvision()
from torchvision.models.swin_transformer import ShiftedWindowAttention  # noqa: E402

REAL = os.path.join(DATA, "window_attention_real")
NOCLE = {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}


class WindowNet(nn.Module):
    """A 4x4-patch embedding, one plain and one shifted torchvision window attention (residual),
    pooling and a head: every op of Swin's attention without its LayerNorms."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 4, 4)
        self.attn0 = ShiftedWindowAttention(16, [4, 4], [0, 0], 2)
        self.attn1 = ShiftedWindowAttention(16, [4, 4], [2, 2], 2)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.embed(x).permute(0, 2, 3, 1)
        x = x + self.attn0(x)
        x = x + self.attn1(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), 1), 1))


def make_window_net():
    """The seeded WindowNet; ``trunc_normal_`` draws as the references' torch (torch 2.13) while it is
    built (``corpus_models.references_random_init``: torch 1.13's draws left the random stream
    elsewhere, so attn1 and the head had other weights)."""
    torch.manual_seed(3)
    with corpus_models.references_random_init():
        model = WindowNet()
    with torch.no_grad():  # torchvision draws the tables with std 0.02: the bias would not show
        for attn in (model.attn0, model.attn1):
            attn.relative_position_bias_table.normal_(0, 0.5)
    return model.eval()


def window_data():
    """Two calibration batches of 4 and the 4 test samples (3x32x32: 8x8 tokens, 4 windows)."""
    g = torch.Generator().manual_seed(5)
    calib = [torch.randn(4, 3, 32, 32, generator=g) for _ in range(2)]
    return calib, torch.randn(4, 3, 32, 32, generator=g)


def _seeded_sha256():
    h = hashlib.sha256()
    for key, value in make_window_net().state_dict().items():
        h.update(key.encode())
        h.update(value.detach().float().contiguous().numpy().tobytes())
    calib, test = window_data()
    for x in calib + [test]:
        h.update(x.numpy().tobytes())
    return h.hexdigest()


def _run(out, config):
    """The real run's recipe: calibration (2 forwards of 4, export_quant_config), then test mode
    (a batch-1 forward, then the 4 test samples)."""
    calib, test = window_data()
    conf = None
    if config is not None:
        conf = os.path.join(out, "config.json")
        with open(conf, "w") as f:
            json.dump(config, f)
    q = torch_quantizer("calib", make_window_net(), (calib[0][:1],), output_dir=out, device=torch.device("cpu"),
                        quant_config_file=conf)
    for x in calib:
        q.quant_model(x)
    q.export_quant_config()
    q = torch_quantizer("test", make_window_net(), (calib[0][:1],), output_dir=out, device=torch.device("cpu"),
                        quant_config_file=conf)
    q.quant_model(test[:1])
    return q, test, q.quant_model(test).detach().numpy()


def test_reference_data_is_what_the_seeds_make():
    with open(os.path.join(REAL, "seeded.sha256")) as f:
        assert _seeded_sha256() == f.read().strip()


@pytest.mark.parametrize("cfg", ["default", "nocle"])
def test_window_attention_equals_the_real_quantizer(cfg, tmp_path):
    """Every quant_info.json entry (in nndct's order: 12 params, 45 outputs, the int sizes
    [[8,null]]), the graph md5 and every output bit."""
    _, _, y = _run(str(tmp_path), None if cfg == "default" else NOCLE)
    real = REAL if cfg == "default" else os.path.join(REAL, cfg)
    mine, theirs = qi.read_quant_info(str(tmp_path)), qi.read_quant_info(real)
    for key in ("param", "output", "input", "graph_md5"):
        assert mine[key] == theirs[key], key
    assert list(mine["output"]) == list(theirs["output"])
    assert [k for k, v in theirs["output"].items() if v[0][1] is None] == [
        "WindowNet::nndct_rsub_%d" % i for i in (52, 55)] + ["WindowNet::nndct_elemwise_mul_%d" % i for i in (62, 67)] \
        + ["WindowNet::nndct_rsub_%d" % i for i in (109, 112)] + ["WindowNet::nndct_elemwise_mul_%d" % i for i in (120, 125)]
    want = np.load(os.path.join(real, "y_0.npy"))
    assert np.array_equal(y.view(np.int32), want.view(np.int32))


def test_window_attention_exact_onnx_equals_the_simulation(tmp_path):
    """The exact flavour in ONNX Runtime, bit for bit: the bias table gathered by its index buffer,
    the mask and the scale are folded initializers; select and roll are Gathers, matmul MatMul."""
    ort = pytest.importorskip("onnxruntime")
    q, test, y = _run(str(tmp_path), None)
    q.export_onnx_model(str(tmp_path), native_onnx=False)
    path = [f for f in os.listdir(str(tmp_path)) if f.endswith("_int.onnx")]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(os.path.join(str(tmp_path), path[0]), sess_options=options,
                                   providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: test.numpy()})[0]
    assert np.array_equal(got.view(np.int32), y.view(np.int32))


@pytest.mark.parametrize("name", ["tv_swin", "tv_lraspp"])
def test_graph_is_the_one_the_real_quantizer_parses(name):
    """The capture alone gives nndct's graph md5 (every node's op type, its inputs' and users'
    types, in nndct's order) and the quant_info keys in nndct's order: tv_swin traced through its
    wrapped attention; tv_lraspp's ``F.interpolate(size=x.shape[-2:])`` has one nndct_shape per
    size, as torch.jit traces it."""
    model = corpus_torchvision.make_model(name)
    graph = capture(model, tuple(corpus_torchvision.make_inputs(name, 1, 1)), load_quant_config(None).rewrites())
    real = qi.read_quant_info(os.path.join(DATA, "corpus_real", name))
    assert graph.graph_md5() == real["graph_md5"]
    plan = QuantPlan(graph)
    assert plan.param_order == list(real["param"])
    assert [graph.full_name(graph.by_name[n]) for n in plan.output_order] == list(real["output"])
    if name == "tv_swin":
        assert graph.by_name["nndct_dense_101"].param_names == {
            "weights": "SwinTransformer::features.1.0.attn.qkv.weight",
            "bias": "SwinTransformer::features.1.0.attn.qkv.bias"}


def _sized_pad(x, size):
    h = x.shape[-1]
    if size >= h:  # a branch on a traced size: torch.jit follows the example
        return x
    y = F.pad(x, (0, size - h % size))
    y[..., :1] = 2  # recorded as a slice and its fill_
    return y * (h // 2) ** -0.5


torch.fx.wrap("_sized_pad")


class _Wrapped(nn.Module):
    def forward(self, x):
        return _sized_pad(x, 3) + 1.0


def test_wrapped_functions_are_traced_through_as_torch_jit_does(tmp_path):
    """A torch.fx-wrapped function is no leaf: its body is traced on the example (the branch taken
    as the example's size says, the comparison not recorded), x[idx] = v is a strided_slice and an
    aten::fill_, a float from sizes is an aten::pow node quantized as a 0-dim tensor, an int size
    of a quantizable type (rsub) is [[8,null]]. The constants in nndct's order: the walk that
    converts number operands starts from the constants the trace already has (the fill value, the
    ``//`` operand), so the ``+ 1.0`` comes before the size arithmetic's. Names, constants,
    quant_info and outputs as the real quantizer's (``window_attention_real/wrapped``)."""
    graph = capture(_Wrapped().eval(), torch.zeros(1, 2, 4), load_quant_config(None).rewrites())
    assert [n.name for n in graph.nodes] == [
        "nndct_const_0", "nndct_const_1", "nndct_const_2", "nndct_const_3", "nndct_const_4",
        "nndct_input_5", "nndct_shape_6", "aten_remainder_7", "nndct_rsub_8", "nndct_pad_nd_9",
        "nndct_strided_slice_10", "aten_fill__11", "nndct_floor_divide_12", "aten_pow_13",
        "nndct_elemwise_mul_14", "nndct_elemwise_add_15"]
    assert [n.value for n in graph.nodes[:5]] == [1.0, 3, 3, 2.0, 2]
    assert graph.by_name["aten_pow_13"].fx_node.target is operator.pow
    out = str(tmp_path)
    q = torch_quantizer("calib", _Wrapped().eval(), (torch.zeros(1, 2, 4),), output_dir=out, device=torch.device("cpu"))
    q.quant_model(torch.randn(2, 2, 4, generator=torch.Generator().manual_seed(0)))
    q.export_quant_config()
    q = torch_quantizer("test", _Wrapped().eval(), (torch.zeros(1, 2, 4),), output_dir=out, device=torch.device("cpu"))
    y = q.quant_model(torch.randn(2, 2, 4, generator=torch.Generator().manual_seed(1))).numpy()
    real = os.path.join(REAL, "wrapped")
    mine, theirs = qi.read_quant_info(out), qi.read_quant_info(real)
    assert list(mine["output"].items()) == list(theirs["output"].items())
    assert mine["graph_md5"] == theirs["graph_md5"]
    assert np.array_equal(y.view(np.int32), np.load(os.path.join(real, "y_0.npy")).view(np.int32))
