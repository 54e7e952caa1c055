"""The sim backend: the SimBackend contract, the lowered test-mode graph, capture and plan rules,
and the speed-ups that must keep its results."""
import json
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline.errors import ConfigError, QuantizationError
from pipeline import fixpoint
from pipeline.quantizers import fix_pos_search
from pipeline.quantizers.base import QuantSettings, get_backend
from pipeline.quantizers.quant_config import load_quant_config
from pipeline.fx.capture import capture
from pipeline.quantizers.sim.plan import QuantPlan, adjust_fix_pos

from tests.support.small_net import calibrate_with_api, small_batches, small_net


# -- lowered graph contract --------------------------------------------------------------------

@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lowered")
    calibrate_with_api(folder)
    x = small_batches(1)[0]
    return torch_quantizer("test", small_net(), (x,), output_dir=str(folder), device="cpu").quant_model


def test_lowered_graph_contract(lowered):
    allowed_modules = (nn.Conv2d, nn.Linear, nn.ConvTranspose2d, nn.ReLU, nn.ReLU6, nn.LeakyReLU,
                       nn.Hardtanh, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Upsample, nn.Flatten)
    fake_quants = 0
    for n in lowered.graph.nodes:
        if n.op == "call_module":
            m = lowered.get_submodule(n.target)
            assert type(m) in allowed_modules, n.target
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                codes = m.weight * 2.0 ** m.weight_fix_pos
                assert torch.equal(codes, torch.round(codes)) and codes.abs().max() <= 128
                bcodes = m.bias * 2.0 ** m.bias_fix_pos
                assert torch.equal(bcodes, torch.round(bcodes)) and m.bitwidth == 8
            if isinstance(m, nn.LeakyReLU):
                assert m.negative_slope == 0.1015625  # P09: the DPU slope 26/256
        elif n.op == "call_function" and n.target is fixpoint.fake_quant:
            fake_quants += 1
            x, fp, bw, method = n.args
            assert isinstance(fp, int) and bw == 8 and method == "half_up"
        elif n.op == "call_function":
            assert n.target.__module__ in ("torch", "_operator", "torch.nn.functional", "builtins") or \
                n.target in (torch.add, torch.mul, torch.cat, torch.clamp, torch.flatten), n.target
    info_outputs = len(lowered.quant_info["output"])
    assert fake_quants == info_outputs + 1  # one per output entry, plus the Hardswish Q7
    assert lowered.output_fix_pos == lowered.quant_info["output"]["SmallNet::nndct_dense_9"][0][1]
    hs = [n for n in lowered.graph.nodes if n.meta.get("nndct_node") == "nndct_hswish_5"][0]
    assert hs.target is torch.mul and hs.args[1].target is fixpoint.fake_quant and hs.args[1].args[1:] == (7, 8, "half_up")


def test_lowered_graph_retraces_with_fake_quant_as_one_node(lowered):
    traced = torch.fx.GraphModule(lowered, torch.fx.Tracer(autowrap_functions=(fixpoint.fake_quant,)).trace(lowered))
    targets = [n.target for n in traced.graph.nodes if n.op == "call_function"]
    assert targets.count(fixpoint.fake_quant) == sum(
        1 for n in lowered.graph.nodes if n.target is fixpoint.fake_quant)
    x = small_batches(1, seed=9)[0]
    assert torch.equal(traced(x), lowered(x))


def test_lowered_matches_calibration_arithmetic_by_hand(lowered):
    """Rebuild the first quantization point by hand from quant_info and compare."""
    x = small_batches(1, seed=3)[0]
    p_in = lowered.quant_info["output"]["SmallNet::nndct_input_0"][0][1]
    conv = lowered.get_submodule("nndct_conv2d_1")
    p_act = lowered.quant_info["output"]["SmallNet::nndct_relu_2"][0][1]  # ReLU6 -> ReLU with CLE
    xq = torch.clamp(torch.floor(x * 2 ** p_in + 0.5), -128, 127) / 2 ** p_in
    y = torch.relu(F.conv2d(xq, conv.weight, conv.bias, padding=1))
    expect = torch.clamp(torch.floor(y * 2 ** p_act + 0.5), -128, 127) / 2 ** p_act
    seen = {}

    class Rec(torch.fx.Interpreter):
        def run_node(self, n):
            v = super().run_node(n)
            if n.meta.get("nndct_node"):
                seen[n.meta["nndct_node"]] = v
            return v

    Rec(lowered).run(x)
    assert torch.equal(seen["nndct_relu_2"], expect)


# -- SimBackend -------------------------------------------------------------------------------

