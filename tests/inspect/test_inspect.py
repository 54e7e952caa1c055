"""DPU inspection on the CPU: engine table, one test per assignment rule, public cases P09/P10,
zoo models, reports.

Expected values come from docs/targets.md (limits, fused activations, slope
26/256, conversions) and from the architectures of the test models, not from running the code.
"""

import json
import re
from xml.etree import ElementTree

import pytest
import torch
import torch.nn as nn

from pipeline.errors import ConfigError, DataError, PipelineError
from pipeline.inspect import inspect_model, write_reports
from pipeline.models import zoo
from pipeline.targets import TARGETS as REGISTRY, allows, get_target
from tests.support.lambda_model import Lambda

B4096 = "DPUCZDX8G_ISA1_B4096"

# the targets the inspection rules have engine parameters for
TARGETS = {name: t for name, t in REGISTRY.items() if t.engines is not None}


class Seq(nn.Module):
    """A chain of modules with readable node names (the fx node name is the attribute name)."""

    def __init__(self, **layers):
        super().__init__()
        self.names = list(layers)
        for name, layer in layers.items():
            setattr(self, name, layer)

    def forward(self, x):
        for name in self.names:
            x = getattr(self, name)(x)
        return x


def inspect(model, shape, target=B4096):
    torch.manual_seed(0)
    return inspect_model(model, torch.randn(*shape), target)


def only_reason(node):
    return " ".join(node.reasons)


# ---- engine table ------------------------------------------------------------------------------

def test_a_target_without_engine_parameters_is_refused_naming_those_that_have_them():
    assert REGISTRY["DPUCADF8H_ISA0"].engines is None
    with pytest.raises(ConfigError) as error:
        inspect_model(nn.ReLU(), torch.zeros(1, 1, 2, 2), "DPUCADF8H_ISA0")
    message = str(error.value)
    assert "no engine parameters for DPUCADF8H_ISA0" in message
    assert all(name in message for name in TARGETS)


def test_table_covers_the_required_families():
    families = {engines.family for engines in TARGETS.values()}
    assert {"DPUCZDX8G", "DPUCVDX8G", "DPUCV2DX8G", "DPUCAHX8H"} <= families
    for size in (512, 800, 1024, 1152, 1600, 2304, 3136, 4096):
        assert "DPUCZDX8G_ISA1_B{}".format(size) in TARGETS


@pytest.mark.parametrize("name", sorted(n for n in TARGETS if n.startswith("DPUCZDX8G")))
def test_dpuczdx8g_b_number_is_peak_ops_per_cycle(name):
    # B<n> = 2 (multiply + add) x pixel parallel x input channel parallel x output channel parallel
    conv = TARGETS[name].engines.conv
    size = int(name.rsplit("_B", 1)[1])
    assert 2 * conv.pixel_parallel * conv.input_channel_parallel * conv.output_channel_parallel == size


@pytest.mark.parametrize("name", sorted(n for n in TARGETS if re.search(r"_C\d+B\d+$", n)))
def test_versal_names_give_output_parallelism_and_batch(name):
    channels, batch = re.search(r"_C(\d+)B(\d+)$", name).groups()
    engines = TARGETS[name].engines
    assert engines.batch == int(batch)
    if TARGETS[name].family == "DPUCVDX8G":  # C32/C64 = output channel parallelism
        assert engines.conv.output_channel_parallel == int(channels)


def test_b4096_parameters_match_the_target_description():
    t = get_target(B4096).engines
    assert (t.conv.input_channel_parallel, t.conv.output_channel_parallel, t.conv.pixel_parallel) == (16, 16, 8)
    assert (t.conv.kernel_size, t.conv.stride) == ("1-16", "1-8")
    assert set(t.conv.nonlinear) == {"relu", "leaky_relu", "relu_six"}
    assert t.conv.weight_bank.bank_depth == 2048
    assert set(t.eltwise.elew_types) == {"add", "mult"}
    assert {"dwconv", "prelu", "avg_pool", "max_pool", "leaky_relu", "hsigmoid"} <= set(t.alu.alu_types)
    assert (t.alu.kernel_size, t.alu.stride) == ("1-256", "1-256")
    assert t.alu.pad == ("0-15", "0-255", "0-15", "0-255")


def test_range_strings():
    assert allows("1-16", 1) and allows("1-16", 16) and not allows("1-16", 17) and not allows("1-16", 0)
    assert allows("1,2,3,5,7", 5) and not allows("1,2,3,5,7", 4)
    assert allows("1-3,7", 7) and not allows("1-3,7", 6)


@pytest.mark.parametrize("name, closest", [("DPUCZDX8G_ISA1_B4069", "DPUCZDX8G_ISA1_B4096"),
                                           ("dpuczdx8g_isa1_b4096", "DPUCZDX8G_ISA1_B4096"),
                                           ("DPUCZDX8G_ISA0_B4096_MAX_BG2", "DPUCZDX8G_ISA1_B4096")])
def test_unknown_target_lists_valid_names_and_closest(name, closest):
    with pytest.raises(ConfigError) as error:
        inspect_model(nn.ReLU(), torch.zeros(1, 1, 2, 2), name)
    message = str(error.value)
    assert name in message and "did you mean {!r}".format(closest) in message
    assert "`python -m pipeline targets` lists them all" in message


