"""The partition view: subgraphs by the rule of docs/targets.md#partition, and each fix checked by applying
it to a small model, inspecting again and finding the node on the DPU with fewer subgraphs.

Expected values come from the rule (same-device neighbours joined, the other device splits), the engine
limits of docs/targets.md and the arithmetic of each rewrite, not from running the code.
"""
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

from pipeline.inspect import inspect_model
from pipeline.inspect.partition import subgraphs

B4096 = "DPUCZDX8G_ISA1_B4096"
U50 = "DPUCAHX8H_ISA2"  # pool engine kernel 1-8, conv stride 1-4, no depthwise engine


class Fn(nn.Module):
    """A model made of a conv and a function of its output (readable node names: conv, ...)."""

    def __init__(self, fn, cin=3, cout=8, **conv):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, **dict({"kernel_size": 3, "padding": 1}, **conv))
        self.fn = fn

    def forward(self, x):
        return self.fn(self, self.conv(x))


def inspect(model, shape=(1, 3, 8, 8), target=B4096):
    torch.manual_seed(0)
    return inspect_model(model, torch.randn(*shape), target)


def moved(before, after, name, target_name=None):
    """The node ``name`` had a fix on the CPU before; ``target_name`` (default the same) is on the DPU
    after, and the subgraph count dropped."""
    assert before.node(name).device == "CPU" and before.node(name).fixes, before.node(name)
    assert after.node(target_name or name).device == "DPU"
    assert len(after.subgraphs()) < len(before.subgraphs()), (before.partition_line(), after.partition_line())


def equal(a, b, shape=(1, 3, 8, 8)):
    x = torch.randn(*shape)
    with torch.no_grad():
        return torch.allclose(a.eval()(x), b.eval()(x), atol=1e-5)


# ---- the partition rule --------------------------------------------------------------------------

def test_partition_counts_subgraphs_as_users_do_and_a_cpu_node_splits_the_dpu_nodes():
    model = Fn(lambda m, y: m.conv2(torch.sigmoid(y)))
    model.conv2 = nn.Conv2d(8, 8, 3, padding=1)
    result = inspect(model)
    parts = result.subgraphs()
    assert [(p.device, p.nodes) for p in parts] == [("DPU", ["conv"]), ("CPU", ["sigmoid"]), ("DPU", ["conv2"])]
    assert result.partition_line() == "3 subgraphs: 2 DPU, 1 CPU"
    assert parts[2].inputs == ["subgraph_1"] and parts[2].outputs == ["output"]


def test_partition_splits_dpu_nodes_joined_by_an_edge_when_a_cpu_node_lies_between_them_too():
    # conv -> sigmoid (CPU) -> add <- conv: add joins conv directly, but one subgraph would feed and read the CPU one
    result = inspect(Fn(lambda m, y: y + torch.sigmoid(y)))
    assert [(p.device, p.nodes) for p in result.subgraphs()] == [
        ("DPU", ["conv"]), ("CPU", ["sigmoid"]), ("DPU", ["add"])]


def test_partition_data_is_json_with_rule_caveats_count_and_fixes_and_is_in_the_reports():
    result = inspect(Fn(lambda m, y: torch.sigmoid(y)))
    data = json.loads(json.dumps(result.to_json()))["partition"]
    assert data["count"] == {"total": 2, "dpu": 1, "cpu": 1} and data["line"] == "2 subgraphs: 1 DPU, 1 CPU"
    assert "closed source" in data["caveats"][0] and data["rule"]
    assert [row["node"] for row in data["fixes"]] == ["sigmoid"]
    assert data["fixes"][0]["fixes"][0]["code"].startswith("nn.Sigmoid() -> nn.Hardsigmoid()")
    text = result.to_text()
    assert "partition: 2 subgraphs: 1 DPU, 1 CPU" in text and "fix: replace it with the DPU's hsigmoid" in text
    assert text.rstrip().endswith(result.summary_line())


# ---- each fix, applied -------------------------------------------------------------------------

