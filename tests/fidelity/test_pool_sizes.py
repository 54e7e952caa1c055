"""An adaptive average pool decided on every forward, whatever the example's size, against the real
quantizer (tests/support/corpus_pool_sizes.py; references in tests/data/pool_sizes_real/,
tests/data/README.md).

nndct's ``deephi_AdaptiveAvgPool2d`` takes the DPU factor of ``input // output``, and whether the output
size divides the input's, from the tensor each forward sees
(docs/arithmetic.md#adaptive-average-pool-that-does-not-divide). The example given as ``input_args`` (a 224x224 one for a 32x32 CIFAR model, say) changes
nothing: the drop-in must write the same quant_info.json and the same test-mode outputs, bit for bit, and
its exports must follow the sizes of their own input.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.quantizers import quant_info as qi
from pipeline.ops.pool.sim import avgpool_dpu_scale

from tests.support import DATA, SUPPORT, corpus_models, corpus_pool_sizes as corpus, pinned_threads

REAL = os.path.join(DATA, "pool_sizes_real")
THREADS = pinned_threads(1)  # the references' setting (tests/data/README.md)


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    """Both phases of every case (calib, then test in a new process)."""
    root = str(tmp_path_factory.mktemp("pool_sizes"))
    for which in ("calib", "test"):
        proc = subprocess.run([sys.executable, os.path.join(SUPPORT, "corpus_pool_sizes.py"), which, root, "all"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        assert proc.returncode == 0, proc.stdout[-3000:]
    return root


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_pool_of_another_size_than_the_example_equals_the_real_quantizer(name, phases):
    real, folder = os.path.join(REAL, name), os.path.join(phases, name)
    with open(os.path.join(real, "seeded.sha256")) as f:
        assert corpus.seeded_sha256(name) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"
    mine, theirs = qi.read_quant_info(folder), qi.read_quant_info(real)
    for key in ("param", "output", "input"):
        assert list(mine[key].items()) == list(theirs[key].items()), key
    got, want = np.load(os.path.join(folder, "y_0.npy")), np.load(os.path.join(real, "y_0.npy"))
    assert got.dtype == want.dtype and np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("name, hw", [("pool_2x2_33_example_32", 32), ("pool_2x2_32_example_33", 33)])
def test_test_forwards_of_another_size_than_the_calibration(name, hw, phases, tmp_path):
    """Calibrated on 33x33 (null entry), tested on 32x32: the pool divides, so it is scaled, and stays
    unquantized (no fix position); calibrated on 32x32, tested on 33x33: uneven, so neither. As the real
    quantizer (``y_<hw>x<hw>.npy``: its test phase on seed 3's 4 samples of that size, a batch-1 forward first)."""
    import shutil
    from pipeline.apis import torch_quantizer
    folder = str(tmp_path / name)
    shutil.copytree(os.path.join(phases, name), folder)
    q = torch_quantizer("test", corpus.make_model(name), (corpus.make_example(name),), output_dir=folder,
                        device=torch.device("cpu"))
    x = corpus_models.seeded_inputs([(3, hw, hw)], 4, 3)[0]
    with torch.no_grad():
        q.quant_model(x[:1])
        got = q.quant_model(x).numpy()
    want = np.load(os.path.join(REAL, name, "y_%dx%d.npy" % (hw, hw)))
    assert got.dtype == want.dtype and np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("name, warned", [("pool_2x2_33_example_32", True), ("pool_2x2_32_example_33", False)])
def test_the_drop_in_warns_about_the_pool_uneven_on_a_forward(name, warned, tmp_path, caplog):
    """The warning follows the forwards, not the example (nndct's module warns on the forward that sees it:
    the real quantizer warned for 33x33 forwards of a 32x32 example, and not for 32x32 forwards of a 33x33 one)."""
    import logging
    from pipeline.apis import torch_quantizer
    with caplog.at_level(logging.WARNING, logger="pipeline.apis"):
        q = torch_quantizer("calib", corpus.make_model(name), (corpus.make_example(name),), output_dir=str(tmp_path),
                            device=torch.device("cpu"))
        q.quant_model(corpus.make_inputs(name, 4, 1))
    size = corpus.CORPUS[name][2][1]
    expected = ["AdaptiveAvgpool2d op(PoolHead::nndct_adaptive_avg_pool2d_3) is not quantized: its output size [2, 2] "
                "does not divide its input size [%d, %d], so it runs unscaled, in float, as in the real quantizer (the "
                "DPU cannot run it)" % (size, size)] if warned else []
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == expected


def test_reference_pool_uneven_in_every_batch_is_null():
    """The real quantizer's files themselves: the pool that divides on the example but on no forward has a
    null entry; the one uneven on the example but dividing on every forward has a fix position."""
    null = qi.read_quant_info(os.path.join(REAL, "pool_2x2_33_example_32"))["output"]
    assert null["PoolHead::nndct_adaptive_avg_pool2d_3"] == [[8, None]]
    fixed = qi.read_quant_info(os.path.join(REAL, "pool_2x2_32_example_33"))["output"]
    assert fixed["PoolHead::nndct_adaptive_avg_pool2d_3"][0][1] is not None


class _Gap(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, 1)


def _fq(v, p):
    """half_up fake quantization at fix position ``p`` (8 bits)."""
    s = v * 2.0 ** p
    r = torch.where(s - torch.floor(s) == 0.5, torch.ceil(s), torch.sign(s) * torch.floor(s.abs() + 0.5))
    return torch.clamp(r, -128, 127) / 2.0 ** p


def test_test_mode_and_xmodel_take_the_factor_of_the_forward(tmp_path):
    """A 32x32 example, 48x48 forwards: the test-mode outputs are the documented arithmetic with 48x48's
    factor (1.001953125, not 32x32's 1.0), the graph the exporters walk stays the example's, and
    ``export_xmodel`` on a 48x48 first forward writes a file that runs as the simulation."""
    from pipeline.apis import torch_quantizer
    g = torch.Generator().manual_seed(0)
    d = str(tmp_path)
    q = torch_quantizer("calib", _Gap(), (torch.rand(1, 8, 32, 32),), output_dir=d)
    for _ in range(3):
        q.quant_model(torch.rand(4, 8, 48, 48, generator=g))
    q.export_quant_config()
    with open(os.path.join(d, "quant_info.json")) as f:
        out = json.load(f)["output"]
    pin, pout = out["_Gap::nndct_input_0"][0][1], out["_Gap::nndct_adaptive_avg_pool2d_1"][0][1]
    x = torch.rand(16, 8, 48, 48, generator=g)
    q = torch_quantizer("test", _Gap(), (torch.rand(1, 8, 32, 32),), output_dir=d)
    y = torch.cat([q.quant_model(x[:1]), q.quant_model(x[1:])])
    want = _fq(F.adaptive_avg_pool2d(_fq(x, pin), 1) * avgpool_dpu_scale(48, 48), pout)
    assert avgpool_dpu_scale(48, 48) != 1.0 and torch.equal(y, want)
    model = q.quant_model
    assert not any(n.target is torch.mul for n in model.graph.nodes)  # the example's 32x32: factor 1.0, no mul
    q.export_xmodel(os.path.join(d, "xmodel"))  # checked against the simulation on the 48x48 forward, or raises
    assert os.listdir(os.path.join(d, "xmodel"))
    pytest.importorskip("onnxruntime")
    q.export_onnx_model(os.path.join(d, "onnx"), native_onnx=False)  # written for input_args' 32x32 size
    x32 = torch.rand(4, 8, 32, 32, generator=g)
    got = corpus_models.exact_onnx_outputs(os.path.join(d, "onnx"), [x32])[0]
    want32 = _fq(F.adaptive_avg_pool2d(_fq(x32, pin), 1), pout)  # 32x32's factor 1.0
    assert np.array_equal(got.view(np.int32), want32.numpy().view(np.int32))
    assert torch.equal(q.quant_model(x32), want32)
    from pipeline.quantizers.sim.export import export_onnx  # the runner's export: its example's own size
    export_onnx(model, x[:1].clone(), os.path.join(d, "onnx48", "GAP_int.onnx"), "exact")
    got = corpus_models.exact_onnx_outputs(os.path.join(d, "onnx48"), [x])[0]
    assert np.array_equal(got.view(np.int32), want.numpy().view(np.int32))


def test_copies_of_the_test_model_run_their_own_modules(tmp_path):
    """A deep copy of the test model keeps deciding per forward, on its own modules."""
    import copy
    from pipeline.apis import torch_quantizer
    name = "gap_48_example_32"
    q = torch_quantizer("calib", corpus.make_model(name), (corpus.make_example(name),), output_dir=str(tmp_path))
    q.quant_model(corpus.make_inputs(name, 4, 1))
    q.export_quant_config()
    q = torch_quantizer("test", corpus.make_model(name), (corpus.make_example(name),), output_dir=str(tmp_path))
    x = corpus.make_inputs(name, 4, 3)
    y = q.quant_model(x)
    model = q._session.load_test(str(tmp_path))  # no drop-in hooks (torch 1.13's copy loses its memo in them)
    assert torch.equal(model(x), y)
    other = copy.deepcopy(model)
    assert torch.equal(other(x), y)
    with torch.no_grad():
        next(m for m in other.modules() if isinstance(m, nn.Linear)).bias.add_(1.0)
    assert not torch.equal(other(x), y) and torch.equal(model(x), y)


def _drop_in_test_model(tmp_path, name="gap_48_example_32"):
    from pipeline.apis import torch_quantizer
    q = torch_quantizer("calib", corpus.make_model(name), (corpus.make_example(name),), output_dir=str(tmp_path))
    q.quant_model(corpus.make_inputs(name, 4, 1))
    q.export_quant_config()
    return torch_quantizer("test", corpus.make_model(name), (corpus.make_example(name),), output_dir=str(tmp_path))


def test_copies_of_the_drop_in_test_model_keep_deciding_per_forward(tmp_path):
    """copy.copy and copy.deepcopy of quant_model itself (with the drop-in's hooks; torch 1.13's own copy
    recursed without end through them) run 48x48 inputs with 48x48's factor, as the model does, and keep
    the hooks: a copy refuses an input of another rank as quant_model does."""
    import copy
    from pipeline.errors import QuantizationError
    q = _drop_in_test_model(tmp_path)
    x = corpus.make_inputs("gap_48_example_32", 4, 3)
    y = q.quant_model(x)
    example_pool = q._session.load_test(str(tmp_path))  # the 48x48 input through the example's 32x32 graph
    assert not torch.equal(torch.fx.GraphModule(example_pool, example_pool.graph)(x), y)
    for other in (copy.copy(q.quant_model), copy.deepcopy(q.quant_model)):
        assert other.pool_variants is not None and torch.equal(other(x), y)
        with pytest.raises(QuantizationError):
            other(x[0])
    deep = copy.deepcopy(q.quant_model)
    with torch.no_grad():
        next(m for m in deep.modules() if isinstance(m, nn.Linear)).bias.add_(1.0)
    assert not torch.equal(deep(x), y) and torch.equal(q.quant_model(x), y)


def test_pickling_the_test_model_is_refused_with_what_to_do(tmp_path):
    """A pickled model could not decide per forward (the float capture does not travel) and torch's own
    pickle of it failed on load; torch.save and pickle refuse it, naming copy.deepcopy and the test-mode quantizer."""
    import io
    import pickle
    from pipeline.errors import QuantizationError
    q = _drop_in_test_model(tmp_path)
    q.quant_model(corpus.make_inputs("gap_48_example_32", 4, 3))
    for save in (lambda m: torch.save(m, io.BytesIO()), pickle.dumps):
        with pytest.raises(QuantizationError, match=r"cannot be pickled .*copy\.deepcopy\(quant_model\).*"
                                                    r"torch_quantizer\(\"test\""):
            save(q.quant_model)


def _plain_test_model(tmp_path):
    """(the drop-in's test-mode quantizer of a conv, ReLU, linear model without adaptive pools, its 4 inputs,
    quant_model's outputs on them)."""
    from pipeline.apis import torch_quantizer
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path))
    q.quant_model(x)
    q.export_quant_config()
    q = torch_quantizer("test", model, (x,), output_dir=str(tmp_path))
    y = q.quant_model(x)
    return q, x, y


def test_a_test_model_without_adaptive_pools_pickles_and_loads(tmp_path):
    """torch.save of a test model with no adaptive pool (a plain lowered GraphModule) loads again and computes
    the same bits: torch traces its code again on load, with the graph's tracer (lowered.LoweredTracer), which
    keeps fake_quant one call (the plain tracer failed on its branches)."""
    import io
    q, x, y = _plain_test_model(tmp_path)
    buf = io.BytesIO()
    torch.save(q.quant_model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded(x), y)


def test_copies_of_a_test_model_without_adaptive_pools_keep_the_hooks(tmp_path):
    """copy.deepcopy and copy.copy of quant_model with no adaptive pool: torch 1.13's GraphModule copy recursed
    without end through the drop-in's hooks (they hold the quantizer, which holds the model); the copies compute
    the same bits and refuse an input of another rank as quant_model does."""
    import copy
    from pipeline.errors import QuantizationError
    q, x, y = _plain_test_model(tmp_path)
    for other in (copy.deepcopy(q.quant_model), copy.copy(q.quant_model)):
        assert torch.equal(other(x), y)
        with pytest.raises(QuantizationError):
            other(x[0])