# ---- conv2d rules ------------------------------------------------------------------------------

def test_conv_kernel_1_to_16():
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 16)), (1, 3, 20, 20)).node("conv").device == "DPU"
    conv = inspect(Seq(conv=nn.Conv2d(3, 8, 17)), (1, 3, 20, 20)).node("conv")
    assert conv.device == "CPU"
    assert "'kernel'(17 x 17)" in only_reason(conv) and "1-16" in only_reason(conv)


def test_conv_stride_1_to_8_and_target_specific():
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 3, stride=8)), (1, 3, 32, 32)).node("conv").device == "DPU"
    conv = inspect(Seq(conv=nn.Conv2d(3, 8, 3, stride=9)), (1, 3, 32, 32)).node("conv")
    assert conv.device == "CPU" and "'stride'(9 x 9)" in only_reason(conv) and "1-8" in only_reason(conv)
    # DPUCAHX8H's conv engine strides only 1-4.
    model = Seq(conv=nn.Conv2d(3, 8, 5, stride=5))
    assert inspect(model, (1, 3, 30, 30), B4096).node("conv").device == "DPU"
    conv = inspect(model, (1, 3, 30, 30), "DPUCAHX8H_ISA2").node("conv")
    assert conv.device == "CPU" and "1-4" in only_reason(conv)


def test_conv_stride_limit_not_applied_when_kernel_covers_input():
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 4, stride=9)), (1, 3, 4, 4)).node("conv").device == "DPU"


def test_conv_channel_limit_is_256_times_channel_parallel():
    b512 = "DPUCZDX8G_ISA1_B512"  # channel_parallel 8: limit 2048
    assert inspect(Seq(conv=nn.Conv2d(2048, 8, 1)), (1, 2048, 1, 1), b512).node("conv").device == "DPU"
    conv = inspect(Seq(conv=nn.Conv2d(2056, 8, 1)), (1, 2056, 1, 1), b512).node("conv")
    assert conv.device == "CPU" and "'input_channel'(2056)" in only_reason(conv) and "2048" in only_reason(conv)
    conv = inspect(Seq(conv=nn.Conv2d(8, 2056, 1)), (1, 8, 1, 1), b512).node("conv")
    assert conv.device == "CPU" and "'output_channel'(2056)" in only_reason(conv)
    # dilation x input channels <= 256 x channel_parallel (UG1414): 3 x 1024 > 2048
    conv = inspect(Seq(conv=nn.Conv2d(1024, 8, 3, dilation=3, padding=3)), (1, 1024, 8, 8), b512).node("conv")
    assert conv.device == "CPU" and "'dilation x input_channel'(3 x 1024)" in only_reason(conv)


def test_conv_weights_must_fit_the_bank_depth():
    # B4096: 16 banks x 16 wide x 2048 deep, output channel parallel 16:
    # 16 x 16 kernel x ceil(128 / 16) = 2048 fits; with 144 input channels 16 x 16 x 9 = 2304 does not.
    assert inspect(Seq(conv=nn.Conv2d(128, 16, 16)), (1, 128, 16, 16)).node("conv").device == "DPU"
    conv = inspect(Seq(conv=nn.Conv2d(144, 16, 16)), (1, 144, 16, 16)).node("conv")
    assert conv.device == "CPU"
    assert "2304 > bank_depth 2048" in only_reason(conv)


def test_conv_padding_no_larger_than_the_kernel():
    conv = inspect(Seq(conv=nn.Conv2d(3, 8, 1, padding=2)), (1, 3, 8, 8)).node("conv")
    assert conv.device == "CPU" and "'pad_left'(2)" in only_reason(conv) and "kernel (1)" in only_reason(conv)
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=3)), (1, 3, 8, 8)).node("conv").device == "DPU"
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=4)), (1, 3, 8, 8)).node("conv").device == "CPU"
    # the limit is the dilated kernel: 3 x 3 with dilation 2 spans 5
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=5, dilation=2)), (1, 3, 8, 8)).node("conv").device == "DPU"
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=6, dilation=2)), (1, 3, 8, 8)).node("conv").device == "CPU"
    conv = inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")), (1, 3, 8, 8)).node("conv")
    assert conv.device == "CPU" and "padding_mode 'reflect'" in only_reason(conv)


def test_a_conv_with_string_padding_is_a_float_operator_and_the_fix_gives_the_padding_as_numbers():
    # torch.jit traces aten::_convolution_mode, which the real quantizer has no op for (pipeline/ops/conv.py)
    conv = inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding="same")), (1, 3, 8, 8)).node("conv")
    assert conv.device == "CPU" and "aten::_convolution_mode" in only_reason(conv)
    assert [f.code for f in conv.fixes] == ["nn.Conv2d(..., padding='same') -> nn.Conv2d(..., padding=(1, 1))"]
    assert inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=(1, 1))), (1, 3, 8, 8)).node("conv").device == "DPU"
    even = inspect(Seq(conv=nn.Conv2d(3, 8, 4, padding="same")), (1, 3, 8, 8)).node("conv")
    assert even.device == "CPU" and "nn.ZeroPad2d((1, 2, 1, 2))" in even.fixes[0].code and even.fixes[0].exact