def test_partition_fix_relu_after_max_pool_moves_before_the_pool_with_the_same_values():
    before_model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2), nn.ReLU())
    after_model = nn.Sequential(before_model[0], nn.ReLU(), nn.MaxPool2d(2))
    before, after = inspect(before_model), inspect(after_model)
    fix = before.node("_2").fixes[0]
    assert fix.exact and "move the relu before the max_pool2d" in fix.message
    moved(before, after, "_2", "_1")
    assert after.partition_line() == "1 subgraph: 1 DPU, 0 CPU" and equal(before_model, after_model)


def test_partition_fix_hard_sigmoid_and_hard_swish_written_out_become_the_modules():
    for written, module in ((lambda m, y: F.relu6(y + 3) / 6, nn.Hardsigmoid()),
                            (lambda m, y: y * torch.clamp(y + 3, 0, 6) * (1 / 6), nn.Hardswish())):
        before_model = Fn(written)
        after_model = Fn(lambda m, y: m.act(y))
        after_model.conv, after_model.act = before_model.conv, module
        before, after = inspect(before_model), inspect(after_model)
        fixes = [f for n in before.nodes if n.device == "CPU" for f in n.fixes]
        assert fixes and all(type(module).__name__ in f.message for f in fixes)
        assert after.count("CPU") == 0 and after.partition_line() == "1 subgraph: 1 DPU, 0 CPU"
        assert len(before.subgraphs()) > 1 and equal(before_model, after_model)


def test_partition_fix_silu_and_sigmoid_become_hardswish_and_hardsigmoid_values_change():
    for fn, name, module in ((F.silu, "silu", nn.Hardswish()), (torch.sigmoid, "sigmoid", nn.Hardsigmoid())):
        model = Fn(lambda m, y, f=fn: m.conv2(f(y)))
        model.conv2 = nn.Conv2d(8, 8, 1)
        before = inspect(model)
        fix = before.node(name).fixes[0]
        assert not fix.exact and type(module).__name__ in fix.code
        model.act, model.fn = module, lambda m, y: m.conv2(m.act(y))
        after = inspect(model)
        moved(before, after, name, [n.name for n in after.nodes if n.op in ("hswish", "hsigmoid")][0])


def test_partition_fix_leaky_relu_slope_gives_the_dpu_slope_in_the_float_model():
    before = inspect(nn.Sequential(nn.Conv2d(3, 8, 3), nn.LeakyReLU(0.01)))
    fix = before.node("_1").fixes[0]
    assert before.node("_1").device == "DPU" and "nn.LeakyReLU(0.1015625)" in fix.code
    after = inspect(nn.Sequential(nn.Conv2d(3, 8, 3), nn.LeakyReLU(0.1015625)))
    assert after.node("_1").fixes == [] and after.node("_1").changes == []


def test_partition_fix_conv_kernel_and_stride_out_of_range():
    before = inspect(nn.Sequential(nn.Conv2d(3, 8, 17, padding=8), nn.Conv2d(8, 8, 3)), (1, 3, 40, 40))
    fix = before.node("_0").fixes[0]
    assert not fix.exact and "kernel_size=(16, 16), padding=(8, 8)" in fix.code
    after = inspect(nn.Sequential(nn.Conv2d(3, 8, 16, padding=8), nn.Conv2d(8, 8, 3)), (1, 3, 40, 40))
    moved(before, after, "_0")
    # stride 12 > 8 on the conv engine: a conv of stride 6 (largest legal divisor) and a 1 x 1 max pool of stride 2
    slow = nn.Sequential(nn.Conv2d(3, 8, 3, stride=12, padding=1), nn.ReLU())
    before = inspect(slow, (1, 3, 50, 50))
    fix = before.node("_0").fixes[0]
    assert fix.exact and "stride=(6, 6)" in fix.code and "stride=(2, 2)" in fix.code
    split = nn.Sequential(nn.Conv2d(3, 8, 3, stride=6, padding=1), nn.ReLU(), nn.MaxPool2d(1, 2))
    split[0].load_state_dict(slow[0].state_dict())
    after = inspect(split, (1, 3, 50, 50))
    assert before.partition_line() == "1 subgraph: 0 DPU, 1 CPU" and before.count("CPU") == 2
    assert after.partition_line() == "1 subgraph: 1 DPU, 0 CPU" and equal(slow, split, (1, 3, 50, 50))


