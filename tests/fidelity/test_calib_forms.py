"""Two forms the simulation once refused to calibrate, against the real quantizer
(tests/support/corpus_calib_forms.py; references in tests/data/calib_forms_real/, tests/data/README.md).

- An adaptive average pool whose output size does not divide its input size (3x3 of 8x8 and 10x10,
  3x2 of 8x8, 7x7 of 2x2 as in torchvision's VGG-11 at 64x64): nndct's ``deephi_AdaptiveAvgPool2d``
  leaves it unscaled and unquantized (output entry ``[[8, null]]``; a conv or Linear after it reads
  float values) and writes it into the xmodel as its own type ``nndct_adaptive_avg_pool2d``
  (docs/arithmetic.md#adaptive-average-pool-that-does-not-divide). Pools that divide (1x1, 2x2 of
  10x10) keep the DPU factor.
- A ``forward`` whose defaults the example does not give (a float scale, a bool flag, a None mask):
  the real quantizer's ``torch.jit.trace`` bakes them in, and so does the capture.

The drop-in must write the same quant_info.json, the same test-mode outputs and the same xmodel,
bit for bit (the xmodel through tests/support/xmodel_compare.py).
"""
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.errors import QuantizationError
from pipeline.fx.capture import capture
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config

from tests.support import DATA, SUPPORT, corpus_calib_forms as corpus, corpus_models, pinned_threads
from tests.support.xmodel_compare import (assert_same_digest, assert_same_xmodel, numbering_matches_references,
                                          numbering_note)

REAL = os.path.join(DATA, "calib_forms_real")
SMALL = [n for n in corpus.CORPUS if n != "tv_vgg11"]
NOT_DIVIDING = ["pool_3x3_of_8", "pool_3x3_of_10_fc", "pool_7x7_of_2_conv", "pool_3x2_of_8_relu"]
# the simulation's xmodel self-check refuses this one, which the real quantizer writes: the file's
# avgpool2d (kernel 5) is run with F.avg_pool2d, whose last bits differ from the simulation's
# adaptive-pool kernel in 3 of 16 outputs, so nothing is written (a known gap of the interpreter)
XMODEL_REFUSED = {"pool_2x2_of_10": "differs from the simulation"}
THREADS = pinned_threads(1)  # the references' setting (tests/data/README.md)


def _phases(root, names):
    """Both phases of ``names`` (calib, then test in a new process), the files in ``<root>/<name>``."""
    env = dict(os.environ, PIPELINE_TEST_THREADS=str(THREADS))
    for which in ("calib", "test"):
        proc = subprocess.run([sys.executable, os.path.join(SUPPORT, "corpus_calib_forms.py"), which, str(root),
                               ",".join(names)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:]
    return str(root)


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    return _phases(tmp_path_factory.mktemp("calib_forms"), SMALL)


def _assert_same_as_real(folder, real, name):
    with open(os.path.join(real, "seeded.sha256")) as f:
        assert corpus_models.seeded_sha256(name, corpus) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"
    mine, theirs = qi.read_quant_info(folder), qi.read_quant_info(real)
    for key in ("param", "output", "input"):
        assert list(mine[key].items()) == list(theirs[key].items()), key
    assert mine["graph_md5"] == theirs["graph_md5"]
    got, want = np.load(os.path.join(folder, "y_0.npy")), np.load(os.path.join(real, "y_0.npy"))
    assert got.dtype == want.dtype and np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("name", SMALL)
def test_calib_form_equals_the_real_quantizer(name, phases):
    folder, real = os.path.join(phases, name), os.path.join(REAL, name)
    _assert_same_as_real(folder, real, name)
    stored = [f for f in os.listdir(real) if f.endswith("_int.xmodel")]
    assert len(stored) == 1, stored  # the real quantizer writes an xmodel for every one of them
    if name in XMODEL_REFUSED:
        assert not corpus_models.exported(folder, "xmodel", XMODEL_REFUSED[name])
        return
    assert corpus_models.exported(folder, "xmodel")
    assert_same_xmodel(os.path.join(folder, "xmodel", stored[0]), os.path.join(real, stored[0]))


def test_reference_leaves_the_pools_that_do_not_divide_unquantized():
    """What the real quantizer did (the references themselves, read): a pool whose output size does
    not divide its input has a null output entry (when it carries its group's entry), and nothing
    else is null; the pools that divide have a fix position."""
    for name in corpus.CORPUS:
        info = qi.read_quant_info(os.path.join(REAL, name))
        nulls = [k.split("::")[1] for k, v in info["output"].items() if v[0][1] is None]
        if name in NOT_DIVIDING and name != "pool_3x2_of_8_relu":  # there the ReLU after it is quantized
            assert nulls == ["nndct_adaptive_avg_pool2d_3"], name
        elif name == "tv_vgg11":
            assert nulls == ["nndct_adaptive_avg_pool2d_22"]
        else:
            assert nulls == [], name
    relu = qi.read_quant_info(os.path.join(REAL, "pool_3x2_of_8_relu"))["output"]
    assert "PoolHead::nndct_adaptive_avg_pool2d_3" not in relu and relu["PoolHead::nndct_relu_4"] == [[8, 8]]


@pytest.mark.parametrize("name", NOT_DIVIDING)
def test_exact_onnx_refuses_the_uneven_pool(name, phases):
    assert not corpus_models.exported(os.path.join(phases, name), "onnx", "does not divide the input")


@pytest.mark.parametrize("name", ["default_scale", "default_flag"])
def test_exact_onnx_of_defaults_equals_the_simulation(name, phases):
    pytest.importorskip("onnxruntime")
    folder = os.path.join(phases, name)
    got = corpus_models.exact_onnx_outputs(folder, corpus.make_inputs(name, 4, 3))
    assert np.array_equal(got[0].view(np.int32), np.load(os.path.join(folder, "y_0.npy")).view(np.int32))


def test_the_drop_in_warns_about_the_uneven_pool(tmp_path, caplog):
    from pipeline.apis import torch_quantizer
    with caplog.at_level(logging.WARNING, logger="pipeline.apis"):
        q = torch_quantizer("calib", corpus.make_model("pool_3x2_of_8_relu"),
                            tuple(corpus.make_inputs("pool_3x2_of_8_relu", 4, 1)), output_dir=str(tmp_path),
                            device=torch.device("cpu"))
        assert not [r for r in caplog.records if r.levelno == logging.WARNING]  # on a forward, as nndct's module
        for seed in (1, 2):  # once
            q.quant_model(*corpus.make_inputs("pool_3x2_of_8_relu", 4, seed))
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "AdaptiveAvgpool2d op(PoolHead::nndct_adaptive_avg_pool2d_3) is not quantized: its output size [3, 2] "
        "does not divide its input size [8, 8], so it runs unscaled, in float, as in the real quantizer (the DPU "
        "cannot run it)"]