def test_prelu_after_a_conv_is_a_dpu_activation():
    result = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.PReLU(8)), (1, 3, 8, 8))
    assert result.summary_line() == "DPU: 2 nodes, CPU: 0 nodes"


def test_conv_groups_1_or_depthwise():
    conv = inspect(Seq(conv=nn.Conv2d(8, 8, 3, padding=1, groups=2)), (1, 8, 8, 8)).node("conv")
    assert conv.op == "conv2d" and conv.device == "CPU" and "groups = 2" in only_reason(conv)
    dw = inspect(Seq(conv=nn.Conv2d(8, 8, 3, padding=1, groups=8)), (1, 8, 8, 8)).node("conv")
    assert dw.op == "depthwise_conv2d" and dw.device == "DPU"
    multiplier = inspect(Seq(conv=nn.Conv2d(8, 16, 3, padding=1, groups=8)), (1, 8, 8, 8)).node("conv")
    assert multiplier.op == "depthwise_conv2d"


def test_depthwise_needs_a_depthwise_engine_and_its_limits():
    model = Seq(conv=nn.Conv2d(8, 8, 3, padding=1, groups=8))
    dw = inspect(model, (1, 8, 8, 8), "DPUCAHX8H_ISA2").node("conv")
    assert dw.device == "CPU" and "no depthwise-conv engine" in only_reason(dw)
    assert inspect(model, (1, 8, 8, 8), "DPUCAHX8H_ISA2_DWC").node("conv").device == "DPU"
    # the DWC engine takes kernels 1, 2, 3, 5, 7 only
    dw = inspect(Seq(conv=nn.Conv2d(8, 8, 4, groups=8)), (1, 8, 8, 8), "DPUCAHX8H_ISA2_DWC").node("conv")
    assert dw.device == "CPU" and "1,2,3,5,7" in only_reason(dw)
    # the ALU's pad_limit: pad_left 0-15
    dw = inspect(Seq(conv=nn.Conv2d(8, 8, 33, padding=16, groups=8)), (1, 8, 40, 40)).node("conv")
    assert dw.device == "CPU" and "'pad_left'(16)" in only_reason(dw) and "0-15" in only_reason(dw)


# ---- activations -------------------------------------------------------------------------------

@pytest.mark.parametrize("act", [nn.ReLU(), nn.ReLU6(), nn.LeakyReLU(26 / 256)])
def test_relu_relu6_leaky_relu_fuse_into_conv(act):
    result = inspect(Seq(conv=nn.Conv2d(3, 8, 3), bn=nn.BatchNorm2d(8), act=act), (1, 3, 8, 8))
    assert result.summary_line() == "DPU: 3 nodes, CPU: 0 nodes"
    assert result.node("bn").fused_into == "conv"
    assert result.node("act").fused_into == "conv"
    if isinstance(act, nn.LeakyReLU):
        assert result.node("act").changes == []  # 26/256 is already the DPU's slope


def test_p09_leaky_relu_slope_becomes_26_over_256(tmp_path):
    result = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.LeakyReLU(0.1)), (1, 3, 8, 8))
    act = result.node("act")
    assert act.device == "DPU" and act.fused_into == "conv"
    assert len(act.changes) == 1
    assert "0.1 -> 26/256 = 0.1015625" in act.changes[0] and act.changes[0] in act.notes
    assert 26 / 256 == 0.1015625
    paths = write_reports(result, str(tmp_path))
    text = open(paths["txt"]).read()
    summary = text.split("graph name:")[0]
    assert "Changes the quantizer makes or offers:" in summary and "0.1 -> 26/256 = 0.1015625" in summary
    data = json.load(open(paths["json"]))
    assert any("0.1015625" in change for n in data["nodes"] for change in n["changes"])


def test_activation_not_fused_when_the_conv_output_is_also_used_elsewhere():
    def forward(self, x):
        y = self.conv(x)
        return self.relu(y) + self.conv2(y)

    model = Lambda(forward, conv=nn.Conv2d(3, 8, 3, padding=1), relu=nn.ReLU(), conv2=nn.Conv2d(8, 8, 1))
    result = inspect(model, (1, 3, 8, 8))
    relu = result.node("relu")
    assert relu.device == "CPU" and "other consumers" in only_reason(relu)


def test_leaky_relu_standalone_on_the_alu_or_cpu():
    # Depthwise conv on the B4096 ALU fuses relu/relu6 only; the ALU runs leaky_relu on its own.
    model = Seq(conv=nn.Conv2d(8, 8, 3, padding=1, groups=8), act=nn.LeakyReLU(26 / 256))
    act = inspect(model, (1, 8, 8, 8)).node("act")
    assert act.device == "DPU" and act.fused_into is None
    assert any("alu_engine (alu_type leaky_relu)" in n for n in act.notes)
    # After an add on DPUCAHX8H (eltwise fuses relu only, no ALU): CPU, with both reasons.
    model = Lambda(lambda self, x: self.act(self.a(x) + self.b(x)),
                   a=nn.Conv2d(3, 8, 1), b=nn.Conv2d(3, 8, 1), act=nn.LeakyReLU(26 / 256))
    act = inspect(model, (1, 3, 8, 8), "DPUCAHX8H_ISA2").node("act")
    assert act.device == "CPU"
    assert "Try to assign add + leaky_relu to DPU failed" in only_reason(act)
    assert "fuses only relu" in only_reason(act)


