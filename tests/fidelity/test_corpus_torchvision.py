"""The torchvision families (tests/support/corpus_torchvision.py) through a real quantize script's steps, in
both configs: drop-in calibration and test mode in separate processes, against the real quantizer's
files (quant_info.json and the test-mode outputs, bit for bit); the exact ONNX flavour in ONNX
Runtime against the simulation; the xmodel written, read back and run against the simulation, or
refused with its clear error where the writer cannot express a node yet; and inspect.
"""
import json
import os

import numpy as np
import pytest
import torch

from tests.support import DATA, SUPPORT, pinned_threads
from pipeline.cpu import cpu_capability
from pipeline.fx.capture import capture
from pipeline.inspect import inspect_model
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config

from tests.support import corpus_models
from tests.support import corpus_torchvision as corpus

pytestmark = [pytest.mark.slow, pytest.mark.rerun]
corpus.require_torchvision()

REAL = os.path.join(DATA, "corpus_real")
NAMES = list(corpus.CORPUS)
CONFIGS = {"default": None, "nocle": {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}}
# exports the drop-in refuses, with a word of the reason: what the exact ONNX flavour or the xmodel
# writer cannot express yet (each is an ExportError naming the node)
ONNX_REFUSED = {"tv_vit": "scaled_dot_product_attention"}
XMODEL_REFUSED = {"tv_swin": "assigns into a tensor in place"}  # the real file loses the shifted-window mask
# what inspect puts on the CPU beyond the float operators: ops the DPU of corpus_models.TARGET
# cannot run (family -> op kinds)
HARDWARE_CPU = {
    "tv_mobilenet_v3_small": {"mul"},  # squeeze-excite's broadcast
    # grouped convs (neither 1 group nor depthwise), their BatchNorm and ReLU
    "tv_regnet_x_400mf": {"batch_norm", "conv2d", "relu"},
    "tv_shufflenet_v2": {"chunk", "getitem", "transpose", "view"},  # the channel shuffle moves data
    "tv_squeezenet1_1": set(),
    "tv_mnasnet": set(),
    "tv_googlenet": set(),
    "tv_resnext": {"batch_norm", "conv2d", "relu"},
    "tv_efficientnet_b0": {"mul"},  # squeeze-excite's (N, C, 1, 1) x (N, C, H, W) broadcast
    "tv_convnext": {"permute", "flatten"},
    "tv_vit": {"concat", "getitem", "permute", "reshape", "view", "transpose", "squeeze", "unsqueeze"},
    # traced through its window attention as torch.jit does: data moves (permute, transpose), the
    # products of two feature maps (matmul), broadcast adds/muls (bias, mask, scale), the mask made
    # from sizes (new_zeros), and what follows them off the DPU (pad, reshape/view, getitem, unsqueeze)
    "tv_swin": {"permute", "transpose", "matmul", "add", "mul", "new_zeros", "pad", "reshape", "view",
                "getitem", "unsqueeze"},
    "tv_densenet121": {"relu"},  # a ReLU after an unfused (pre-activation) BatchNorm
    "tv_lraspp": {"mul", "resize"},
}


# the CPU setting the phases run at: torch's vector unit and thread count. The real quantizer's own
# bits depend on it where bias correction sums float32 convolutions (RegNetX-400MF's default-config
# outputs differ between its one- and two-thread runs), so the references are per setting
# (tests/data/README.md) and the simulation must give the real quantizer's bits at each
THREADS = pinned_threads(1)
SETTING = "{}-{}".format(cpu_capability(), THREADS)


def reference(name, cfg):
    """The folder of the real quantizer's files for ``name`` in ``cfg`` at this SETTING."""
    with open(os.path.join(REAL, name, "settings.json")) as f:
        settings = json.load(f)[cfg]
    if SETTING not in settings:
        pytest.skip("no real-quantizer reference for {} at {} (made for: {})".format(name, SETTING, sorted(settings)))
    return os.path.join(REAL, name, settings[SETTING])


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    return corpus_models.run_phases(os.path.join(SUPPORT, "corpus_torchvision.py"), tmp_path_factory.mktemp("tv"),
                                    CONFIGS, env=dict(os.environ, PIPELINE_TEST_THREADS=str(THREADS)))


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("name", NAMES)
def test_torchvision_family_equals_the_real_quantizer(name, cfg, phases):
    """The real quantizer (pytorch_nndct 3.5) ran the same two phases on the same seeded models and
    data at the same CPU setting (tests/data/README.md): every quant_info.json entry and every
    test-mode output bit."""
    with open(os.path.join(REAL, name, "seeded.sha256")) as f:
        assert corpus_models.seeded_sha256(name, corpus) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"
    real = reference(name, cfg)
    folder = os.path.join(phases[cfg], name)
    mine, theirs = qi.read_quant_info(folder), qi.read_quant_info(real)
    for key in ("param", "output", "input"):
        assert mine[key] == theirs[key], key
    got, want = np.load(os.path.join(folder, "y_0.npy")), np.load(os.path.join(real, "y_0.npy"))
    assert got.dtype == want.dtype and np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("name", NAMES)
def test_torchvision_family_exact_onnx_equals_the_simulation(name, phases):
    pytest.importorskip("onnxruntime")
    folder = os.path.join(phases["default"], name)
    if not corpus_models.exported(folder, "onnx", ONNX_REFUSED.get(name)):
        return
    got = corpus_models.exact_onnx_outputs(folder, corpus.make_inputs(name, 4, 3))
    expected = np.load(os.path.join(folder, "y_0.npy"))
    assert len(got) == 1 and np.array_equal(got[0].view(np.int32), expected.view(np.int32))


@pytest.mark.parametrize("name", NAMES)
def test_torchvision_family_xmodel(name, phases):
    """Written only after running against the simulation; read back here, checked and run on a
    batch-1 input the export did not see. Or refused with the writer's clear error."""
    folder = os.path.join(phases["default"], name)
    if not corpus_models.exported(folder, "xmodel", XMODEL_REFUSED.get(name)):
        return
    report = corpus_models.rerun_xmodel(folder, corpus, name)
    assert report["elements"] > 0 and report["mismatches"] == 0 and report["nodes_differing"] == []


@pytest.mark.parametrize("name", NAMES)
def test_torchvision_family_inspect(name):
    """inspect puts every float operator of the simulation on the CPU, and beside them only what
    the target's hardware cannot run; no op is unknown to it."""
    model = corpus.make_model(name)
    example = corpus.make_inputs(name, 1, 1)
    inspection = inspect_model(model, example[0], corpus_models.TARGET)
    graph = capture(model, tuple(example), load_quant_config(None).rewrites())
    float_ops = {n.fx_node.name for n in graph.float_operators()}
    cpu = {n.name: n for n in inspection.nodes if n.device == "CPU"}
    assert float_ops <= set(cpu)
    assert {cpu[k].op for k in set(cpu) - float_ops} == HARDWARE_CPU[name]
    assert not [n.name for n in inspection.nodes if any("operator table" in r for r in n.reasons)]