def _ops(model, example):
    return [n.op for n in capture(model.eval(), example, load_quant_config(None).rewrites()).nodes]


def test_capture_traces_the_defaults_in():
    """A bool default picks the path and a None default leaves out what it guards, with no node for
    either; a float default is a constant operand (``nndct_const``), numbered first."""
    x = torch.randn(1, 3, 8, 8)
    assert _ops(corpus.DefaultFlag(), x) == ["nndct_input", "nndct_conv2d", "nndct_relu", "nndct_conv2d"]
    assert _ops(corpus.DefaultScale(), x) == ["nndct_const", "nndct_input", "nndct_conv2d", "nndct_relu",
                                              "nndct_elemwise_mul", "nndct_conv2d"]


class _NoDefault(nn.Module):
    def forward(self, x, y):
        return x + y


class _TensorDefault(nn.Module):
    def forward(self, x, y=torch.ones(1)):
        return x + y


@pytest.mark.parametrize("model", [_NoDefault(), _TensorDefault()])
def test_capture_refuses_a_missing_input_without_a_plain_default(model):
    with pytest.raises(QuantizationError, match="takes 2 inputs .* got 1 example tensors"):
        capture(model, torch.randn(1, 3), load_quant_config(None).rewrites())


@pytest.mark.slow
def test_vgg11_at_64_equals_the_real_quantizer(tmp_path):
    """torchvision's VGG-11 at 64x64: its AdaptiveAvgPool2d((7, 7)) of a 2x2 map. The real xmodel
    (515 MB) is stored as its digest (``xmodel_compare.digest``)."""
    from tests.support.corpus_torchvision import require_torchvision
    require_torchvision()
    folder, real = os.path.join(_phases(tmp_path, ["tv_vgg11"]), "tv_vgg11"), os.path.join(REAL, "tv_vgg11")
    _assert_same_as_real(folder, real, "tv_vgg11")
    if not numbering_matches_references():
        # the Linear after the unscaled pool reads float values, so its bias correction (a 25088-long
        # float32 product) moves in the last bits with torch 1.13's kernels (about 4000 of 4096 values,
        # measured): classifier.0's bias codes in the file change, no test-mode output does
        pytest.skip("quant_info.json and the outputs equal the real quantizer's; its xmodel digest holds for the "
                    "references' torch line only (%s)" % numbering_note())
    with open(os.path.join(real, "VGG_int.xmodel.digest.json")) as f:
        stored = json.load(f)
    assert_same_digest(os.path.join(folder, "xmodel", "VGG_int.xmodel"), stored["ops"], stored["sha256"])


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["digits_uneven_pool", "DigitsFlag"])
def test_a_run_calibrates_tests_and_exports_the_form(tmp_path, factory):
    """The pipeline's own run (train, inspect, calib, test, export of the xmodel) of a config whose model
    has the form: a digits classifier with an AdaptiveAvgPool2d((3, 3)) of its 8x8 map, or with a
    ``forward(x, flag=False)`` default that picks the path."""
    import pipeline
    from tests.support import make_case
    cfg, _ = make_case(tmp_path, model={"zoo": None, "factory": "tests.support.corpus_calib_forms:" + factory,
                                        "train": {"epochs": 1}},
                       quantizer={"require_float_above_chance": False},  # one epoch: near chance
                       export={"formats": ["xmodel"]})  # the exact ONNX flavour refuses uneven windows
    report = pipeline.run(cfg, steps=["train", "inspect", "calib", "test", "export"])
    assert report["status"]["state"] == "ok"
    info = qi.read_quant_info(str(tmp_path / "run" / "quantize_result"))
    nulls = [k for k, v in info["output"].items() if v[0][1] is None]
    assert nulls == (["Sequential::nndct_adaptive_avg_pool2d_3"] if factory == "digits_uneven_pool" else [])
    assert [f for f in os.listdir(str(tmp_path / "run" / "export")) if f.endswith("_int.xmodel")]
