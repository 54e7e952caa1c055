"""The model corpus (tests/support/corpus_models.py) through a real quantize script's steps: drop-in
calibration and test mode in two separate processes, inspect, the exact ONNX flavour against
the simulation in ONNX Runtime, and the xmodel run by the interpreter against the simulation.

The two phases run once each for the whole corpus (two child processes), as users run a Vitis AI
quantize script: calibration, then test mode in a fresh process.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from pipeline.fx.capture import capture
from pipeline.inspect import inspect_model
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config

from tests.support import DATA, SUPPORT
from tests.support import corpus_models as corpus
from tests.support.xmodel_compare import assert_same_xmodel

REAL = os.path.join(DATA, "corpus_real")

NAMES = list(corpus.CORPUS)
N_OUTPUTS = {"yolo_tiny": 2}
# CPU nodes of the inspection that are no float operator of the quantizer: what the DPU of
# corpus.TARGET cannot do (hardware, not the operator kind), node -> op
HARDWARE_CPU = {
    # x * hsigmoid(...) of squeeze-excite broadcasts (N, C, 1, 1) over (N, C, H, W)
    "mobilenet_v3_small": {"mul": "mul", "mul_1": "mul", "mul_2": "mul"},
    # the channel shuffle's transpose moves data; the views and pieces after it follow it
    "shufflenet_v2": dict([("transpose%s" % s, "transpose") for s in ("", "_1", "_2", "_3")]
                          + [("view%s" % s, "view") for s in ("", "_1", "_2", "_3", "_4", "_5", "_6", "_7")]
                          + [("chunk", "chunk"), ("chunk_1", "chunk")]
                          + [("getitem_%d" % i, "getitem") for i in (4, 5, 14, 15)]),
    # a ReLU after an unfused (pre-activation) BatchNorm has nothing to fuse into
    "densenet_block": {"relu": "relu", "relu_2": "relu", "relu_4": "relu", "transition_1": "relu"},
    "mlp": {"net_2": "relu"},
}


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("corpus"))
    script = os.path.join(SUPPORT, "corpus_models.py")
    for which in ("calib", "test"):
        proc = subprocess.run([sys.executable, script, which, out], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True)
        assert proc.returncode == 0, proc.stdout[-3000:]
    return out


@pytest.mark.parametrize("name", NAMES)
def test_corpus_calib_and_test_in_separate_processes(name, phases):
    folder = os.path.join(phases, name)
    info = qi.read_quant_info(folder)
    assert info["param"] and info["output"] and info["bias_corrected"]
    outputs = [np.load(os.path.join(folder, "y_%d.npy" % j)) for j in range(N_OUTPUTS.get(name, 1))]
    model = corpus.make_model(name)
    with torch.no_grad():
        ref = model(*corpus.make_inputs(name, 4, 3))
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert [o.shape for o in outputs] == [tuple(r.shape) for r in ref]
    for o, r in zip(outputs, ref):
        assert np.isfinite(o).all()
        # quantized, not float: the outputs differ from the float model, but not by much
        assert not np.array_equal(o, r.numpy())
        scale = float(r.abs().max())
        assert float(np.abs(o - r.numpy()).max()) < 0.5 * scale + 0.1


@pytest.mark.parametrize("name", NAMES)
def test_corpus_exact_onnx_equals_the_simulation(name, phases):
    pytest.importorskip("onnxruntime")
    folder = os.path.join(phases, name)
    got = corpus.exact_onnx_outputs(folder, corpus.make_inputs(name, 4, 3))
    assert len(got) == N_OUTPUTS.get(name, 1)
    for j, g in enumerate(got):
        expected = np.load(os.path.join(folder, "y_%d.npy" % j))
        assert np.array_equal(g.view(np.int32), expected.view(np.int32)), j


@pytest.mark.parametrize("name", NAMES)
def test_corpus_xmodel_is_written_checked_and_reproduces_the_simulation(name, phases):
    """export_xmodel in the test phase wrote the file only after running it against the simulation
    (outputs and intermediate ops, bit for bit); here it is read back, checked again, and run on a
    batch-1 input the export did not see."""
    report = corpus.rerun_xmodel(os.path.join(phases, name), corpus, name)
    assert report["elements"] > 0 and report["mismatches"] == 0 and report["nodes_differing"] == []
    assert report["nodes_compared"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_corpus_equals_the_real_quantizer(name, phases):
    """The real quantizer (pytorch_nndct 3.5) ran the same two phases on the same seeded models and
    data (tests/data/README.md): quant_info.json, the test-mode outputs (bit for bit) and the xmodel
    must be the ones it wrote."""
    real = os.path.join(REAL, name)
    with open(os.path.join(real, "seeded.sha256")) as f:
        assert corpus.seeded_sha256(name) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from (torch's random streams changed?)"
    folder = os.path.join(phases, name)
    mine, theirs = qi.read_quant_info(folder), qi.read_quant_info(real)
    for key in ("param", "output", "input"):
        assert mine[key] == theirs[key], key
    for j in range(N_OUTPUTS.get(name, 1)):
        got, want = np.load(os.path.join(folder, "y_%d.npy" % j)), np.load(os.path.join(real, "y_%d.npy" % j))
        assert got.dtype == want.dtype and np.array_equal(got.view(np.int32), want.view(np.int32)), j
    xmodel = [f for f in os.listdir(real) if f.endswith("_int.xmodel")][0]
    assert_same_xmodel(os.path.join(folder, "xmodel", xmodel), os.path.join(real, xmodel))


@pytest.mark.parametrize("name", NAMES)
def test_corpus_inspect_cpu_nodes_are_the_float_operators(name):
    """inspect puts every float operator of the simulation on the CPU, and nothing else except
    what the target's hardware cannot run (HARDWARE_CPU); no op is unknown to it."""
    model = corpus.make_model(name)
    example = corpus.make_inputs(name, 1, 1)
    inspection = inspect_model(model, tuple(example) if len(example) > 1 else example[0], corpus.TARGET)
    graph = capture(model, tuple(example), load_quant_config(None).rewrites())
    float_ops = {n.fx_node.name for n in graph.float_operators()}
    cpu = {n.name: n for n in inspection.nodes if n.device == "CPU"}
    assert float_ops <= set(cpu)
    assert {k: cpu[k].op for k in set(cpu) - float_ops} == HARDWARE_CPU.get(name, {})
    assert not [n.name for n in inspection.nodes if any("operator table" in r for r in n.reasons)]
