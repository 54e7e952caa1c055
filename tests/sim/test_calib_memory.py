"""Calibration in bounded memory gives the same results: activations freed after their last use,
bias-correction squares in one reused buffer, fake_quant in cache-sized tiles, ReLU and the
quantization of the calibration's own new values in place."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.models.zoo import digits_cnn, mobilenet_v2, randomize_bn, resnet18
from pipeline import fixpoint
from pipeline.quantizers.quant_config import load_quant_config
from pipeline.quantizers.sim import calib
from pipeline.quantizers.sim.session import SimSession


class KeepEverything(calib.Calibrator):
    """The calibration loop before the memory work: every activation kept until the batch ends,
    bias correction with fresh temporaries (``eval_qnoise`` without a scratch buffer), every
    ReLU and quantization into a new tensor."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._release = [[] for _ in self._release]
        self._scratch = None
        self._fresh, self._relu_in_place = set(), {}


@pytest.mark.parametrize("name, model, shape", [
    ("digits", lambda: digits_cnn(), (16, 1, 8, 8)),
    ("resnet18", lambda: resnet18(num_classes=10), (2, 3, 32, 32)),
    ("mobilenet_v2", lambda: mobilenet_v2(num_classes=10), (2, 3, 32, 32)),
])
def test_bounded_memory_calibration_gives_identical_results(name, model, shape):
    torch.manual_seed(0)
    net = randomize_bn(model(), 1)
    g = torch.Generator().manual_seed(2)
    data = [torch.randn(*shape, generator=g) * 2 for _ in range(3)]
    session = SimSession(net, data[0], load_quant_config(None))
    assert session.cfg.include_bias_corr  # the default: the bias correction path runs
    new = session.calibrator()
    old = KeepEverything(session.graph, session.plan, session.bitwidth, session.cfg.include_bias_corr)
    for x in data:
        before = x.clone()
        a, b = new.step(x), old.step(x)
        assert torch.equal(a, b), name
        assert torch.equal(x, before)  # the caller's batch is never written
    assert new.fix_positions() == old.fix_positions()
    corr_new, corr_old = new.bias_corrections(), old.bias_corrections()
    assert corr_new.keys() == corr_old.keys()
    for key in corr_new:
        assert (corr_new[key] is None) == (corr_old[key] is None)
        if corr_new[key] is not None:
            assert torch.equal(corr_new[key], corr_old[key]), key
    moved = [k for k, v in corr_new.items() if v is not None and bool(v.abs().sum() > 0)]
    assert moved, "bias correction moved no bias: the comparison would not cover it"


def test_activations_are_released_after_their_last_reader_only():
    net = randomize_bn(resnet18(num_classes=10), 3)
    session = SimSession(net, torch.randn(1, 3, 32, 32), load_quant_config(None))
    nodes = session.graph.nodes
    index = {n.fx_node: i for i, n in enumerate(nodes)}
    schedule = calib.release_schedule(session.graph)
    freed_at = {fx: i for i, done in enumerate(schedule) for fx in done}
    output = [n for n in session.graph.gm.graph.nodes if n.op == "output"][0]
    for n in nodes:
        readers = [index[u] for u in n.fx_node.users if u in index]
        if output in n.fx_node.users:
            assert n.fx_node not in freed_at  # the graph's result stays
        else:
            assert freed_at[n.fx_node] == max(readers + [index[n.fx_node]])
    # a residual block's input is read twice (conv and add): it lives until the later reader
    shared = [n for n in nodes if len([u for u in n.fx_node.users if u in index]) >= 2]
    assert shared and all(freed_at[n.fx_node] > min(index[u] for u in n.fx_node.users) for n in shared)
    live, peak = 0, 0
    for i, done in enumerate(schedule):
        live += 1
        peak = max(peak, live)
        live -= len(done)
    assert peak <= 4 < len(nodes)  # a few activations at a time, not the whole graph


def _bits(t):
    return t.contiguous().view(torch.int32)


@pytest.mark.parametrize("method", ["half_up", "std_round"])
def test_tiled_fake_quant_equals_the_single_pass_on_every_element(method):
    tile = fixpoint._FAKE_QUANT_TILE
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2 * tile + 12345, generator=g) * 40
    specials = torch.tensor([0.5 - 2.0 ** -25, -0.5, 0.5, -0.0, 0.0, 1.5, -1.5, 2.5, -2.5, 1e30, -1e30, 127.5, -128.5,
                             float("inf"), float("-inf"), float("nan")])
    x[:specials.numel()] = specials / 16  # fix_pos 4 scales by 16: the ties and edges land on them
    x[-specials.numel():] = specials / 16
    for bitwidth, fix_pos in ((8, 4), (8, -2), (4, 0), (16, 9)):
        tiled = fixpoint.fake_quant(x, fix_pos, bitwidth, method)
        single = fixpoint._fake_quant_into(x, None, fix_pos, bitwidth, method)
        assert torch.equal(_bits(tiled), _bits(single)), (bitwidth, fix_pos)
        shaped = x[:2 * tile + 12288].view(4, -1, 16, 16)  # any contiguous shape
        assert torch.equal(_bits(fixpoint.fake_quant(shaped, fix_pos, bitwidth, method)),
                           _bits(fixpoint._fake_quant_into(shaped, None, fix_pos, bitwidth, method)))
    nhwc = x[:2 * tile + 12288].view(4, 16, 16, -1).permute(0, 3, 1, 2)  # not contiguous: one pass
    assert torch.equal(_bits(fixpoint.fake_quant(nhwc, 3, 8, method)),
                       _bits(fixpoint._fake_quant_into(nhwc, None, 3, 8, method)))
    assert np.isnan(fixpoint.fake_quant(x, 4, 8, method)[-1].item())


