"""ONNX export of lowered test-mode models (pipeline.quantizers.sim.export) and its ONNX Runtime verification.

The graphs here are hand-made lowered models that follow the sim quantizer's contract: standard
torch ops, ``pipeline.fixpoint.fake_quant`` as the only custom call, conv/linear
modules with weights already on their 2^-fix_pos grid and ``weight_fix_pos`` / ``bias_fix_pos`` /
``bitwidth`` attributes. Inputs are exact half-LSB ties (positive and negative, including codes
that saturate at -129 and 128) plus ordinary values.

Expected values come from the simulation itself (running the GraphModule) and, for the qdq
flavour, from an independent half-to-even reference written in this file.
"""
import copy
import hashlib
import json
import os

import numpy as np
import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

# torch warns that an even kernel with padding='same' pads with a copy: expected here
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import pipeline.fixpoint as fixpoint  # noqa: E402  (attribute access keeps fx.wrap working)
from pipeline.errors import ExportError  # noqa: E402
from pipeline.quantizers.sim.export import check_agreement, export_onnx, qdq_reference, qdq_warning, verify_onnx, verify_qdq  # noqa: E402
from pipeline.models.zoo import randomize_bn  # noqa: E402
from tests.support import DATA  # noqa: E402


def fq(x, p, bits=8, method="half_up"):
    """The contract's fake_quant, called through the module so tracing keeps it as one node."""
    return fixpoint.fake_quant(x, p, bits, method)


def _fake_quant_half_even(x, p, bits, method):
    """Independent reference of ONNX QuantizeLinear -> DequantizeLinear: ties to even."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return torch.round(x * 2.0 ** p).clamp(lo, hi) * 2.0 ** -p


def _half_even_reference(gm):
    ref = copy.deepcopy(gm)
    for n in ref.graph.nodes:
        if n.op == "call_function" and n.target is fixpoint.fake_quant:
            n.target = _fake_quant_half_even
    ref.recompile()
    return ref


def _set_params(mod, wp, bp, seed, wmax=4, bmax=32):
    """Put integer codes on the module's weight (|code| <= wmax) and bias (|code| <= bmax) grids,
    and the contract's attributes."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        mod.weight.copy_(torch.randint(-wmax, wmax + 1, mod.weight.shape, generator=g).float() * 2.0 ** -wp)
        if mod.bias is not None:
            mod.bias.copy_(torch.randint(-bmax, bmax + 1, mod.bias.shape, generator=g).float() * 2.0 ** -bp)
    mod.weight_fix_pos, mod.bias_fix_pos, mod.bitwidth = wp, bp, 8
    return mod


def _lower(model, output_fix_pos):
    gm = torch.fx.symbolic_trace(model.eval())
    gm.quant_info = {"output": {"hand_made": [[8, output_fix_pos]]}, "param": {}}
    gm.output_fix_pos = output_fix_pos
    return gm


def _inputs(shape, p, seed):
    """Batch of 2*shape[0]: first half exact half-LSB ties at fix_pos p, second half ordinary values.

    Tie codes k + 0.5 with k in [-130, 127]; the first four are -130.5, -129.5, 127.5, 128.5, which
    half_up to -130, -129, 128, 129 and saturate at -128 / 127.
    """
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(-130, 128, shape, generator=g)
    k.view(-1)[:4] = torch.tensor([-131, -130, 127, 128])
    ties = (k.float() + 0.5) * 2.0 ** -p
    plain = torch.randn(shape, generator=g) * 2.0 ** (7 - p) / 3
    return torch.cat([ties, plain]).contiguous()


class _TieCounter(torch.fx.Interpreter):
    """Counts, at every fake_quant node, the inputs that are exact half-LSB ties."""

    def __init__(self, gm):
        super().__init__(gm)
        self.ties = {}

    def run_node(self, n):
        if n.op == "call_function" and n.target is fixpoint.fake_quant:
            args, _ = self.fetch_args_kwargs_from_env(n)
            v = args[0] * 2.0 ** args[1]
            self.ties[n.name] = int(((v - torch.floor(v)) == 0.5).sum())
        return super().run_node(n)


def _ties(gm, x):
    counter = _TieCounter(gm)
    with torch.no_grad():
        counter.run(x)
    return counter.ties


# --------------------------------------------------------------------------- hand-made graphs


