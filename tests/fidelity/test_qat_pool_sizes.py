"""The QAT trainable model's adaptive pools decided on every forward, against the real quantizer's QAT
(tests/data/qat_pool_sizes_real, tests/data/README.md says how it was made).

The real ``QatProcessor.trainable_model`` puts its ``DPUAdaptiveAvgPool2d`` in place of an
``nn.AdaptiveAvgPool2d`` (``ReplacePooling2d``, ``pytorch_nndct/quantization/transforms.py``), which scales by
the DPU factor of the WHOLE input it sees on each forward (``pytorch_nndct/nn/quantization/modules/pooling.py``),
whatever the example's size and the output size (docs/qat.md#the-trainable-model). A model whose example is
16x16 and whose batches are 20x20 or 24x24 (10x10 and 12x12 pool inputs where the example gave 8x8) must
give the real outputs bit for bit; with ``exact_deploy`` the pool follows the deployed (test-mode) rule instead.
"""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import QatProcessor
from pipeline.cpu import cpu_capability
from pipeline.ops.pool.sim import avgpool_dpu_scale, dpu_adaptive_factor

from tests.support import DATA, pinned_threads
from tests.support.qat_models import build

REAL = os.path.join(DATA, "qat_pool_sizes_real")
REFERENCE_ENV = torch.__version__.split("+")[0] == "2.13.0" and cpu_capability() == "AVX512"
THREADS = pinned_threads(1)  # the references' setting


def _trainable(variant, exact_deploy=False):
    model, _ = build("resnet")
    if variant != "pool1":
        size = int(variant[-1])
        model.pool = nn.AdaptiveAvgPool2d(size)
        model.fc = nn.Linear(16 * size * size, 10)
    model.load_state_dict(torch.load(os.path.join(REAL, variant, "float_state_dict.pt"), weights_only=True))
    ref = np.load(os.path.join(REAL, variant, "outputs.npz"))
    model.train()  # as the reference was made (the real trainable_model asserts conv.training)
    qat = QatProcessor(model, torch.from_numpy(ref["x0"]), bitwidth=8, exact_deploy=exact_deploy)
    return qat.trainable_model(), ref


