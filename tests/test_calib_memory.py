"""Calibration in bounded memory gives the same results: activations freed after their last use,
bias-correction squares in one reused buffer, fake_quant in cache-sized tiles."""
import numpy as np
import pytest
import torch

from conftest import randomize_bn
from pipeline.models.zoo import digits_cnn, mobilenet_v2, resnet18
from pipeline.quantizers import fixpoint
from pipeline.quantizers.quant_config import load_quant_config
from pipeline.quantizers.sim import calib
from pipeline.quantizers.sim.session import SimSession


class KeepEverything(calib.Calibrator):
    """The calibration loop before the memory work: every activation kept until the batch ends,
    bias correction with fresh temporaries (``eval_qnoise`` without a scratch buffer)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._release = [[] for _ in self._release]
        self._scratch = None


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