class ConvReLU(nn.Module):
    """conv (bias) -> ReLU, conv -> ReLU6, depthwise conv (groups=C, bias) -> LeakyReLU(26/256)."""

    def __init__(self):
        super().__init__()
        self.conv = _set_params(nn.Conv2d(3, 8, 3, padding=1), 6, 8, 1)
        self.relu = nn.ReLU()
        self.conv6 = _set_params(nn.Conv2d(8, 8, 1, bias=False), 7, 7, 2)
        self.relu6 = nn.ReLU6()
        self.dw = _set_params(nn.Conv2d(8, 8, 3, padding=1, groups=8), 6, 11, 3)
        self.leaky = nn.LeakyReLU(26.0 / 256.0)

    def forward(self, x):
        x = fq(x, 5)
        x = fq(self.relu(self.conv(x)), 7)
        x = fq(self.relu6(self.conv6(x)), 9)
        return fq(self.leaky(self.dw(x)), 10)


class StridedSameConv(nn.Module):
    """conv with stride 2 and dilation, conv with padding='same' and an even kernel, F.relu, clamp."""

    def __init__(self):
        super().__init__()
        self.a = _set_params(nn.Conv2d(3, 4, 3, stride=2, padding=2, dilation=2), 6, 6, 4)
        self.b = _set_params(nn.Conv2d(4, 4, 4, padding="same"), 6, 5, 5)

    def forward(self, x):
        x = fq(x, 5)
        x = fq(F.relu(self.a(x)), 7)
        return fq(torch.clamp(self.b(x), -0.75, 0.5), 7)


class Pools(nn.Module):
    """maxpool; avgpool 3x3 with the DPU correction mul; avgpool without padded pixels counted."""

    def __init__(self):
        super().__init__()
        self.maxpool = nn.MaxPool2d(2)
        self.avgpool = nn.AvgPool2d(3, stride=1, padding=1)
        self.avg_nopad = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)

    def forward(self, x):
        x = fq(x, 5)
        m = fq(self.maxpool(x), 4)
        a = fq(self.avgpool(m) * 0.984375, 6)  # 9*7/64 (docs/arithmetic.md#average-pool-correction)
        return fq(self.avg_nopad(a) * 0.984375, 7)


class GlobalPool(nn.Module):
    """conv -> ReLU, global adaptive avgpool over 7x7 (a division by 49), flatten, linear."""

    def __init__(self):
        super().__init__()
        self.conv = _set_params(nn.Conv2d(3, 8, 3, padding=1), 6, 7, 6)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = _set_params(nn.Linear(8, 16), 3, 9, 7, wmax=1)

    def forward(self, x):
        x = fq(x, 5)
        x = fq(F.relu(self.conv(x)), 6)
        x = fq(self.gap(x), 8)
        return fq(self.fc(self.flatten(x)), 9)