def test_relu_fuses_into_eltwise_add():
    model = Lambda(lambda self, x: self.relu(self.a(x) + self.b(x)),
                   a=nn.Conv2d(3, 8, 1), b=nn.Conv2d(3, 8, 1), relu=nn.ReLU())
    result = inspect(model, (1, 3, 8, 8))
    assert result.node("relu").fused_into == "add" and result.count("CPU") == 0


def test_hard_sigmoid_and_hard_swish():
    swish = Seq(conv=nn.Conv2d(3, 8, 3), act=nn.Hardswish())
    # B4096: the conv engine does not fuse hswish; the ALU runs hsigmoid, the eltwise engine the multiply.
    act = inspect(swish, (1, 3, 8, 8)).node("act")
    assert act.device == "DPU" and act.fused_into is None and "hsigmoid" in " ".join(act.notes)
    # DPUCVDX8G and DPUCV2DX8G fuse hswish into the conv.
    assert inspect(swish, (1, 3, 8, 8), "DPUCVDX8G_ISA3_C32B3").node("act").fused_into == "conv"
    assert inspect(swish, (1, 3, 8, 8), "DPUCV2DX8G_ISA1_C20B14").node("act").fused_into == "conv"
    # DPUCAHX8H: neither fused nor an ALU.
    act = inspect(swish, (1, 3, 8, 8), "DPUCAHX8H_ISA2").node("act")
    assert act.device == "CPU" and "no engine that runs a hswish on its own" in only_reason(act)
    sigmoid = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.Hardsigmoid()), (1, 3, 8, 8)).node("act")
    assert sigmoid.device == "DPU"


@pytest.mark.parametrize("act, op", [(nn.Sigmoid(), "sigmoid"), (nn.SiLU(), "silu"), (nn.Tanh(), "tanh"),
                                     (nn.GELU(), "gelu")])
def test_sigmoid_silu_tanh_gelu_run_on_the_cpu(act, op):
    for target in (B4096, "DPUCVDX8G_ISA3_C32B3", "DPUCV2DX8G_ISA1_C20B14", "DPUCAHX8H_ISA2"):
        node = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=act), (1, 3, 8, 8), target).node("act")
        assert node.op == op and node.device == "CPU"
        assert "{} can't be assigned to DPU".format(op) in only_reason(node)


def test_conversions_the_quantizer_offers():
    silu = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.SiLU()), (1, 3, 8, 8)).node("act")
    assert len(silu.changes) == 1 and "SiLU -> HardSwish" in silu.changes[0]
    assert "convert_silu_to_hswish" in silu.changes[0] and "would run on the alu_engine" in silu.changes[0]
    silu = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.SiLU()), (1, 3, 8, 8), "DPUCVDX8G_ISA3_C32B3").node("act")
    assert "would fuse into conv2d 'conv'" in silu.changes[0]
    sigmoid = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.Sigmoid()), (1, 3, 8, 8)).node("act")
    assert "sigmoid -> HardSigmoid" in sigmoid.changes[0]
    assert "--nndct_convert_sigmoid_to_hsigmoid" in sigmoid.changes[0]
    silu = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.SiLU()), (1, 3, 8, 8), "DPUCAHX8H_ISA2").node("act")
    assert "would still run on the CPU" in silu.changes[0]
    relu6 = inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=nn.ReLU6()), (1, 3, 8, 8)).node("act")
    assert relu6.device == "DPU" and "ReLU6 -> ReLU (convert_relu6_to_relu)" in relu6.changes[0]
    for act in (nn.Tanh(), nn.GELU()):
        assert inspect(Seq(conv=nn.Conv2d(3, 8, 3), act=act), (1, 3, 8, 8)).node("act").changes == []


# ---- transposed conv ---------------------------------------------------------------------------

def test_transposed_conv_output_padding_goes_to_the_cpu():
    up = inspect(Seq(up=nn.ConvTranspose2d(8, 8, 4, stride=2, padding=1)), (1, 8, 4, 4)).node("up")
    assert up.op == "conv_transpose2d" and up.device == "DPU"
    up = inspect(Seq(up=nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1)),
                 (1, 8, 4, 4)).node("up")
    assert up.device == "CPU" and "DPU does not support output_padding ([1, 1])" in only_reason(up)
    up = inspect(Seq(up=nn.ConvTranspose2d(8, 8, 2, stride=3)), (1, 8, 4, 4)).node("up")
    assert up.device == "CPU" and "'kernel / stride'(2 / 3)" in only_reason(up)


# ---- pools, eltwise, concat, batch norm, softmax -----------------------------------------------