def _pool_call(qmodel, x):
    """(the pool's plain average, what the trainable model makes of it) on ``x``."""
    node = next(n for n in qmodel.net.graph.nodes if n.target is dpu_adaptive_factor)
    seen = {}

    class Record(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n is node:
                seen["plain"], seen["out"] = self.env[n.args[0]], out
            return out

    with torch.no_grad():
        Record(qmodel.net).run(x)
    return seen["plain"], seen["out"]


@pytest.mark.skipif(not REFERENCE_ENV, reason="the references were made with torch 2.13.0 on AVX-512 (their "
                                              "conv sums round as there); the rule itself is checked below")
@pytest.mark.parametrize("variant", ["pool1", "pool2", "pool3"])
def test_trainable_pools_of_other_sizes_than_the_example_equal_the_real_qat(variant):
    """``train<hw>``: the first training forward (the warm-up sets every threshold), then ``eval<hw>`` in eval
    mode, each on the reference's ``x<hw>``. pool3: a 3x3 pool the example's 8x8 map does not divide, which the
    real QAT scales and quantizes all the same."""
    qmodel, ref = _trainable(variant)
    keys = sorted(k for k in ref.files if k.startswith("train")) + sorted(k for k in ref.files if k.startswith("eval"))
    with torch.no_grad():
        for key in keys:
            x = torch.from_numpy(ref["x" + "".join(c for c in key if c.isdigit())]).clone()
            value = qmodel.train(key.startswith("train"))(x)
            assert np.array_equal(value.numpy().view(np.int32), ref[key].view(np.int32)), key


def test_a_pool_the_example_does_not_divide_trains_a_quantizer_and_ships_its_position(tmp_path):
    """As the real QAT: its quant config has a key for the pool (PTQ's ``[[8, null]]`` entry), so it trains an
    output quantizer there, and ``to_deployable`` writes that quantizer's position (the reference's
    quant_info.json, made by the real ``to_deployable`` after the forwards above; its node names count the
    QuantStub, so the values are compared in order). With ``exact_deploy`` it stays unquantized, as it deploys."""
    import json
    qmodel, ref = _trainable("pool3")
    with torch.no_grad():
        qmodel.train()(torch.from_numpy(ref["x16"]).clone())
    pools = [k for g, k, _ in qmodel.quantizers() if g == "output" and "adaptive_avg_pool2d" in k]
    assert len(pools) == 1
    with open(os.path.join(REAL, "pool3", "quant_info.json")) as f:
        real = json.load(f)
    if REFERENCE_ENV:
        _, output = qmodel.fix_positions(adjusted=True)
        assert list(output.values()) == [v[0][1] for v in real["output"].values()]
    assert real["output"]["TinyResNet::nndct_adaptive_avg_pool2d_15"][0][1] is not None
    exact, _ = _trainable("pool3", exact_deploy=True)
    assert not [k for g, k, _ in exact.quantizers() if "adaptive_avg_pool2d" in k]


@pytest.mark.parametrize("variant, exact_deploy, hw, factor", [
    ("pool1", False, 20, avgpool_dpu_scale(10, 10)), ("pool1", False, 24, avgpool_dpu_scale(12, 12)),
    ("pool2", False, 20, avgpool_dpu_scale(10, 10)),  # the real QAT: the whole 10x10 input's factor
    ("pool2", True, 20, avgpool_dpu_scale(5, 5)),  # exact_deploy: the test-mode rule, a 5x5 kernel
    ("pool1", True, 24, avgpool_dpu_scale(12, 12))])
def test_the_trainable_pool_takes_the_factor_of_the_input_each_forward_sees(variant, exact_deploy, hw, factor):
    qmodel, _ = _trainable(variant, exact_deploy)
    x = torch.randn(2, 3, hw, hw, generator=torch.Generator().manual_seed(3))
    plain, out = _pool_call(qmodel.eval(), x)
    assert factor != 1.0 and torch.equal(out, plain * factor)
    plain, out = _pool_call(qmodel, torch.randn(2, 3, 16, 16))  # the example's 8x8: factor 1.0
    assert torch.equal(out, plain)


def test_dpu_adaptive_factor_rules():
    x = torch.randn(1, 2, 10, 10)
    value = F.adaptive_avg_pool2d(x, 2)
    assert torch.equal(dpu_adaptive_factor(value, x, 2, True), value * avgpool_dpu_scale(10, 10))
    assert torch.equal(dpu_adaptive_factor(value, x, 2, False), value * (250.0 / 256.0))
    value = F.adaptive_avg_pool2d(x, 3)  # uneven: the real QAT still scales; the test-mode rule leaves it plain
    assert dpu_adaptive_factor(value, x, 3, False) is value
    assert torch.equal(dpu_adaptive_factor(value, x, 3, True), value * avgpool_dpu_scale(10, 10))


def test_a_pickled_trainable_model_loads_and_keeps_deciding_per_forward():
    """torch.save of the trainable model loads (torch traces its code again, keeping dpu_adaptive_factor one
    call: sim_support.OPAQUE_CALLS) and gives the same 20x20 outputs, the 10x10 factor included."""
    import io
    qmodel, ref = _trainable("pool1")
    x = torch.from_numpy(ref["x20"]).clone()
    with torch.no_grad():
        qmodel.train()(x)
        y = qmodel.eval()(x)
    buf = io.BytesIO()
    torch.save(qmodel, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    with torch.no_grad():
        assert torch.equal(loaded(x), y)
    plain, out = _pool_call(loaded, x)
    assert torch.equal(out, plain * avgpool_dpu_scale(10, 10))