class AdaptiveGrid(nn.Module):
    """adaptive avgpool 6x6 -> 2x2 (3x3 windows, torch divides by 3 then by 3)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((2, 2))

    def forward(self, x):
        return fq(self.pool(fq(x, 5)), 6)


class AddCat(nn.Module):
    """two conv branches, torch.add + ReLU, operator.add, torch.cat, operator.mul by a constant."""

    def __init__(self):
        super().__init__()
        self.a = _set_params(nn.Conv2d(3, 4, 3, padding=1), 6, 6, 8)
        self.b = _set_params(nn.Conv2d(3, 4, 1), 7, 7, 9)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = fq(x, 5)
        a = fq(self.a(x), 6)
        b = fq(self.b(x), 7)
        s = fq(self.relu(torch.add(a, b)), 6)
        t = fq(a * 0.25 + b * 0.25, 8)
        return fq(torch.cat([s, t, x], dim=1), 5)


class Upsampling(nn.Module):
    """nn.Upsample(scale 2, nearest), F.interpolate to an uneven size (nearest)."""

    def __init__(self):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x):
        x = fq(x, 5)
        u = self.up(fq(x * 0.75, 6))
        return fq(F.interpolate(u, size=(17, 9), mode="nearest") * 0.375, 7)


class HardSwishLowered(nn.Module):
    """conv -> Hardswish as the quantizer computes it: x * Q7(relu6(x + 3) * 2731/16384) (docs/arithmetic.md#hardsigmoid-and-hardswish)."""

    def __init__(self):
        super().__init__()
        self.conv = _set_params(nn.Conv2d(3, 4, 1), 6, 6, 10)

    def forward(self, x):
        x = fq(x, 5)
        c = fq(self.conv(x), 8)
        h = torch.clamp(torch.add(c, 3.0), 0.0, 6.0)
        h = fq(torch.mul(h, 2731.0 / 16384.0), 7)
        return fq(c * h, 9)


class Shapes(nn.Module):
    """ConvTranspose2d, view(x.size(0), -1), torch.flatten, permute, reshape, Linear on 3-D input."""

    def __init__(self):
        super().__init__()
        self.deconv = _set_params(nn.ConvTranspose2d(3, 4, 2, stride=2), 7, 7, 11)
        self.fc = _set_params(nn.Linear(4, 3), 7, 7, 12)

    def forward(self, x):
        x = fq(x, 5)
        d = fq(self.deconv(x), 7)                        # (N, 4, 2H, 2W)
        p = d.permute(0, 2, 3, 1).reshape(d.size(0), -1, 4)  # (N, 4HW, 4)
        y = fq(self.fc(p), 8)                            # (N, 4HW, 3)
        return fq(torch.flatten(y.view(y.size(0), -1), 1) + 0.25, 7)


class Functional(nn.Module):
    """F.max_pool2d, F.avg_pool2d (+ correction), F.adaptive_avg_pool2d, F.relu6, F.leaky_relu,
    torch.relu, torch.reshape, torch.permute, Tensor.add / .mul / .relu / .contiguous."""

    def forward(self, x):
        x = fq(x, 5)
        m = fq(F.max_pool2d(x, 2, stride=2).relu(), 4)
        a = fq(F.avg_pool2d(m, 3, 1, 1) * 0.984375, 6)
        g = fq(F.adaptive_avg_pool2d(a, (2, 2)), 5)
        h = fq(F.leaky_relu(g.mul(0.75), 0.1015625).add(F.relu6(g)), 5)
        h = torch.permute(torch.relu(h).contiguous(), (0, 2, 3, 1))
        return fq(torch.reshape(h, (-1, 12)) * 0.5, 5)


class StdRound(nn.Module):
    """fake_quant with std_round (ties away from zero), as used for weights and bias."""

    def forward(self, x):
        return fq(x, 6, 8, "std_round")


# name -> (model class, sample shape (C, H, W), input fix_pos, output fix_pos, fake_quant nodes
# where exact ties cannot occur, with the reason)
CASES = {
    "conv_relu_relu6_depthwise_leaky": (ConvReLU, (3, 6, 6), 5, 10, ()),
    "conv_strided_dilated_same_clamp": (StridedSameConv, (3, 9, 9), 5, 7, ()),
    "maxpool_avgpool_correction": (Pools, (3, 16, 16), 5, 7, ()),
    # the mean of 49 values on the 2^-6 grid at fix_pos 8 is 4 S / 49: never k + 1/2
    "global_avgpool_flatten_linear": (GlobalPool, (3, 7, 7), 5, 9, ("fake_quant_2",)),
    # a window sum S on the 2^-5 grid over 9 pixels at fix_pos 6 gives 2 S / 9: never k + 1/2
    "adaptive_avgpool_grid": (AdaptiveGrid, (3, 6, 6), 5, 6, ("fake_quant_1",)),
    "add_cat_mul": (AddCat, (3, 5, 5), 5, 5, ()),
    "nearest_upsample": (Upsampling, (3, 5, 4), 5, 7, ()),
    # relu6(x+3) * 2731/16384 * 2^7 = n * 2731 * 2^-(p+7) for grid codes n: never k + 1/2 (2731 odd)
    "hardswish_lowered": (HardSwishLowered, (3, 4, 4), 5, 9, ("fake_quant_2",)),
    "convtranspose_view_permute_linear3d": (Shapes, (3, 3, 3), 5, 7, ()),
    "std_round": (StdRound, (3, 4, 4), 6, 6, ()),
    "functional_forms": (Functional, (3, 8, 8), 5, 5, ()),
}


def _case(name, seed=0):
    cls, shape, p_in, p_out, no_ties = CASES[name]
    gm = _lower(cls(), p_out)
    x = _inputs((4,) + shape, p_in, seed)
    return gm, x, no_ties


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case exported in both flavours once: name -> (gm, inputs, {flavour: path})."""
    out = tmp_path_factory.mktemp("onnx")
    result = {}
    for name in CASES:
        gm, x, no_ties = _case(name)
        paths = {fl: export_onnx(gm, x[:1].clone(), str(out / ("%s_%s.onnx" % (name, fl))), fl)
                 for fl in ("exact", "qdq")}
        result[name] = (gm, x, no_ties, paths)
    return result


@pytest.mark.parametrize("name", sorted(CASES))
def test_inputs_hit_ties_at_every_fake_quant(exported, name):
    gm, x, no_ties, _ = exported[name]
    ties = _ties(gm, x)
    assert ties, "the graph has fake_quant nodes"
    missing = [n for n, count in ties.items() if count == 0 and n not in no_ties]
    assert not missing, "no exact ties reach %s: %s" % (missing, ties)


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_flavour_is_bit_exact(exported, name):
    gm, x, _, paths = exported[name]
    report = verify_onnx(gm, paths["exact"], x)
    assert report["flavour"] == "exact"
    assert report["elements"] == gm(x).numel()
    assert report["max_abs_diff"] == 0.0 and report["mismatches"] == 0, report
    assert report["max_diff_lsb"] == 0.0
    check_agreement(report, 0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_qdq_flavour_equals_half_even_reference(exported, name):
    """qdq is exactly the simulation with every quantization point rounding half to even."""
    gm, x, _, paths = exported[name]
    report = verify_onnx(_half_even_reference(gm), paths["qdq"], x)
    assert report["flavour"] == "qdq"
    assert report["max_abs_diff"] == 0.0 and report["mismatches"] == 0, report


@pytest.mark.parametrize("name", sorted(CASES))
def test_package_qdq_reference_equals_the_independent_one(exported, name):
    gm, x, _, _ = exported[name]
    ours, theirs = qdq_reference(gm), _half_even_reference(gm)
    assert torch.equal(ours(x.clone()), theirs(x.clone()))
    assert ours.output_fix_pos == gm.output_fix_pos
    assert sum(n.target is fixpoint.fake_quant for n in gm.graph.nodes) > 0   # gm itself unchanged


@pytest.mark.parametrize("name", sorted(CASES))
def test_verify_qdq_is_exact_and_reports_the_default_optimizations(exported, name):
    gm, x, _, paths = exported[name]
    report = verify_qdq(gm, paths["qdq"], x)
    assert report["reference_mismatches"] == 0 and report["ort_optimizations"] == "all"
    assert report["quantization_points"] == sum(n.target is fixpoint.fake_quant for n in gm.graph.nodes)
    assert (qdq_warning(report) is None) == (report["max_diff_lsb"] <= 1)


def test_verify_qdq_refuses_a_file_that_is_not_the_half_even_simulation(exported):
    gm, x, _, paths = exported[sorted(CASES)[0]]
    with pytest.raises(ExportError, match="not the half-to-even simulation.*exporter bug"):
        verify_qdq(gm, paths["exact"], x)      # half_up on ties: differs from the half-even reference


def test_qdq_warning_past_one_lsb_only():
    report = {"flavour": "qdq", "max_abs_diff": 0.5, "mismatches": 79, "elements": 100, "max_diff_lsb": 7.0,
              "fraction_mismatched": 0.79, "quantization_points": 21}
    warning = qdq_warning(report)
    for fragment in ("up to 7 LSB", "79 of 100 elements, 79%", "21 quantization points", "half_up",
                     "simulation and of onnx_exact"):
        assert fragment in warning
    assert qdq_warning(dict(report, max_diff_lsb=1.0)) is None
    assert qdq_warning(dict(report, mismatches=0, max_abs_diff=0.0, max_diff_lsb=0.0)) is None
    assert "no output fix_pos" in qdq_warning(dict(report, max_diff_lsb=None))


@pytest.mark.parametrize("name", sorted(CASES))
def test_qdq_flavour_differs_from_sim_on_ties(exported, name):
    gm, x, _, paths = exported[name]
    report = verify_onnx(gm, paths["qdq"], x)
    assert report["mismatches"] > 0, "half-even vs half_up must show on tie inputs: %s" % report
    assert report["max_diff_lsb"] == report["max_abs_diff"] * 2.0 ** gm.output_fix_pos
    assert report["max_diff_lsb"] == int(report["max_diff_lsb"]) >= 1


def test_qdq_within_one_lsb_at_a_single_quantization_point(tmp_path):
    """Input ties, then ops that move values without arithmetic: qdq is off by at most 1 LSB."""

    class PassThrough(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.MaxPool2d(2)
            self.up = nn.Upsample(scale_factor=2)

        def forward(self, x):
            q = fq(x, 5)
            return torch.flatten(torch.cat([F.relu(self.up(self.pool(q))), q], 1), 1)

    gm = _lower(PassThrough(), 5)
    x = _inputs((8, 3, 4, 4), 5, 3)
    path = export_onnx(gm, x[:1].clone(), str(tmp_path / "p.onnx"), "qdq")
    report = verify_onnx(gm, path, x)
    # ties whose floor is even round down under half-even and up under half_up
    assert report["mismatches"] > 0
    assert report["max_diff_lsb"] == 1.0
    check_agreement(report, 1)
    with pytest.raises(ExportError):
        check_agreement(report, 0)


def test_exact_rounding_edge_values(tmp_path):
    """half_up at v = +-0.5, +-1.5, +-2.5, 0.5 - 2^-25 (where Floor(v + 0.5) would give 1), saturation."""

    class One(nn.Module):
        def forward(self, x):
            return fq(x, 3)

    gm = _lower(One(), 3)
    v = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.5 - 2.0 ** -25, -0.5 - 2.0 ** -24,
                      0.49999994, 127.49999, 127.5, -128.5, -129.5, 1e30, -1e30, 0.0, -0.0, 3.25])
    x = (v * 2.0 ** -3).view(1, 1, 2, 9).contiguous()
    path = export_onnx(gm, x, str(tmp_path / "e.onnx"), "exact")
    import onnxruntime as ort
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x.numpy()})[0]
    codes = (torch.from_numpy(got) * 8).view(-1).tolist()
    assert codes == [-2, -1, 0, 1, 2, 3, 0, -1, 0, 127, 127, -128, -128, 127, -128, 0, 0, 3]
    assert verify_onnx(gm, path, x)["max_abs_diff"] == 0.0


class PoolArithmetic(nn.Module):
    """Unquantized outputs of every averaging op, so the float results themselves are compared."""

    def __init__(self):
        super().__init__()
        self.avg = nn.AvgPool2d(3, stride=1, padding=1)
        self.avg_nopad = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.avg5 = nn.AvgPool2d(5, stride=1, padding=2, divisor_override=24)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.grid = nn.AdaptiveAvgPool2d(2)

    def forward(self, x):
        x = fq(x, 5)
        return (self.avg(x) * 0.984375, self.avg_nopad(x), self.avg5(x), self.gap(x), self.grid(x),
                F.interpolate(x, size=(11, 5), mode="nearest"))


def test_exact_averaging_arithmetic_is_bit_exact_before_quantization(tmp_path):
    gm = _lower(PoolArithmetic(), None)
    gm.output_fix_pos = None
    x = _inputs((8, 3, 6, 6), 5, 9)
    path = export_onnx(gm, x[:1].clone(), str(tmp_path / "pools.onnx"), "exact")
    report = verify_onnx(gm, path, x)
    assert report["max_abs_diff"] == 0.0 and report["mismatches"] == 0, report
    assert report["max_diff_lsb"] is None
    # the check is sensitive: multiplying by the reciprocal instead of dividing changes results
    q = fq(x, 5)
    window_sum = F.avg_pool2d(q, 3, stride=1, padding=1, divisor_override=1)
    assert bool((window_sum * (1.0 / 9.0) != F.avg_pool2d(q, 3, stride=1, padding=1)).any())
    assert bool((q.sum((2, 3), keepdim=True) / 7 / 7 != F.adaptive_avg_pool2d(q, 1)).any())


def test_exact_matches_at_batch_one_and_dynamic_batch(exported):
    gm, x, _, paths = exported["conv_relu_relu6_depthwise_leaky"]
    for batch in (x[:1], x[:3], x):
        assert verify_onnx(gm, paths["exact"], batch.contiguous())["mismatches"] == 0
    model = onnx.load(paths["exact"])
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "N"


def test_model_metadata_opset_and_fix_pos_table(exported):
    gm, _, _, paths = exported["global_avgpool_flatten_linear"]
    for flavour, path in sorted(paths.items()):
        model = onnx.load(path)
        props = {p.key: p.value for p in model.metadata_props}
        assert props["flavour"] == flavour
        assert model.opset_import[0].version == 13 and model.ir_version == 7
        assert model.producer_name == "vitis-pipeline"
        table = json.loads(props["fix_pos"])
        assert table["output_fix_pos"] == 9 == json.loads(props["output_fix_pos"])
        assert {n: e["fix_pos"] for n, e in table["activations"].items()} == {
            "fake_quant": 5, "fake_quant_1": 6, "fake_quant_2": 8, "fake_quant_3": 9}
        assert table["params"]["conv"] == {"weight_fix_pos": 6, "bias_fix_pos": 7, "bitwidth": 8}
        assert table["params"]["fc"] == {"weight_fix_pos": 3, "bias_fix_pos": 9, "bitwidth": 8}
        assert json.loads(props["quant_info"]) == gm.quant_info
    qdq = {p.key: p.value for p in onnx.load(paths["qdq"]).metadata_props}
    assert "half to even" in qdq["rounding"] and "half_up" in qdq["rounding"]
    assert "int8" in qdq["bias"]


def test_qdq_uses_int8_codes_and_exact_uses_float_values(exported):
    gm, _, _, paths = exported["global_avgpool_flatten_linear"]
    qdq = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(paths["qdq"]).graph.initializer}
    exact = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(paths["exact"]).graph.initializer}
    w = gm.conv.weight.detach()
    assert qdq["conv.weight/codes"].dtype == np.int8 and qdq["conv.bias/codes"].dtype == np.int8
    assert np.array_equal(qdq["conv.weight/codes"].astype(np.float32) * 2.0 ** -6, w.numpy())
    assert exact["conv.weight"].dtype == np.float32 and np.array_equal(exact["conv.weight"], w.numpy())
    ops = [n.op_type for n in onnx.load(paths["qdq"]).graph.node]
    assert ops.count("QuantizeLinear") == 4 and ops.count("DequantizeLinear") == 4 + 4
    assert "Round" not in ops and "QuantizeLinear" not in [n.op_type for n in onnx.load(paths["exact"]).graph.node]


def test_non_contiguous_parameter_is_written_in_logical_order(tmp_path):
    class Lin(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = _set_params(nn.Linear(6, 4), 6, 6, 13)
            self.fc.weight = nn.Parameter(self.fc.weight.detach().t().contiguous().t())  # strides (1, 4)

        def forward(self, x):
            return fq(self.fc(fq(x, 5)), 6)

    gm = _lower(Lin(), 6)
    assert not gm.fc.weight.is_contiguous()
    x = _inputs((4, 6), 5, 4)
    for flavour in ("exact", "qdq"):
        path = export_onnx(gm, x[:1].clone(), str(tmp_path / (flavour + ".onnx")), flavour)
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
        w = inits["fc.weight"] if flavour == "exact" else inits["fc.weight/codes"] * 2.0 ** -6
        assert np.array_equal(w, gm.fc.weight.detach().numpy())
    assert verify_onnx(gm, str(tmp_path / "exact.onnx"), x)["max_abs_diff"] == 0.0


def test_a_layer_named_output_does_not_clash_with_the_graph_output(tmp_path):
    class Named(nn.Module):
        def __init__(self):
            super().__init__()
            self.input = nn.ReLU()
            self.output = _set_params(nn.Linear(4, 4), 6, 6, 16)

        def forward(self, x):
            return fq(self.output(self.input(fq(x, 5))), 6)

    gm = _lower(Named(), 6)
    assert "output" in {n.name for n in gm.graph.nodes if n.op == "call_module"}
    x = _inputs((4, 4), 5, 17)
    path = export_onnx(gm, x[:1].clone(), str(tmp_path / "n.onnx"), "exact")
    graph = onnx.load(path).graph
    assert [graph.input[0].name, graph.output[0].name] == ["input", "output_io"]
    assert verify_onnx(gm, path, x)["mismatches"] == 0


def test_same_graph_gives_identical_bytes(tmp_path):
    digests = set()
    for i in range(2):
        gm, x, _ = _case("add_cat_mul")  # a freshly built and traced model each time
        for flavour in ("exact", "qdq"):
            path = export_onnx(gm, x[:1].clone(), str(tmp_path / ("%s_%d.onnx" % (flavour, i))), flavour)
            with open(path, "rb") as f:
                digests.add((flavour, hashlib.sha256(f.read()).hexdigest()))
    assert len(digests) == 2  # one per flavour
    assert sorted(os.listdir(str(tmp_path))) == ["exact_0.onnx", "exact_1.onnx", "qdq_0.onnx", "qdq_1.onnx"]


def test_batch_four_example_is_refused_p04(tmp_path):
    gm, x, _ = _case("conv_relu_relu6_depthwise_leaky")
    target = tmp_path / "m.onnx"
    with pytest.raises(ExportError) as err:
        export_onnx(gm, x[:4].clone(), str(target), "exact")
    message = str(err.value)
    assert "batch-1" in message and "(4, 3, 6, 6)" in message and "P04" in message
    assert not target.exists() and os.listdir(str(tmp_path)) == []


def test_example_must_be_contiguous_and_flavour_known(tmp_path):
    gm, x, _ = _case("conv_relu_relu6_depthwise_leaky")
    nhwc = x[:1].permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    with pytest.raises(ExportError, match="contiguous"):
        export_onnx(gm, nhwc, str(tmp_path / "m.onnx"), "exact")
    with pytest.raises(ExportError, match="flavour"):
        export_onnx(gm, x[:1].clone(), str(tmp_path / "m.onnx"), "int8")
    assert os.listdir(str(tmp_path)) == []


def test_all_unsupported_nodes_in_one_error(tmp_path):
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = _set_params(nn.Conv2d(3, 3, 3, padding=1, padding_mode="reflect"), 6, 6, 14)
            self.softplus = nn.Softplus()

        def forward(self, x):
            x = fq(x, 5)
            y = torch.special.erf(self.conv(x))
            y = self.softplus(y)
            y = y + y.exp()  # exp off a quantization grid
            return fq(F.interpolate(y, scale_factor=2, mode="bilinear"), 6)

    gm = _lower(Bad(), 6)
    target = tmp_path / "bad.onnx"
    with pytest.raises(ExportError) as err:
        export_onnx(gm, _inputs((1, 3, 4, 4), 5, 5)[:1].clone(), str(target), "qdq")
    message = str(err.value)
    assert "5 node(s) are unsupported" in message
    for fragment in ("conv (op=call_module, target=conv (Conv2d)): padding_mode 'reflect'",
                     "special_erf (op=call_function, target=", "]: no ONNX lowering",
                     "softplus (op=call_module, target=softplus (Softplus))",
                     "exp (op=call_method, target=exp): exp of a value off any quantization grid",
                     "interpolate (op=call_function", "bilinear resize of add, which is no quantization point's output"):
        assert fragment in message
    assert not target.exists()


def test_every_call_of_an_ops_record_is_written_by_its_form(tmp_path):
    """The exporter resolves a node as the capture does (the op records' tables), so each call a record
    lists is written by its op's ONNX form: ``torch.clip``, ``x.relu_()`` and an in-place add here."""
    import operator

    class Calls(nn.Module):
        def forward(self, x):
            x = fq(x, 5)
            y = torch.clip(x, -0.5, 0.75)
            y = operator.iadd(y, x.relu_())
            return fq(y, 5)

    gm = _lower(Calls(), 5)
    x = _inputs((2, 3, 4, 4), 5, 21)
    for flavour in ("exact", "qdq"):
        path = export_onnx(gm, x[:1].clone(), str(tmp_path / ("calls_%s.onnx" % flavour)), flavour)
        types = [n.op_type for n in onnx.load(path).graph.node]
        assert "Clip" in types and "Relu" in types and "Add" in types
    assert verify_onnx(gm, str(tmp_path / "calls_exact.onnx"), x)["mismatches"] == 0


def test_weights_off_their_grid_are_refused(tmp_path):
    class Off(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = _set_params(nn.Conv2d(3, 3, 1), 6, 6, 15)
            with torch.no_grad():
                self.conv.weight[0, 0, 0, 0] += 2.0 ** -9

        def forward(self, x):
            return fq(self.conv(fq(x, 5)), 6)

    with pytest.raises(ExportError, match="not on its 2\\^-6 grid"):
        export_onnx(_lower(Off(), 6), _inputs((1, 3, 2, 2), 5, 6)[:1].clone(), str(tmp_path / "o.onnx"),
                    "exact")


def test_qdq_refuses_more_than_eight_bits_exact_accepts(tmp_path):
    class Wide(nn.Module):
        def forward(self, x):
            return fq(x, 10, 16)

    gm = _lower(Wide(), 10)
    x = _inputs((2, 3, 2, 2), 10, 7)
    with pytest.raises(ExportError, match="at most 8 bits"):
        export_onnx(gm, x[:1].clone(), str(tmp_path / "w.onnx"), "qdq")
    path = export_onnx(gm, x[:1].clone(), str(tmp_path / "w.onnx"), "exact")
    assert verify_onnx(gm, path, x)["mismatches"] == 0


def test_output_without_fix_pos_reports_no_lsb(tmp_path):
    class Float(nn.Module):
        def forward(self, x):
            return fq(x, 5) * 3.0

    gm = _lower(Float(), None)
    gm.output_fix_pos = None
    x = _inputs((2, 3, 2, 2), 5, 8)
    report = verify_onnx(gm, export_onnx(gm, x[:1].clone(), str(tmp_path / "f.onnx"), "qdq"), x)
    assert report["max_diff_lsb"] is None and report["mismatches"] > 0
    with pytest.raises(ExportError, match="no fix_pos"):
        check_agreement(report, 1)


def test_check_agreement_reports_every_statistic():
    report = {"flavour": "qdq", "max_abs_diff": 0.0625, "mismatches": 37, "elements": 4096,
              "max_diff_lsb": 4.0, "fraction_mismatched": 37 / 4096}
    check_agreement(report, 4)
    with pytest.raises(ExportError) as err:
        check_agreement(report, 1)
    message = str(err.value)
    for fragment in ("qdq", "max_abs_diff=0.0625", "max_diff_lsb=4", "allowed 1 LSB",
                     "mismatches=37 of 4096", "fraction 0.009033"):
        assert fragment in message


# --------------------------------------------------------------------------- golden models
# The sim quantizer's lowered test-mode models of the three golden models (tests/data/golden,
# made by the real pytorch_nndct), built from the golden quant_info.json / bias_corr files.

GOLDEN_DIR = os.path.join(DATA, "golden")
GOLDEN = [(m, c) for m in ("mlp", "convnet", "resblock") for c in ("default", "nocle")]


def _golden_models():
    import importlib.util
    spec = importlib.util.spec_from_file_location("golden_models", os.path.join(GOLDEN_DIR, "golden_models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """(model, config) -> (lowered gm, eval inputs, tie inputs, golden dir, {flavour: onnx path})."""
    from pipeline.quantizers.quant_config import load_quant_config, parse_quant_config
    from pipeline.quantizers.sim.session import SimSession

    G = _golden_models()
    cache = {}

    def get(model, config):
        if (model, config) not in cache:
            src = G.config_dir(model, config)
            out = tmp_path_factory.mktemp("%s_%s" % (model, config))
            with open(os.path.join(src, "quant_info.json"), "rb") as f:
                (out / "quant_info.json").write_bytes(f.read())
            if config == "default":  # nndct's bias_corr.pth, stored as tensors in bias_corr.pt
                torch.save(torch.load(os.path.join(src, "bias_corr.pt"), weights_only=True),
                           str(out / "bias_corr.pth"))
            cfg = load_quant_config(None) if config == "default" else parse_quant_config(dict(G.NOCLE_CONFIG))
            eval_inputs = G.load_array(model, "eval_inputs.npy")
            ties = G.load_array(model, "tie_inputs.npy")
            gm = SimSession(G.load_model(model), eval_inputs[:1].clone(), cfg).load_test(str(out))
            paths = {fl: export_onnx(gm, eval_inputs[:1].clone(), str(out / (fl + ".onnx")), fl)
                     for fl in ("exact", "qdq")}
            cache[model, config] = (gm, eval_inputs, ties, src, paths)
        return cache[model, config]

    return get


@pytest.mark.parametrize("model,config", GOLDEN)
def test_golden_exact_onnx_reproduces_sim_and_real_quantizer(golden, model, config):
    import onnxruntime as ort
    gm, eval_inputs, ties, src, paths = golden(model, config)
    session = ort.InferenceSession(paths["exact"], providers=["CPUExecutionProvider"])
    for inputs, stored in ((eval_inputs, "quant_outputs.npy"), (ties, "quant_outputs_ties.npy")):
        report = verify_onnx(gm, paths["exact"], inputs)
        assert report["max_abs_diff"] == 0.0 and report["mismatches"] == 0, report
        check_agreement(report, 0)
        got = session.run(None, {"input": inputs.numpy()})[0]
        assert np.array_equal(got, np.load(os.path.join(src, stored)))  # pytorch_nndct's own outputs


@pytest.mark.parametrize("model,config", GOLDEN)
def test_golden_qdq_is_the_half_even_simulation(golden, model, config):
    gm, eval_inputs, ties, _, paths = golden(model, config)
    reference = _half_even_reference(gm)
    for inputs in (eval_inputs, ties):
        assert verify_onnx(reference, paths["qdq"], inputs)["mismatches"] == 0
        assert verify_qdq(gm, paths["qdq"], inputs)["reference_mismatches"] == 0
    report = verify_onnx(gm, paths["qdq"], ties)
    assert report["mismatches"] > 0, "tie inputs must show half-even vs half_up: %s" % report


@pytest.mark.parametrize("model,config", [g for g in GOLDEN if g[0] != "resblock"])
def test_golden_qdq_within_one_lsb(golden, model, config):
    """mlp and convnet: qdq stays within 1 LSB of the simulation on eval and tie inputs.

    Not asserted for resblock: its 12 quantization points (avgpool correction, resize, concat)
    produce many ties, and 1-LSB differences there add up downstream (see the report).
    """
    gm, eval_inputs, ties, _, paths = golden(model, config)
    for inputs in (eval_inputs, ties):
        check_agreement(verify_onnx(gm, paths["qdq"], inputs), 1)


# --------------------------------------------------------------------------- the model zoo
# Every zoo model (random weights, seeded; BN statistics made non-trivial), calibrated by the sim
# with the real quantizer's defaults, exported as qdq: the file equals the half-to-even simulation
# bit for bit in ONNX Runtime, and its difference from the simulation is only reported.

def _zoo_case(name, tmp_path):
    from pipeline.models.zoo import ZOO
    from pipeline.quantizers.quant_config import load_quant_config
    from pipeline.quantizers.sim.session import SimSession

    torch.manual_seed(7)
    shape = {"digits_cnn": (4, 1, 8, 8)}.get(name, (4, 3, 32, 32))
    model = randomize_bn(ZOO[name](num_classes=10, in_channels=shape[1]), 8)
    x = torch.randn((12,) + shape[1:], generator=torch.Generator().manual_seed(9))
    session = SimSession(model, x[:1].clone(), load_quant_config(None))
    calibrator = session.calibrator()
    for batch in x.split(4):
        calibrator.step(batch)
    session.export_quant_config(calibrator, str(tmp_path))
    return session.load_test(str(tmp_path)), x


@pytest.mark.parametrize("name", ["digits_cnn", "resnet18", "mobilenet_v2"])
def test_zoo_qdq_is_the_half_even_simulation(tmp_path, name):
    gm, x = _zoo_case(name, tmp_path)
    path = export_onnx(gm, x[:1].clone(), str(tmp_path / "qdq.onnx"), "qdq")
    report = verify_qdq(gm, path, x)
    assert report["reference_mismatches"] == 0
    assert report["quantization_points"] > 0 and report["elements"] == 12 * 10
    assert (qdq_warning(report) is None) == (report["max_diff_lsb"] <= 1)
    exact = export_onnx(gm, x[:1].clone(), str(tmp_path / "exact.onnx"), "exact")
    assert verify_onnx(gm, exact, x)["mismatches"] == 0