def test_p10_maxpool_followed_by_relu_on_dpuczdx8g():
    model = Seq(conv=nn.Conv2d(3, 8, 3, padding=1), pool=nn.MaxPool2d(2), relu=nn.ReLU())
    result = inspect(model, (1, 3, 8, 8))
    assert result.node("pool").device == "DPU"
    relu = result.node("relu")
    assert relu.device == "CPU"
    # the node, the pool it follows and the reason, in the real Inspector's words for this case
    assert relu.reasons[0].startswith("relu can't be assigned to DPU: it follows max_pool2d 'pool', and on "
                                      "DPUCZDX8G the Vitis AI 3.5 Inspector finds no compiler pattern")
    # the source, and why the ALU's own nonlinear list (relu, relu_six in the B4096 prototxt), which the
    # target info shows, does not contradict it
    source = [n for n in relu.notes if n.startswith("source:")]
    assert len(source) == 1 and "Vitis-AI issue #1501" in source[0]
    assert "alu_engine's nonlinear list in the target info (relu, relu_six) belongs to the whole engine" in source[0]
    assert not any("never into a pool" in r for r in relu.reasons + relu.notes)
    assert any("relu(maxpool(x)) == maxpool(relu(x))" in n for n in relu.notes)
    assert result.summary_line() == "DPU: 2 nodes, CPU: 1 nodes"
    report = result.to_text()
    assert "alu_engine: dwconv, prelu, avg_pool, max_pool" in report and "nonlinear relu, relu_six" in report
    text = report.split("graph name:")[0]
    assert re.search(r"relu\s+relu\s+\S+\s+relu can't be assigned to DPU: it follows max_pool2d 'pool'", text)
    # the fix the note gives: ReLU before MaxPool puts everything on the DPU
    fixed = inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=1), relu=nn.ReLU(), pool=nn.MaxPool2d(2)), (1, 3, 8, 8))
    assert fixed.count("CPU") == 0 and fixed.node("relu").fused_into == "conv"


def test_activation_after_a_pool_names_the_engine_and_its_source():
    model = Seq(conv=nn.Conv2d(3, 8, 3, padding=1), pool=nn.MaxPool2d(2), relu=nn.ReLU())
    # DPUCAHX8H: a dedicated pool engine whose prototxt nonlinear block is empty
    relu = inspect(model, (1, 3, 8, 8), "DPUCAHX8H_ISA2").node("relu")
    assert relu.device == "CPU"
    assert relu.reasons[0] == ("relu can't be assigned to DPU: it follows max_pool2d 'pool', and the pool_engine "
                               "of DPUCAHX8H_ISA2 fuses no activation.")
    assert any("pool_engine's nonlinear list is empty" in n for n in relu.notes)
    # a pool on the CPU (kernel 9 > the pool engine's 1-8) keeps the activation there
    big = inspect(Seq(pool=nn.MaxPool2d(9), relu=nn.ReLU()), (1, 8, 18, 18), "DPUCAHX8H_ISA2")
    assert big.node("pool").device == "CPU"
    assert big.node("relu").reasons[0] == "relu can't be assigned to DPU: it follows max_pool2d 'pool', which is on the CPU."
    # an ALU outside DPUCZDX8G: the same outcome, said to be an assumption
    other = inspect(model, (1, 3, 8, 8), "DPUCVDX8G_ISA3_C32B3").node("relu")
    assert other.device == "CPU" and "this inspection assumes the same here" in other.reasons[0]
    # an average pool on DPUCZDX8G is treated like the max pool, without the commuting hint
    avg = inspect(Seq(conv=nn.Conv2d(3, 8, 3, padding=1), pool=nn.AvgPool2d(2), relu=nn.ReLU()), (1, 3, 8, 8)).node("relu")
    assert avg.device == "CPU" and "it follows avg_pool2d 'pool'" in avg.reasons[0]
    assert not any("commutes" in n for n in avg.notes)


def test_pool_limits_per_engine():
    big = Seq(pool=nn.MaxPool2d(9))
    assert inspect(big, (1, 8, 18, 18)).node("pool").device == "DPU"        # ALU kernel 1-256
    pool = inspect(big, (1, 8, 18, 18), "DPUCAHX8H_ISA2").node("pool")     # pool engine kernel 1-8
    assert pool.device == "CPU" and "'kernel'(9 x 9)" in only_reason(pool) and "pool_engine" in only_reason(pool)
    avg = inspect(Seq(pool=nn.AvgPool2d((2, 3))), (1, 8, 6, 6), "DPUCAHX8H_ISA2").node("pool")
    assert avg.device == "CPU" and "square" in only_reason(avg)
    uneven = inspect(Seq(pool=nn.AdaptiveAvgPool2d(3)), (1, 8, 7, 7)).node("pool")
    assert uneven.device == "CPU" and "not a fixed-kernel pool" in only_reason(uneven)
    # the real quantizer (3.5) keeps x.mean((2, 3)) as a float operator 'aten::mean'
    # (QUANTIZER_TORCH_FLOAT_OP; tests/data/golden_wide/README.md, floatops): the CPU runs it
    mean = inspect(Lambda(lambda self, x: self.conv(x).mean((2, 3)), conv=nn.Conv2d(3, 8, 1)), (1, 3, 7, 7))
    assert mean.node("mean").device == "CPU" and "float operator" in only_reason(mean.node("mean"))