@pytest.mark.parametrize("shape", [(5, 7, 3), (2 * fixpoint._FAKE_QUANT_TILE + 999,), (0,)])
def test_fake_quant_in_place_equals_fake_quant_on_every_element(shape):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(*shape, generator=g) * 40
    specials = torch.tensor([0.5 - 2.0 ** -25, -0.5, 0.5, -0.0, 0.0, 1.5, -2.5, 1e30, -128.5, float("inf"), float("nan")])
    n = min(x.numel(), specials.numel())
    x.view(-1)[:n] = specials[:n] / 16
    for bitwidth, fix_pos in ((8, 4), (8, -2), (16, 9)):
        expected = fixpoint.fake_quant(x, fix_pos, bitwidth, "half_up")
        y = x.clone()
        assert fixpoint.fake_quant_(y, fix_pos, bitwidth) is y
        assert torch.equal(_bits(y), _bits(expected)), (shape, bitwidth, fix_pos)
    with pytest.raises(ValueError, match="contiguous float32"):
        fixpoint.fake_quant_(x.double(), 4, 8)


class ReluNet(nn.Module):
    """ReLU in every form, some of whose inputs another node also reads (never written then), a
    ReLU as an output, pools and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 8, 1)
        self.conv4 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv5 = nn.Conv2d(8, 4, 1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        a = self.relu1(self.conv1(x))  # module, inplace=True
        b = self.conv2(a)
        c = F.relu(b) + b  # b read twice: its ReLU must not write it
        d = torch.relu(self.conv3(c))  # function
        e = self.pool(self.conv4(d)).relu()  # method, after a pool
        f = F.avg_pool2d(e, 2)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(f, 1), 1)).relu(), F.relu(self.conv5(a))


def test_relu_and_quantization_in_place_give_the_results_of_new_tensors():
    torch.manual_seed(0)
    net = ReluNet().eval()
    g = torch.Generator().manual_seed(3)
    data = [torch.randn(4, 3, 8, 8, generator=g) * 2 for _ in range(3)]
    session = SimSession(net, data[0], load_quant_config(None))
    cal = session.calibrator()
    srcs = sorted(str(src.target) for src in cal._relu_in_place.values())
    assert srcs == ["conv1", "conv3", "conv5", "fc", "pool"]  # not conv2, whose output the add reads too
    old = KeepEverything(session.graph, session.plan, session.bitwidth, session.cfg.include_bias_corr)
    for x in data:
        before = x.clone()
        a, b = cal.step(x), old.step(x)
        assert all(torch.equal(u, v) for u, v in zip(a, b))
        assert torch.equal(x, before)  # the caller's batch is never written
    assert cal.fix_positions() == old.fix_positions()
    corr, corr_old = cal.bias_corrections(), old.bias_corrections()
    assert all(torch.equal(corr[k], corr_old[k]) for k in corr)


def test_the_clamp_is_skipped_only_where_it_would_change_nothing():
    g = torch.Generator().manual_seed(6)
    for fix_pos in (-3, 0, 4, 7):
        scale = 2.0 ** -fix_pos
        for lo_v, hi_v in ((-128 * scale, 127 * scale), (0.0, 127 * scale), (-128 * scale, 0.0)):
            x = torch.rand(5000, generator=g) * (hi_v - lo_v) + lo_v
            x[:4] = torch.tensor([lo_v, hi_v, hi_v - scale / 2, lo_v + scale / 2])  # the edges and ties
            min_max = (x.min().item(), x.max().item())
            assert fixpoint.codes_in_range(min_max, fix_pos, 8)
            y = x.clone()
            fixpoint.fake_quant_(y, fix_pos, 8, clamp=False)
            assert torch.equal(_bits(y), _bits(fixpoint.fake_quant(x, fix_pos, 8, "half_up"))), (fix_pos, lo_v, hi_v)
        for beyond in ((-128.5 * scale, 0.0), (0.0, 127.25 * scale)):  # a code would leave the range
            assert not fixpoint.codes_in_range(beyond, fix_pos, 8)