def test_backend_zero_batches_writes_nothing(tmp_path):
    backend = get_backend("sim")
    assert backend.is_available()
    with pytest.raises(QuantizationError, match="calibration saw 0 batches"):
        backend.calibrate(small_net(), small_batches(1)[0], [], str(tmp_path), QuantSettings())
    assert os.listdir(str(tmp_path)) == []


def test_backend_round_trip_equals_drop_in_api(tmp_path):
    backend = get_backend("sim")
    batches = small_batches()
    summary = backend.calibrate(small_net(), batches[0], iter(batches), str(tmp_path / "b"), QuantSettings())
    # relu_2 feeds both the depthwise conv and the concat, so CLE finds no conv pair (cle.py)
    assert summary.batches == 4 and summary.cle_pairs == []
    calibrate_with_api(tmp_path / "a", batches=batches)
    assert open(str(tmp_path / "a" / "quant_info.json")).read() == open(str(tmp_path / "b" / "quant_info.json")).read()
    handle = backend.load_test(small_net(), batches[0], str(tmp_path / "b"), QuantSettings())
    x = small_batches(1, seed=5)[0]
    api = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path / "a"), device="cpu").quant_model
    assert torch.equal(handle(x), api(x))
    files = backend.export(handle, batches[0], str(tmp_path / "out"), ["onnx_exact", "onnx_qdq", "xmodel"])
    assert sorted(os.path.basename(p) for p in files.values()) == ["SmallNet_int.onnx", "SmallNet_int.xmodel",
                                                                   "SmallNet_int_exact.onnx"]
    report = handle.xmodel_report
    assert report["check"] == "ok" and report["interpreter"]["mismatches"] == 0 and report["interpreter"]["elements"]
    agreement, _ = backend.verify(handle, {"xmodel": files["xmodel"]}, lambda: batches[0], {})
    assert agreement == {"xmodel": report}
    with pytest.raises(ConfigError, match="onnx_qdq"):
        backend.export(handle, batches[0], str(tmp_path / "out"), ["torchscript"])


def test_operator_without_dpu_mapping_is_a_float_operator(tmp_path):
    """An op nndct has no DPU type for runs in float on its quantized input (no refusal); as the
    model output it gets no fix position (golden_wide README, "Exhaustive probe")."""
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return torch.special.erf(self.conv(x))

    graph = capture(Odd(), torch.zeros(1, 3, 4, 4), load_quant_config(None).rewrites())
    assert [n.name for n in graph.float_operators()] == ["aten_special_erf_2"]
    x = small_batches(1)[0]
    model = Odd()
    calibrate_with_api(tmp_path, model, batches=[x])
    info = json.load(open(str(tmp_path / "quant_info.json")))
    assert list(info["output"]) == ["Odd::nndct_input_0", "Odd::nndct_conv2d_1"]
    q = torch_quantizer("test", model, (x,), output_dir=str(tmp_path), device="cpu")
    conv_q = [n for n in q.quant_model.graph.nodes if n.meta.get("nndct_node") == "nndct_conv2d_1"][0]
    assert conv_q.target is fixpoint.fake_quant
    y = q.quant_model(x)
    conv_value = _node_value(q.quant_model, conv_q, x)  # the conv's fake_quant output
    assert torch.equal(y, torch.special.erf(conv_value))


def _node_value(gm, node, x):
    """The value of one node of a GraphModule on input x."""
    values = {}

    class Grab(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n] = out
            return out

    Grab(gm).run(x)
    return values[node]


def test_shift_cut_and_shift_bias_adjustments():
    """docs/arithmetic.md#export-time-adjustments: shift_cut = w + i - o in [0, 16], shift_bias = w + i -
    b in [min(0, -(24-(8+shift_cut))), 16]."""
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    plan = QuantPlan(capture(net, torch.zeros(1, 3, 6, 6), load_quant_config(None).rewrites()))
    assert plan.output_order == ["nndct_input_0", "nndct_relu_2"]
    w, b = plan.param_order
    cases = [  # (w, b, i, o) -> (w, b, o)
        ((7, 6, 5, 6), (7, 6, 6)),       # in range: unchanged
        ((5, 6, 4, 12), (5, 6, 9)),      # shift_cut -3 -> output lowered to 9
        ((12, 6, 8, 2), (10, 6, 2)),     # shift_cut 18 -> weight lowered to 10
        ((5, 30, 5, 6), (5, 22, 6)),     # shift_bias -20 < min -12 -> bias fix_pos 22
        ((12, -6, 8, 8), (2, -6, 8)),    # shift_bias 26 > 16 -> weight fix_pos 2
    ]
    for (fw, fb, fi, fo), expect in cases:
        params, outputs = {w: fw, b: fb}, {"nndct_input_0": fi, "nndct_relu_2": fo}
        adjust_fix_pos(plan, params, outputs)
        assert (params[w], params[b], outputs["nndct_relu_2"]) == expect, (fw, fb, fi, fo)