def test_partition_fix_padding_same_given_as_numbers_or_an_explicit_pad_with_the_same_values():
    # torch.jit traces padding='same' as aten::_convolution_mode: a float operator of the quantizer
    for k, explicit in ((3, lambda: nn.Conv2d(8, 8, 3, padding=(1, 1))),
                        (4, lambda: nn.Sequential(nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(8, 8, 4, padding=0)))):
        same = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, k, padding="same"), nn.ReLU())
        before = inspect(same)
        assert before.node("_1").fixes[0].exact
        fixed = nn.Sequential(same[0], explicit(), nn.ReLU())
        conv = fixed[1] if k == 3 else fixed[1][1]
        conv.load_state_dict(same[1].state_dict())
        after = inspect(fixed)
        assert before.node("_1").device == "CPU" and after.count("CPU") == 0 and equal(same, fixed)
        assert len(after.subgraphs()) < len(before.subgraphs())


def test_partition_fix_reflect_pad_becomes_replicate_and_a_replicate_pad_of_2_two_pads_of_1():
    reflect = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReflectionPad2d(1), nn.Conv2d(8, 8, 3))
    before = inspect(reflect)
    assert not before.node("_1").fixes[0].exact
    fixed = nn.Sequential(reflect[0], nn.ReplicationPad2d(1), reflect[2])
    moved(before, inspect(fixed), "_1")
    two = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReplicationPad2d(2), nn.Conv2d(8, 8, 5))
    node = inspect(two).node("_1")
    assert node.device == "DPU" and "XIR pad SYMMETRIC" in node.notes[0] and node.fixes[0].exact
    split = nn.Sequential(two[0], nn.Sequential(nn.ReplicationPad2d(1), nn.ReplicationPad2d(1)), two[2])
    after = inspect(split)
    assert equal(two, split) and after.count("CPU") == 0
    assert not any(after.node(n).notes for n in ("_1_0", "_1_1"))


def test_partition_fix_output_channels_over_the_limit_split_and_concatenated():
    wide = nn.Conv2d(8, 4100, 1)  # 256 x 16 = 4096 on B4096
    model = nn.Sequential(nn.Conv2d(3, 8, 1), wide)
    before = inspect(model, (1, 3, 4, 4))
    fix = before.node("_1").fixes[0]
    assert fix.exact and "torch.cat" in fix.code

    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = model[0]
            self.a, self.b = nn.Conv2d(8, 4096, 1), nn.Conv2d(8, 4, 1)
            with torch.no_grad():
                for conv, rows in ((self.a, slice(0, 4096)), (self.b, slice(4096, 4100))):
                    conv.weight.copy_(wide.weight[rows])
                    conv.bias.copy_(wide.bias[rows])

        def forward(self, x):
            y = self.first(x)
            return torch.cat([self.a(y), self.b(y)], 1)

    after = inspect(Split(), (1, 3, 4, 4))
    assert before.partition_line() == "2 subgraphs: 1 DPU, 1 CPU"
    assert after.count("CPU") == 0 and after.partition_line() == "1 subgraph: 1 DPU, 0 CPU"
    assert equal(model, Split(), (1, 3, 4, 4))


