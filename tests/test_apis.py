"""The drop-in torch_quantizer, the SimBackend contract and the lowered test-mode graph."""
import json
import logging
import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import torch_quantizer
from pipeline.errors import BackendUnavailableError, ConfigError, ExportError, QuantizationError
from pipeline.quantizers import fixpoint
from pipeline.safeload import safe_torch_load
from pipeline.quantizers.base import QuantSettings, get_backend
from pipeline.quantizers.quant_config import load_quant_config
from pipeline.fx.capture import capture
from pipeline.quantizers.sim.plan import QuantPlan, adjust_fix_pos


class SmallNet(nn.Module):
    """conv-BN-ReLU6, depthwise conv-BN-LeakyReLU, Hardswish, concat, pooled linear head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU6()
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.dw_bn = nn.BatchNorm2d(8)
        self.leaky = nn.LeakyReLU(0.1)
        self.hs = nn.Hardswish()
        self.drop = nn.Dropout(0.5)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y = self.act(self.bn(self.conv(x)))
        z = self.leaky(self.dw_bn(self.dw(y)))
        c = torch.cat([y, self.hs(z)], dim=1)
        return self.fc(torch.flatten(self.drop(self.gap(c)), 1))


def _model(seed=0):
    torch.manual_seed(seed)
    m = SmallNet()
    g = torch.Generator().manual_seed(seed + 1)
    for bn in (m.bn, m.dw_bn):
        bn.running_mean.copy_(0.3 * torch.randn(8, generator=g))
        bn.running_var.copy_(0.5 + torch.rand(8, generator=g))
    return m.eval()


def _batches(n=4, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 3, 8, 8, generator=g) for _ in range(n)]


def _calibrate(tmp, model=None, config=None, batches=None):
    batches = batches or _batches()
    q = torch_quantizer("calib", model or _model(), (batches[0],), output_dir=str(tmp),
                        device=torch.device("cpu"), quant_config_file=config)
    for b in batches:
        q.quant_model(b)
    return q, q.export_quant_config()


def test_caller_model_and_inputs_are_never_modified(tmp_path):
    model = _model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batches = _batches()
    copies = [b.clone() for b in batches]
    versions = [b._version for b in batches]
    _calibrate(tmp_path, model, batches=batches)
    q = torch_quantizer("test", model, (batches[0],), output_dir=str(tmp_path), device="cpu")
    q.quant_model(batches[1])
    # the real quantizer rounds its input in place and swaps ReLU6 for ReLU in the caller's model
    assert all(torch.equal(a, b) for a, b in zip(batches, copies))
    assert [b._version for b in batches] == versions
    assert isinstance(model.act, nn.ReLU6) and model.leaky.negative_slope == 0.1
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_calib_then_test_in_one_process_equals_fresh_quantizer(tmp_path):
    _calibrate(tmp_path)
    x = _batches(1, seed=7)[0]
    first = torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu").quant_model(x)
    second = torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu").quant_model(x)
    assert torch.equal(first, second)


def test_files_written_and_format(tmp_path):
    q, path = _calibrate(tmp_path)
    assert path == os.path.join(str(tmp_path), "quant_info.json")
    info = json.load(open(path))
    assert info["bias_corrected"] is True and info["input"] == {}
    assert "SmallNet::conv.bias" in info["param"]  # BN folding creates the bias (facts 1.3)
    assert "SmallNet::nndct_hswish_5" not in info["output"]  # quantized by the concat
    assert "SmallNet::nndct_concat_6" in info["output"]
    table = safe_torch_load(os.path.join(str(tmp_path), "bias_corr.pth"))
    assert sorted(table) == ["SmallNet::nndct_conv2d_1", "SmallNet::nndct_dense_9",
                             "SmallNet::nndct_depthwise_conv2d_3"]
    assert all(isinstance(v, list) for v in table.values())


def test_quant_mode_rules():
    x = _batches(1)[0]
    with pytest.warns(UserWarning, match="Change it to 'calib'"):
        q = torch_quantizer("float", _model(), (x,), device="cpu", output_dir="unused_dir_for_test")
    assert q.quant_mode == "calib"
    with pytest.warns(UserWarning, match="deprecated"):
        assert torch_quantizer(1, _model(), (x,), device="cpu", output_dir="unused_dir_for_test").quant_mode == "calib"
    os.rmdir("unused_dir_for_test")


def test_export_quant_config_without_forward_only_logs(tmp_path, caplog):
    q = torch_quantizer("calib", _model(), (_batches(1)[0],), output_dir=str(tmp_path), device="cpu")
    with caplog.at_level(logging.ERROR):
        assert q.export_quant_config() is None
    assert "FORWARD" in caplog.text and os.listdir(str(tmp_path)) == []


def test_test_mode_missing_files_raise(tmp_path):
    x = _batches(1)[0]
    with pytest.raises(QuantizationError, match="quant_info.json"):
        torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu")
    _calibrate(tmp_path)
    os.remove(os.path.join(str(tmp_path), "bias_corr.pth"))
    with pytest.raises(QuantizationError, match="bias_corr.pth"):
        torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu")


def test_quant_info_of_another_model_is_rejected(tmp_path):
    _calibrate(tmp_path)
    other = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.raises(QuantizationError, match="does not match this model"):
        torch_quantizer("test", other, (_batches(1)[0],), output_dir=str(tmp_path), device="cpu")


def test_device_kwargs_and_config_handling(tmp_path):
    x = _batches(1)[0]
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match=r"CUDA \(HIP\) is not available, change device to CPU"):
            torch_quantizer("calib", _model(), (x,), output_dir=str(tmp_path))
    with pytest.raises(TypeError, match="nonsense"):
        torch_quantizer("calib", _model(), (x,), output_dir=str(tmp_path), device="cpu", nonsense=1)
    with pytest.warns(UserWarning, match="mix_bit"):
        torch_quantizer("calib", _model(), (x,), output_dir=str(tmp_path), device="cpu", mix_bit=True)
    bad = tmp_path / "bad.json"
    bad.write_text('{"include_cle": false}')
    with pytest.raises(ConfigError, match="target_device"):
        torch_quantizer("calib", _model(), (x,), output_dir=str(tmp_path), device="cpu", quant_config_file=str(bad))
    gpu = tmp_path / "gpu.json"
    gpu.write_text('{"target_device": "GPU"}')
    with pytest.raises(QuantizationError, match="DPU only"):
        torch_quantizer("calib", _model(), (x,), output_dir=str(tmp_path), device="cpu", quant_config_file=str(gpu))


def test_target_is_checked_against_the_registry(tmp_path):
    x = _batches(1)[0]

    def make(target, config=None):
        return torch_quantizer("calib", _model(), (x,), output_dir=str(tmp_path), device="cpu",
                               target=target, quant_config_file=config)

    with pytest.raises(ConfigError, match=r"'DPUCZDX8G_ISA1_B4069'.*closest: DPUCZDX8G_ISA1_B4096"):
        make("DPUCZDX8G_ISA1_B4069")
    with pytest.raises(ConfigError, match="of Vitis AI 3.x"):
        make("DPUCZDX8G_ISA0_B4096_MAX_BG2")  # ISA0 names expired in 3.x (facts 3.2)
    with pytest.raises(ConfigError, match="not the fingerprint"):
        make("0x0101000056010499")
    with pytest.raises(ConfigError, match="a str"):
        make(4096)
    with pytest.warns(UserWarning, match=r"does not do hardware-aware quantization.*default DPU flow"):
        q = make("DPUCZDX8G_ISA1_B4096")
    assert q.target == "DPUCZDX8G_ISA1_B4096"
    with pytest.warns(UserWarning, match="does not do hardware-aware"):
        make("0x0101000056010407")  # B4096's fingerprint (facts 3.2)
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"target_device": "DPU"}')
    with pytest.warns(UserWarning, match="hardware-aware mode is off"):
        make("DPUCV2DX8G_ISA1_C20B14", str(cfg))
    with pytest.raises(ConfigError, match="closest"):
        make("DPUCV2DX8G_ISA1_C20B41", str(cfg))
    # the fix positions are the default flow's: a target changes nothing in quant_info.json
    batches = _batches()
    with pytest.warns(UserWarning, match="hardware-aware"):
        q = torch_quantizer("calib", _model(), (batches[0],), output_dir=str(tmp_path / "t"), device="cpu",
                            target="DPUCZDX8G_ISA1_B4096")
    for b in batches:
        q.quant_model(b)
    q.export_quant_config()
    _calibrate(tmp_path / "plain", batches=batches)
    assert open(str(tmp_path / "t" / "quant_info.json")).read() == \
        open(str(tmp_path / "plain" / "quant_info.json")).read()


def test_state_dict_file_is_loaded_into_a_copy(tmp_path):
    trained, fresh = _model(0), _model(5)
    path = str(tmp_path / "w.pt")
    torch.save(trained.state_dict(), path)
    before = fresh.conv.weight.clone()
    a = tmp_path / "a"
    b = tmp_path / "b"
    _calibrate(a, trained)
    batches = _batches()
    q = torch_quantizer("calib", fresh, (batches[0],), state_dict_file=path, output_dir=str(b), device="cpu")
    for x in batches:
        q.quant_model(x)
    q.export_quant_config()
    assert torch.equal(fresh.conv.weight, before)
    assert open(str(a / "quant_info.json")).read() == open(str(b / "quant_info.json")).read()


def test_export_onnx_model(tmp_path):
    _calibrate(tmp_path)
    x = _batches(1)[0]
    q = torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu")
    assert q.export_onnx_model(output_dir=str(tmp_path)) is None  # no forward yet, like nndct
    q.quant_model(x)
    path = q.export_onnx_model(output_dir=str(tmp_path))
    assert path == os.path.join(str(tmp_path), "SmallNet_int.onnx") and os.path.isfile(path)


def test_export_xmodel_checks_like_nndct_then_says_where_xmodels_come_from(tmp_path):
    calib, _ = _calibrate(tmp_path)
    with pytest.raises(QuantizationError, match="needs test mode"):
        calib.export_xmodel(output_dir=str(tmp_path), deploy_check=False, dynamic_batch=False)
    x = _batches(1)[0]
    q = torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match="at least one forward"):
        q.export_xmodel(output_dir=str(tmp_path))
    q.quant_model(x)
    with pytest.raises(ExportError, match="batch size 4"):
        q.export_xmodel(output_dir=str(tmp_path), deploy_check=False, dynamic_batch=False)
    q.quant_model(x[:1])
    with pytest.raises(BackendUnavailableError, match=r"xir.*Vitis AI docker image.*backend: nndct"):
        q.export_xmodel(output_dir=str(tmp_path))
    assert not [f for f in os.listdir(str(tmp_path)) if f.endswith(".xmodel")]


def _bits(t):
    return t.contiguous().view(torch.int32)


@pytest.mark.filterwarnings("ignore:.*torch.jit:DeprecationWarning")
def test_export_torch_script_is_bit_exact_after_reload(tmp_path):
    _calibrate(tmp_path)
    x = _batches(1)[0]
    q = torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu")
    out = tmp_path / "ts"
    with pytest.raises(QuantizationError, match="at least one forward"):
        q.export_torch_script(output_dir=str(out))
    q.quant_model(x)  # batch 4: the trace still uses the batch-1 example
    script = q.export_torch_script(output_dir=str(out), verbose=False)
    assert isinstance(script, torch.jit.ScriptModule)
    assert os.listdir(str(out)) == ["SmallNet_int.pt"]  # nothing else (no temporary file) left
    loaded = torch.jit.load(str(out / "SmallNet_int.pt"))
    # inputs on half-LSB ties of the input fix position: half_up sends them up, half-even would not
    p_in = q.quant_model.quant_info["output"]["SmallNet::nndct_input_0"][0][1]
    codes = torch.randint(-128, 127, (6, 3, 8, 8), generator=torch.Generator().manual_seed(3))
    ties = (codes.float() + 0.5) * 2.0 ** -p_in
    for batch in (ties, _batches(1, seed=11)[0], x[:1]):
        expect = q.quant_model(batch)
        for _ in range(3):  # the JIT's profiling executor optimizes after the first runs
            assert torch.equal(_bits(loaded(batch)), _bits(expect))
            assert torch.equal(_bits(script(batch)), _bits(expect))


# -- lowered graph contract --------------------------------------------------------------------

@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lowered")
    _calibrate(folder)
    x = _batches(1)[0]
    return torch_quantizer("test", _model(), (x,), output_dir=str(folder), device="cpu").quant_model


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
    x = _batches(1, seed=9)[0]
    assert torch.equal(traced(x), lowered(x))


def test_lowered_matches_calibration_arithmetic_by_hand(lowered):
    """Rebuild the first quantization point by hand from quant_info and compare."""
    x = _batches(1, seed=3)[0]
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
        backend.calibrate(_model(), _batches(1)[0], [], str(tmp_path), QuantSettings())
    assert os.listdir(str(tmp_path)) == []


def test_backend_round_trip_equals_drop_in_api(tmp_path):
    backend = get_backend("sim")
    batches = _batches()
    summary = backend.calibrate(_model(), batches[0], iter(batches), str(tmp_path / "b"), QuantSettings())
    # relu_2 feeds both the depthwise conv and the concat, so CLE finds no conv pair (cle.py)
    assert summary["batches"] == 4 and summary["cle_pairs"] == []
    _calibrate(tmp_path / "a", batches=batches)
    assert open(str(tmp_path / "a" / "quant_info.json")).read() == open(str(tmp_path / "b" / "quant_info.json")).read()
    handle = backend.load_test(_model(), batches[0], str(tmp_path / "b"), QuantSettings())
    x = _batches(1, seed=5)[0]
    api = torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path / "a"), device="cpu").quant_model
    assert torch.equal(handle(x), api(x))
    files = backend.export(handle, batches[0], str(tmp_path / "out"), ["onnx_exact", "onnx_qdq"])
    assert sorted(os.path.basename(p) for p in files.values()) == ["SmallNet_int.onnx", "SmallNet_int_exact.onnx"]
    with pytest.raises(ConfigError, match="onnx_qdq"):
        backend.export(handle, batches[0], str(tmp_path / "out"), ["xmodel"])


def test_operator_without_dpu_mapping_is_a_float_operator(tmp_path):
    """An op nndct has no DPU type for runs in float on its quantized input (no refusal); as the
    model output it gets no fix position (golden_wide README, "Exhaustive probe")."""
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return torch.special.erf(self.conv(x))

    graph = capture(Odd(), torch.zeros(1, 3, 4, 4), load_quant_config(None))
    assert [n.name for n in graph.float_operators()] == ["aten_special_erf_2"]
    x = _batches(1)[0]
    _calibrate(tmp_path, Odd(), batches=[x])
    info = json.load(open(str(tmp_path / "quant_info.json")))
    assert list(info["output"]) == ["Odd::nndct_input_0", "Odd::nndct_conv2d_1"]
    q = torch_quantizer("test", Odd(), (x,), output_dir=str(tmp_path), device="cpu")
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
    """facts 2.4: shift_cut = w + i - o in [0, 16], shift_bias = w + i - b in [min(0, -(24-(8+shift_cut))), 16]."""
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    plan = QuantPlan(capture(net, torch.zeros(1, 3, 6, 6), load_quant_config(None)))
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

    plan = QuantPlan(capture(Up(), torch.zeros(1, 3, 4, 4), load_quant_config(None)))
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
        capture(model, torch.zeros(1, 3, 4, 4), load_quant_config(None))


def test_batchnorm_without_conv_stays_a_converted_batch_norm_node():
    """nndct keeps such a BatchNorm (QUANTIZER_TORCH_NOT_FUSED_BN) with weight = gamma/sqrt(var+eps),
    bias = beta - mean*weight, mean 0, var 1, eps 0: the same float function."""
    model = _LoneBN().eval()
    with torch.no_grad():
        model.bn.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        model.bn.running_var.copy_(torch.tensor([0.25, 4.0, 1.5]))
        model.bn.weight.copy_(torch.tensor([1.5, 0.5, -2.0]))
    graph = capture(model, torch.zeros(1, 3, 4, 4), load_quant_config(None))
    bn = graph.module(graph.by_name["nndct_batch_norm_2"])
    assert bn.eps == 0.0 and torch.equal(bn.running_mean, torch.zeros(3)) and torch.equal(bn.running_var, torch.ones(3))
    scale = model.bn.weight / torch.sqrt(model.bn.running_var + model.bn.eps)
    assert torch.equal(bn.weight, scale) and torch.equal(bn.bias, model.bn.bias - model.bn.running_mean * scale)
    x = torch.randn(2, 3, 4, 4)
    assert torch.allclose(graph.gm(x), model(x), atol=1e-6)
    assert graph.by_name["nndct_batch_norm_2"].param_names == {"weights": "_LoneBN::bn.weight", "bias": "_LoneBN::bn.bias"}


def test_inputs_must_be_float32_nchw_tensors(tmp_path):
    x = _batches(1)[0]
    expect = r"expected a float32 torch.Tensor \(N, C, H, W\), got "
    with pytest.raises(QuantizationError, match=expect + r"numpy.ndarray of shape \(4, 3, 8, 8\).*torch.from_numpy"):
        torch_quantizer("calib", _model(), (x.numpy(),), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match=r"input_args\[1\]: " + expect + "numpy.ndarray"):
        torch_quantizer("calib", _TwoInputs(), (x, x.numpy()), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match=r"takes 1 inputs \(x\), got 2 example tensors"):
        torch_quantizer("calib", _model(), (x, x), output_dir=str(tmp_path), device="cpu")
    q = torch_quantizer("calib", _model(), (x,), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match=r"calibration forward 1\): " + expect + "numpy.ndarray"):
        q.quant_model(x.numpy())
    with pytest.raises(QuantizationError, match=r"calibration forward 1\): " + expect + "a 3-D"):
        q.quant_model(x[0])
    with pytest.raises(QuantizationError, match=r"calibration forward 1\): the model takes 1 input tensors"):
        q.quant_model(x, x)
    assert q.export_quant_config() is None  # the refused forwards calibrated nothing
    _calibrate(tmp_path)
    t = torch_quantizer("test", _model(), (x,), output_dir=str(tmp_path), device="cpu")
    for bad, match in ((x.numpy(), "numpy.ndarray"), (x[0], "a 3-D"), (x.double(), r"a 4-D torch.float64.*\.float\(\)")):
        with pytest.raises(QuantizationError, match=r"quant_model input: " + expect + match):
            t.quant_model(bad)
    with pytest.raises(QuantizationError, match="at least one forward"):  # refused forwards do not count
        t.export_torch_script(output_dir=str(tmp_path / "ts"))


def test_non_finite_calibration_batch_is_skipped_with_a_warning(tmp_path):
    b0, b1, b2 = _batches(3)
    bad = b1.clone()
    bad[0, 0, 0, 0], bad[2, 1, 3, 3], bad[3, 2, 5, 5] = float("nan"), float("inf"), -float("inf")
    no_corr = tmp_path / "no_corr.json"
    no_corr.write_text('{"include_bias_corr": false, "target_device": "DPU"}')
    with pytest.warns(UserWarning, match=r"calibration forward 2: the input holds 3 non-finite values "
                                         r"\(NaN/Inf\) of 768.*nan_to_num"):
        _calibrate(tmp_path / "with", config=str(no_corr), batches=[b0, bad, b2])
    _calibrate(tmp_path / "without", config=str(no_corr), batches=[b0, b2])
    # the skipped batch left no trace in the fix positions, as in nndct
    assert open(str(tmp_path / "with" / "quant_info.json")).read() == \
        open(str(tmp_path / "without" / "quant_info.json")).read()
    # with bias correction on, the NaN error ends the correction (nndct's eval_qnoise): b2 changes nothing
    with pytest.warns(UserWarning, match="calibration forward 2"):
        _calibrate(tmp_path / "corr3", batches=[b0, bad, b2])
        _calibrate(tmp_path / "corr2", batches=[b0, bad])
    tables = [safe_torch_load(str(tmp_path / d / "bias_corr.pth")) for d in ("corr3", "corr2")]
    assert tables[0] == tables[1]


def test_calibration_batch_must_be_float32(tmp_path):
    q = torch_quantizer("calib", _model(), (_batches(1)[0],), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match="float32"):
        q.quant_model(_batches(1)[0].double())


# -- speed-ups of the sim keep its results (scripts/bench_quant.py) -----------------------------

def _nndct_diffs_fix_pos(x, scope=5):
    """fix_ops.py diffs_fix_pos as nndct writes it: every candidate scored by
    torch.sum(torch.pow(x - fake_quant(x), 2)) on float32 tensors, ties keep the smaller p."""
    mn, mx = torch.aminmax(x)
    p0 = fixpoint.overflow_free_fix_pos(x, 8)
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
    candidate_sse = fixpoint._candidate_sse
    monkeypatch.setattr(fixpoint, "_candidate_sse", lambda x, p, *a: scored.append(p) or candidate_sse(x, p, *a))
    for x in cases:
        expect = _nndct_diffs_fix_pos(x)
        assert fixpoint.diffs_fix_pos(x, 8, 5, "half_up") == expect
        assert fixpoint.diffs_fix_pos(x, 8, 5, "std_round") == expect
    if numel > fixpoint.BATCHED_SEARCH_NUMEL:  # candidates were skipped (the test is not vacuous)
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