def test_eltwise_mult_needs_an_engine_that_has_it():
    model = Lambda(lambda self, x: self.a(x) * self.b(x), a=nn.Conv2d(3, 8, 1), b=nn.Conv2d(3, 8, 1))
    assert inspect(model, (1, 3, 4, 4)).node("mul").device == "DPU"
    mul = inspect(model, (1, 3, 4, 4), "DPUCAHX8H_ISA2").node("mul")
    assert mul.device == "CPU" and "does not support eltwise MULT" in only_reason(mul)
    # DPUCV2DX8G has no eltwise engine; its ALU does elew_add / elew_mult.
    assert inspect(model, (1, 3, 4, 4), "DPUCV2DX8G_ISA1_C20B14").node("mul").device == "DPU"


def test_concat_with_a_cpu_input():
    channel = Lambda(lambda self, x: torch.cat([self.a(x), torch.sigmoid(self.b(x))], 1),
                     a=nn.Conv2d(3, 8, 1), b=nn.Conv2d(3, 8, 1))
    assert inspect(channel, (1, 3, 4, 4)).node("cat").device == "DPU"
    width = Lambda(lambda self, x: torch.cat([self.a(x), torch.sigmoid(self.b(x))], 3),
                   a=nn.Conv2d(3, 8, 1), b=nn.Conv2d(3, 8, 1))
    cat = inspect(width, (1, 3, 4, 4)).node("cat")
    assert cat.device == "CPU" and "not a channel-wise concatenation" in only_reason(cat)


def test_standalone_batch_norm():
    model = Lambda(lambda self, x: self.bn(self.a(x) + self.b(x)),
                   a=nn.Conv2d(3, 8, 1), b=nn.Conv2d(3, 8, 1), bn=nn.BatchNorm2d(8))
    bn = inspect(model, (1, 3, 4, 4)).node("bn")
    assert bn.device == "DPU" and bn.fused_into is None
    bn = inspect(model, (1, 3, 4, 4), "DPUCAHX8H_ISA2").node("bn")
    assert bn.device == "CPU"


def test_softmax_and_unknown_ops_go_to_the_cpu():
    model = Lambda(lambda self, x: torch.softmax(torch.abs(self.fc(x)), 1), fc=nn.Linear(4, 3))
    result = inspect(model, (2, 4))
    assert result.node("fc").device == "DPU"
    assert result.node("softmax").device == "CPU"
    unknown = [n for n in result.nodes if n.op == "abs"][0]  # no rule of its own; the quantizer's aten::abs
    assert unknown.device == "CPU" and "is a float operator of the quantizer" in only_reason(unknown)


# ---- layout: reshape after a feature map, view on a non-contiguous tensor -----------------------

def test_flatten_after_conv_forces_an_nhwc_permute():
    model = Seq(conv=nn.Conv2d(3, 8, 3, padding=1), flat=nn.Flatten())
    flat = inspect(model, (1, 3, 4, 4)).node("flat")
    assert flat.device == "CPU"
    assert "Try to assign permute(order=(0, 3, 1, 2)) + flatten to DPU failed" in only_reason(flat)
    assert any("quantizer inserts a permute to convert data layout from 'NHWC' to 'NCHW'" in n for n in flat.notes)
    assert any("x.permute(0, 2, 3, 1)" in n for n in flat.notes)
    # a view straight after the conv is the same reshape
    view = Lambda(lambda self, x: self.conv(x).view(x.shape[0], -1), conv=nn.Conv2d(3, 8, 3, padding=1))
    assert inspect(view, (1, 3, 4, 4)).node("view").device == "CPU"


def test_flatten_then_dense_merges_the_permute():
    model = Seq(conv=nn.Conv2d(3, 8, 3, padding=1), flat=nn.Flatten(), fc=nn.Linear(128, 10))
    result = inspect(model, (1, 3, 4, 4))
    flat = result.node("flat")
    assert result.count("CPU") == 0
    assert any("merges into the following dense 'fc'" in n for n in flat.notes)


def test_no_permute_needed_when_spatial_is_1x1():
    model = Seq(conv=nn.Conv2d(3, 8, 3), flat=nn.Flatten())
    flat = inspect(model, (1, 3, 3, 3)).node("flat")
    assert flat.device == "DPU" and any("moves no data" in n for n in flat.notes)


def test_explicit_nhwc_permute_cancels_the_inserted_one():
    model = Lambda(lambda self, x: self.conv(x).permute(0, 2, 3, 1).reshape(x.shape[0], -1),
                   conv=nn.Conv2d(3, 8, 3, padding=1))
    result = inspect(model, (1, 3, 4, 4))
    assert result.count("CPU") == 0
    assert result.node("reshape").notes == []
    other = Lambda(lambda self, x: self.conv(x).permute(0, 3, 2, 1), conv=nn.Conv2d(3, 8, 3, padding=1))
    node = inspect(other, (1, 3, 4, 4)).node("permute")
    assert node.device == "CPU" and "permute can't be assigned to DPU" in only_reason(node)