def test_nearest_resize_takes_input_fix_pos_and_hswish_limits():
    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.MaxPool2d(2)
            self.up = nn.Upsample(scale_factor=2)
            self.conv = nn.Conv2d(3, 3, 1)
            self.hs = nn.Hardswish()

        def forward(self, x):
            return self.hs(self.conv(self.up(self.pool(x))))

    plan = QuantPlan(capture(Up(), torch.zeros(1, 3, 4, 4), load_quant_config(None).rewrites()))
    assert plan.output_order == ["nndct_input_0", "nndct_maxpool_1", "nndct_resize_2", "nndct_conv2d_3",
                                 "nndct_hswish_4"]
    params = {p: 7 for p in plan.param_order}
    outputs = {"nndct_input_0": 5, "nndct_maxpool_1": 5, "nndct_resize_2": 8, "nndct_conv2d_3": -2,
               "nndct_hswish_4": 9}
    adjust_fix_pos(plan, params, outputs)
    assert outputs["nndct_resize_2"] == 5  # nearest resize aligned to its input
    assert outputs["nndct_conv2d_3"] == 0  # hswish input >= 0
    assert outputs["nndct_hswish_4"] == 7  # hswish output <= input + 7


class _TwoInputs(nn.Module):
    def forward(self, x, y):
        return x + y


class _LoneBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(torch.relu(x))


class _ConvUsedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


@pytest.mark.parametrize("model,match", [
    (_TwoInputs(), r"forward\(\) of _TwoInputs takes 2 inputs \(x, y\), got 1 example tensors"),
    (_ConvUsedTwice(), "used by 1 nodes besides its BatchNorm"),
    (nn.Sequential(nn.Conv2d(3, 3, 3, padding=1, padding_mode="reflect")), "padding_mode"),
])
def test_capture_rejects_what_it_cannot_simulate(model, match):
    with pytest.raises(QuantizationError, match=match):
        capture(model, torch.zeros(1, 3, 4, 4), load_quant_config(None).rewrites())


def test_batchnorm_without_conv_stays_a_converted_batch_norm_node():
    """nndct keeps such a BatchNorm (QUANTIZER_TORCH_NOT_FUSED_BN) with weight = gamma/sqrt(var+eps),
    bias = beta - mean*weight, mean 0, var 1, eps 0: the same float function."""
    model = _LoneBN().eval()
    with torch.no_grad():
        model.bn.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        model.bn.running_var.copy_(torch.tensor([0.25, 4.0, 1.5]))
        model.bn.weight.copy_(torch.tensor([1.5, 0.5, -2.0]))
    graph = capture(model, torch.zeros(1, 3, 4, 4), load_quant_config(None).rewrites())
    bn = graph.module(graph.by_name["nndct_batch_norm_2"])
    assert bn.eps == 0.0 and torch.equal(bn.running_mean, torch.zeros(3)) and torch.equal(bn.running_var, torch.ones(3))
    scale = model.bn.weight / torch.sqrt(model.bn.running_var + model.bn.eps)
    assert torch.equal(bn.weight, scale) and torch.equal(bn.bias, model.bn.bias - model.bn.running_mean * scale)
    x = torch.randn(2, 3, 4, 4)
    assert torch.allclose(graph.gm(x), model(x), atol=1e-6)
    assert graph.by_name["nndct_batch_norm_2"].param_names == {"weights": "_LoneBN::bn.weight", "bias": "_LoneBN::bn.bias"}


class _SameConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding="same")
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x))


def test_a_padding_same_conv_is_a_float_operator_and_keeps_its_batch_norm():
    """torch.jit traces aten::_convolution_mode, nndct has no op for it (a float operator) and its conv+BN
    patterns are of conv types: the BN stays a converted batch_norm node (docs/arithmetic.md#float-operators)."""
    graph = capture(_SameConvBN().eval(), torch.zeros(1, 3, 8, 8), load_quant_config(None).rewrites())
    assert [n.name for n in graph.nodes] == ["nndct_input_0", "aten__convolution_mode_1", "nndct_batch_norm_2"]
    assert graph.by_name["aten__convolution_mode_1"].float_operator and not graph.folded_bn
    assert QuantPlan(graph).output_order == ["nndct_batch_norm_2", "aten__convolution_mode_1"]


class _FunctionalPReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.slopes = nn.Parameter(torch.full((4,), 0.2))

    def forward(self, x):
        return F.prelu(self.conv(x), self.slopes)


def test_functional_prelu_quantizes_the_parameter_it_is_given():
    """aten::prelu(x, weight) is nndct_prelu with the weight bound as its parameter (op_dispatcher.prelu)."""
    graph = capture(_FunctionalPReLU().eval(), torch.zeros(1, 3, 8, 8), load_quant_config(None).rewrites())
    node = graph.by_name["nndct_prelu_2"]
    assert node.param_names == {"weights": "_FunctionalPReLU::slopes"}
    assert QuantPlan(graph).param_order[-1] == "_FunctionalPReLU::slopes"