def test_partition_fix_grouped_conv_split_into_convs_and_concatenated():
    grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
    model = nn.Sequential(nn.Conv2d(3, 8, 1), grouped, nn.ReLU())
    before = inspect(model)
    assert "torch.chunk(x, 2, 1)" in before.node("_1").fixes[0].code

    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.convs = model[0], nn.ModuleList([nn.Conv2d(4, 4, 3, padding=1) for _ in range(2)])
            with torch.no_grad():
                for i, conv in enumerate(self.convs):
                    conv.weight.copy_(grouped.weight[4 * i:4 * i + 4])
                    conv.bias.copy_(grouped.bias[4 * i:4 * i + 4])

        def forward(self, x):
            xs = torch.chunk(self.first(x), 2, 1)
            return torch.cat([torch.relu(self.convs[i](xs[i])) for i in range(2)], 1)

    after = inspect(Split())
    assert after.count("CPU") == 0 and after.partition_line() == "1 subgraph: 1 DPU, 0 CPU"
    assert len(before.subgraphs()) > 1 and equal(model, Split())


def test_partition_fix_depthwise_without_a_depthwise_engine_becomes_a_block_diagonal_conv():
    dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    model = nn.Sequential(nn.Conv2d(3, 8, 1), dw, nn.Conv2d(8, 8, 1))
    before = inspect(model, target=U50)
    full = nn.Conv2d(8, 8, 3, padding=1)
    with torch.no_grad():
        full.weight.zero_()
        for o in range(8):
            full.weight[o, o] = dw.weight[o, 0]
        full.bias.copy_(dw.bias)
    rewritten = nn.Sequential(model[0], full, model[2])
    after = inspect(rewritten, target=U50)
    moved(before, after, "_1")
    assert before.partition_line() == "3 subgraphs: 2 DPU, 1 CPU" and equal(model, rewritten)


def test_partition_fix_pool_kernel_over_the_pool_engine_range_in_two_steps():
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.AvgPool2d(14), nn.Conv2d(8, 4, 1))
    before = inspect(model, (1, 3, 14, 14), U50)
    fix = before.node("_1").fixes[0]
    assert fix.exact and "nn.AvgPool2d((7, 7)), nn.AvgPool2d((2, 2))" in fix.code
    rewritten = nn.Sequential(model[0], nn.AvgPool2d(7), nn.AvgPool2d(2), model[2])
    after = inspect(rewritten, (1, 3, 14, 14), U50)
    assert after.count("CPU") == 0 and len(after.subgraphs()) < len(before.subgraphs())
    assert equal(model, rewritten, (1, 3, 14, 14))


def test_partition_fix_trailing_softmax_moves_after_the_dpu_and_a_follower_points_to_its_cause():
    before = inspect(Fn(lambda m, y: torch.softmax(y, 1)))
    assert before.node("softmax").fixes[0].code.startswith("return softmax(y) -> return y")
    after = inspect(Fn(lambda m, y: y))
    assert len(after.subgraphs()) == 1 < len(before.subgraphs())
    # a flatten after a CPU op: its fix points to that op
    chained = inspect(Fn(lambda m, y: torch.flatten(torch.sigmoid(y), 1)))
    assert chained.node("flatten").fixes[0].follows == "sigmoid"


def test_partition_fix_constant_after_a_conv_folds_into_its_bias():
    model = Fn(lambda m, y: m.conv2(y + 0.5))
    model.conv2 = nn.Conv2d(8, 8, 1)
    before = inspect(model)
    assert before.node("add").fixes[0].code == "conv.bias += 0.5"
    folded = Fn(lambda m, y: m.conv2(y))
    folded.conv2 = model.conv2
    with torch.no_grad():
        folded.conv.weight.copy_(model.conv.weight)
        folded.conv.bias.copy_(model.conv.bias + 0.5)
    after = inspect(folded)
    assert after.partition_line() == "1 subgraph: 1 DPU, 0 CPU" and len(before.subgraphs()) == 3
    assert equal(model, folded)


def test_partition_every_cpu_node_of_the_fixed_rules_has_a_fix_or_says_none_is_known():
    result = inspect(Fn(lambda m, y: torch.tanh(y) @ y))
    rows = result.partition()["fixes"]
    assert {row["node"] for row in rows} == {n.name for n in result.nodes if n.device == "CPU"}
    assert "fix: none known here." in result.to_text()