def test_reshape_of_a_cpu_tensor():
    model = Lambda(lambda self, x: torch.sigmoid(self.conv(x)).flatten(1), conv=nn.Conv2d(3, 8, 3))
    flat = inspect(model, (1, 3, 3, 3)).node("flatten")
    assert flat.device == "CPU" and only_reason(flat) == "The input of reshape is not on DPU."


def test_view_on_a_tensor_that_may_be_non_contiguous():
    def forward(self, x):
        y = self.pool(self.conv(x)).permute(0, 2, 3, 1)
        return self.fc(y.view(y.shape[0], -1))

    model = Lambda(forward, conv=nn.Conv2d(3, 8, 3, padding=1), pool=nn.AdaptiveAvgPool2d(1), fc=nn.Linear(8, 2))
    result = inspect(model, (2, 3, 4, 4))
    view = result.node("view")
    assert view.device == "DPU" and result.count("CPU") == 0
    assert any("may be non-contiguous (it comes from 'permute')" in n and ".reshape()" in n for n in view.notes)
    # .contiguous() first, or .reshape(): no warning
    fixed = Lambda(lambda self, x: self.pool(self.conv(x)).permute(0, 2, 3, 1).contiguous().view(x.shape[0], -1),
                   conv=nn.Conv2d(3, 8, 3, padding=1), pool=nn.AdaptiveAvgPool2d(1))
    assert inspect(fixed, (2, 3, 4, 4)).node("view").notes == []


def test_view_that_fails_on_the_example_names_the_node():
    model = Lambda(lambda self, x: self.conv(x).permute(0, 2, 3, 1).view(x.shape[0], -1),
                   conv=nn.Conv2d(3, 8, 3, padding=1))
    with pytest.raises(PipelineError) as error:
        inspect(model, (2, 3, 4, 4))
    message = str(error.value)
    assert "'view'" in message and ".reshape()" in message and "(2, 3, 4, 4)" in message


# ---- zoo models --------------------------------------------------------------------------------

def test_digits_cnn_entirely_on_the_dpu_b4096():
    result = inspect(zoo.digits_cnn(), (1, 1, 8, 8))
    assert result.count("CPU") == 0 and result.count("DPU") == len(result.nodes) > 0
    assert result.summary_line() == "DPU: {} nodes, CPU: 0 nodes".format(len(result.nodes))
    ops = [n.op for n in result.nodes]
    assert {"conv2d", "batch_norm", "relu", "max_pool2d", "adaptive_avg_pool2d", "flatten", "dense"} <= set(ops)


def test_resnet18_entirely_on_the_dpu_b4096():
    result = inspect(zoo.resnet18(), (1, 3, 224, 224))
    assert result.count("CPU") == 0
    ops = [n.op for n in result.nodes]
    # ResNet-18: 1 stem + 16 block + 3 downsample convs, each with BN; 8 residual adds;
    # ReLUs: 1 stem + 2 per block; one max pool, global pool, flatten, fc.
    assert ops.count("conv2d") == 20 and ops.count("batch_norm") == 20 and ops.count("add") == 8
    assert ops.count("relu") == 17 and ops.count("dense") == 1
    assert all(n.fused_into for n in result.nodes if n.op in ("batch_norm", "relu"))
    assert sum(n.fused_into is not None and result.node(n.fused_into).op == "add"
               for n in result.nodes if n.op == "relu") == 8


def test_mobilenet_v2_depthwise_needs_a_dwconv_engine():
    model = zoo.mobilenet_v2()
    no_dw = inspect(model, (1, 3, 224, 224), "DPUCAHX8H_ISA2")
    cpu_ops = {n.op for n in no_dw.nodes if n.device == "CPU"}
    depthwise = [n for n in no_dw.nodes if n.op == "depthwise_conv2d"]
    assert len(depthwise) == 17  # one per inverted-residual block
    assert all(n.device == "CPU" for n in depthwise) and cpu_ops == {"depthwise_conv2d", "batch_norm", "relu6"}
    assert inspect(model, (1, 3, 224, 224), "DPUCAHX8H_ISA2_DWC").count("CPU") == 0
    assert inspect(model, (1, 3, 224, 224), B4096).count("CPU") == 0


# ---- reports and contract ----------------------------------------------------------------------

def test_reports_text_json_dot(tmp_path):
    model = Seq(conv=nn.Conv2d(3, 8, 3, padding=1), pool=nn.MaxPool2d(2), relu=nn.ReLU())
    result = inspect(model, (1, 3, 8, 8))
    paths = write_reports(result, str(tmp_path / "inspect"))
    stem = tmp_path / "inspect" / ("inspect_" + B4096)
    expected = {"txt": str(stem) + ".txt", "json": str(stem) + ".json", "gv": str(stem) + ".gv",
                "svg": str(stem) + ".svg"}
    assert paths == expected
    text = open(paths["txt"]).read()
    assert text.rstrip().endswith("DPU: 2 nodes, CPU: 1 nodes")
    assert "The operators assigned to the CPU are as follows:" in text
    assert "outputs shape: [1, 4, 4, 8] (PyTorch [1, 8, 4, 4])" in text  # XIR NHWC first
    data = json.load(open(paths["json"]))
    assert data["target"] == B4096 and data["summary"]["dpu_nodes"] == 2 and data["summary"]["cpu_nodes"] == 1
    assert [(n["name"], n["device"]) for n in data["nodes"]] == [("conv", "DPU"), ("pool", "DPU"), ("relu", "CPU")]
    assert data["nodes"][2]["reasons"] == result.node("relu").reasons
    dot = open(paths["gv"]).read()
    assert dot.startswith('digraph "Seq"') and '"pool" -> "relu";' in dot and '"relu" -> "output";' in dot
    assert re.search(r'^  "relu" \[label=.*color=red', dot, re.M)
    assert re.search(r'^  "conv" \[label=.*color=blue', dot, re.M)
    assert not [p for p in (tmp_path / "inspect").iterdir() if p.name.startswith(".")]  # no temporaries