class _ComputedSlopes(_FunctionalPReLU):
    def forward(self, x):
        return F.prelu(self.conv(x), self.slopes * 0.5)


def test_functional_prelu_with_slopes_computed_in_forward_is_refused_naming_the_fix():
    model = _ComputedSlopes().eval()
    with pytest.raises(QuantizationError, match=r"prelu's slopes .*nn\.PReLU, or F\.prelu\(x, self\.weight\)"):
        capture(model, torch.zeros(1, 3, 8, 8), load_quant_config(None).rewrites())


# -- speed-ups of the sim keep its results (scripts/bench_quant.py) -----------------------------

def _nndct_diffs_fix_pos(x, scope=5):
    """fix_ops.py diffs_fix_pos as nndct writes it: every candidate scored by
    torch.sum(torch.pow(x - fake_quant(x), 2)) on float32 tensors, ties keep the smaller p."""
    mn, mx = torch.aminmax(x)
    p0 = fix_pos_search.diffs_fix_pos(x, 8, 1, "half_up")
    best, best_diff = p0, float("inf")
    for p in range(p0, p0 + scope):
        diff = torch.sum(torch.pow(torch.sub(x, fixpoint.fake_quant(x, p, 8, "half_up")), 2.0)).item()
        if diff < best_diff:
            best, best_diff = p, diff
    return best


@pytest.mark.parametrize("numel", [500, 8192, 8193, 40000, 131072])
def test_diffs_search_equals_scoring_every_candidate(numel, monkeypatch):
    """The search skips candidates whose clipping provably loses; its result is nndct's on
    activation-like tensors of every size class (batched, one-by-one, multi-threaded sums)."""
    g = torch.Generator().manual_seed(numel)
    cases = []
    for trial in range(12):
        x = torch.randn(numel, generator=g) * float(torch.rand(1, generator=g) * 4 + 0.01)
        kind = trial % 6
        if kind == 1:
            x = torch.relu(x)  # half zeros, like a ReLU output
        elif kind == 2:
            x[int(torch.randint(numel, (1,), generator=g))] = 40.0 * (1 + trial)  # one outlier
        elif kind == 3:
            x = fixpoint.fake_quant(torch.relu(x), 5, 8, "half_up")  # on a grid: error 0 at p0
        elif kind == 4:
            x = -torch.rand(numel, generator=g) ** 4  # all negative, heavy near zero
        elif kind == 5:
            x = torch.full((numel,), 0.3) + (torch.rand(numel, generator=g) < 0.01).float() * 5.0  # two levels
        cases.append(x.reshape(-1, 4) if numel % 4 == 0 else x)
    scored = []
    candidate_sse = fix_pos_search._candidate_sse
    monkeypatch.setattr(fix_pos_search, "_candidate_sse", lambda x, p, *a: scored.append(p) or candidate_sse(x, p, *a))
    for x in cases:
        expect = _nndct_diffs_fix_pos(x)
        assert fix_pos_search.diffs_fix_pos(x, 8, 5, "half_up") == expect
        assert fix_pos_search.diffs_fix_pos(x, 8, 5, "std_round") == expect
    if numel > fix_pos_search.BATCHED_SEARCH_NUMEL:  # candidates were skipped (the test is not vacuous)
        assert len(scored) < 2 * 5 * len(cases)


@pytest.mark.parametrize("kernel,shape", [(2, (64, 32, 8, 8)), (2, (3, 4, 9, 7)), (3, (2, 3, 10, 11)),
                                          ((2, 3), (2, 3, 8, 9))])
def test_tiled_max_pool_equals_max_pool2d(kernel, shape):
    from pipeline.quantizers.sim.ops import tiled_max_pool
    g = torch.Generator().manual_seed(7)
    x = torch.randn(*shape, generator=g)
    x[0, 0, 0, 0], x[-1, -1, -1, 0] = float("nan"), float("inf")
    pool = nn.MaxPool2d(kernel)
    got, expect = tiled_max_pool(pool, x), pool(x)
    assert got.stride() == expect.stride()
    assert torch.equal(torch.isnan(got), torch.isnan(expect))
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(expect))
    # other pools and layouts are left to F.max_pool2d
    assert tiled_max_pool(nn.MaxPool2d(3, 2, 1), x) is None
    assert tiled_max_pool(pool, x.to(memory_format=torch.channels_last)) is None
    assert tiled_max_pool(pool, x[:, :1].contiguous()) is None  # C == 1: NCHW and channels_last coincide