def test_the_svg_is_drawn_without_graphviz(tmp_path, monkeypatch):
    """The README promises inspect_<target>.svg: it is drawn here (pipeline/inspect/svg.py), with or
    without graphviz's dot, and says what the DOT says: every box, every edge, DPU blue, CPU red, a CPU
    node's hardware constraints as its tooltip."""
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no dot, nor any other program
    model = Lambda(lambda s, x: s.relu(s.pool(s.conv(x))) + s.skip(x),
                   conv=nn.Conv2d(3, 8, 3, padding=1), pool=nn.MaxPool2d(1), relu=nn.ReLU(), skip=nn.Conv2d(3, 8, 1))
    result = inspect(model, (1, 3, 8, 8))
    paths = write_reports(result, str(tmp_path / "inspect"))
    text = open(paths["svg"], encoding="utf-8").read()
    root = ElementTree.fromstring(text)
    svg = "{http://www.w3.org/2000/svg}"
    nodes = {g.get("data-name"): g for g in root.iter(svg + "g") if g.get("class") == "node"}
    assert list(nodes) == ["x"] + [n.name for n in result.nodes] + ["output"]
    for n in result.nodes:
        assert nodes[n.name].get("data-device") == n.device
        assert nodes[n.name].find(svg + "rect").get("fill") == {"DPU": "#cfe2ff", "CPU": "#f8d7da"}[n.device]
        assert [t.text for t in nodes[n.name].iter(svg + "text")][:2] == [n.name, n.op]
    relu = result.node("relu")
    assert relu.device == "CPU" and nodes["relu"].find(svg + "title").text == " ".join(relu.reasons)
    assert "can&#39;t be assigned" in text  # escaped
    edges = [(p.get("data-from"), p.get("data-to")) for p in root.iter(svg + "path") if p.get("class") == "edge"]
    assert sorted(edges) == sorted([(i, n.name) for n in result.nodes for i in n.inputs]
                                   + [(o, "output") for o in result.outputs])
    assert root.find(svg + "title").text == "Lambda on %s: %s" % (B4096, result.summary_line())
    assert write_reports(result, str(tmp_path / "again"))["svg"] and \
        open(str(tmp_path / "again" / ("inspect_%s.svg" % B4096)), encoding="utf-8").read() == text  # same bytes


def test_callers_model_and_example_are_not_modified():
    model = Seq(relu=nn.ReLU(inplace=True), conv=nn.Conv2d(3, 8, 3))  # in-place op on the input
    model.train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    example = torch.randn(1, 3, 8, 8)
    before, version = example.clone(), example._version
    inspect_model(model, example, B4096)
    assert torch.equal(example, before) and example._version == version
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_untraceable_model_and_bad_example():
    def forward(self, x):
        return self.conv(x) if x.sum() > 0 else x

    with pytest.raises(PipelineError, match="torch.fx could not trace"):
        inspect(Lambda(forward, conv=nn.Conv2d(3, 3, 1)), (1, 3, 4, 4))
    with pytest.raises(DataError, match="example input tensor"):
        inspect_model(nn.ReLU(), [[1.0]], B4096)


class _Bilinear(nn.Module):
    def forward(self, x):
        return torch.cat([nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
                          nn.functional.interpolate(x, scale_factor=2, mode="bilinear"),
                          nn.functional.interpolate(x[:, :, :, :4], size=(16, 16), mode="bilinear")], 1)


def test_bilinear_resize_runs_as_a_transposed_depthwise_conv_only_at_an_equal_scale_of_2_or_4():
    """The quantizer's Inspector turns a half-pixel bilinear upsampling by 2 or 4 in both directions
    into a transposed depthwise conv; align_corners=True and any other scale stay on the CPU."""
    nodes = {n.name: n for n in inspect_model(_Bilinear(), torch.randn(1, 8, 8, 8), "DPUCZDX8G_ISA1_B4096").nodes}
    assert nodes["interpolate_1"].device == "DPU"
    assert nodes["interpolate"].device == "CPU" and "align_corners = True" in nodes["interpolate"].reasons[0]
    assert nodes["interpolate_2"].device == "CPU" and "[4.0, 2.0]" in nodes["interpolate_2"].reasons[0]
    assert not [n for n in nodes.values() if any("operator table" in r for r in n.reasons)]
