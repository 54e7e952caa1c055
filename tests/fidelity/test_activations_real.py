"""Activations and small torch.nn modules, against what the real quantizer does with them
(tests/data/activations_real/, tests/data/README.md; the models in tests/support/corpus_activations.py).

The real quantizer's torch.jit trace names the aten op(s) a module's forward runs (``aten_log_sigmoid_2``,
not the class name), records a Python-written functional as its ops (``nn.Softsign``: abs, add, div) and
gives some calls nndct types of their own (``nndct_mish``, ``nndct_hardtanh``, ``nndct_log_softmax``,
``nndct_neg``). Each case runs here as the reference was made (``corpus_models.phase``: calibration of two
batches of 4 and ``export_quant_config``, then test mode: a batch-1 forward, the 4 eval samples, the
exports) with the drop-in's ``torch_quantizer``, and is held to the real quantizer's ``quant_info.json``
(entries in order, graph_md5), test-mode outputs (bit for bit) and xmodel (tests/support/xmodel_compare.py).

What the simulation does not do yet is a strict xfail naming the gap (GAPS): it fails the run the day the
gap is closed, so that the mark is removed.
"""
import json
import os

import numpy as np
import pytest
import torch

from tests.support import DATA, corpus_models, pinned_threads, torch_line_of_references
from tests.support import corpus_activations as corpus
from tests.support.xmodel_compare import assert_same_xmodel

REAL = os.path.join(DATA, "activations_real")
THREADS = pinned_threads(1)

# (check, case) -> the gap. Checks: "quant_info", "outputs", "xmodel".
GAPS = {
}


# (check, case) -> the gap, under a torch of another major version than the references' (torch 1.13): the
# case's torch.nn code differs there, and so does what torch.jit records of it
_LRN_1X = ("torch 1.13's F.local_response_norm is other Python code than torch 2's (an unsqueeze where torch 2 "
           "views with three sizes): its trace has other nodes than the torch 2 reference's")
OTHER_TORCH_GAPS = {
    ("quant_info", "lrn"): _LRN_1X,
    ("xmodel", "lrn"): _LRN_1X,
}


# cases whose output is a float operator's, not quantized: torch's own float kernel's bits (torch 1.13's
# log_softmax differs from torch 2's in the last bit of some values)
FLOAT_OUTPUT = {"logsoftmax_head"}


def _cases(check, names):
    gaps = dict(GAPS)
    if not torch_line_of_references():
        gaps.update(OTHER_TORCH_GAPS)
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=gaps[(check, n)])) if (check, n) in gaps
            else n for n in names]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """Both phases of each case with the drop-in, in one folder per case; {case: refusal or None}."""
    root = str(tmp_path_factory.mktemp("activations"))
    saved = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    refused = {}
    try:
        for name in corpus.CORPUS:
            refused[name] = None
            try:
                for which in ("calib", "test"):
                    corpus_models.phase(which, root, [name], corpus=corpus)
            except Exception as e:  # a model the simulation cannot capture
                refused[name] = "%s: %s" % (type(e).__name__, e)
    finally:
        torch.set_num_threads(saved)
    return root, refused


def _json(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_seeds_make_the_reference_data(name):
    with open(os.path.join(REAL, name, "seeded.sha256")) as f:
        assert corpus.seeded_sha256(name) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"


@pytest.mark.parametrize("name", _cases("quant_info", list(corpus.CORPUS)))
def test_calibration_equals_the_real_quantizer(name, sim):
    """Every quant_info.json entry, in order, and the graph_md5."""
    root, refused = sim
    assert refused[name] is None, refused[name]
    mine, real = _json(os.path.join(root, name, "quant_info.json")), _json(os.path.join(REAL, name, "quant_info.json"))
    for key in ("param", "output", "input"):
        assert list(mine[key].items()) == list(real[key].items()), key
    assert mine["graph_md5"] == real["graph_md5"]


@pytest.mark.parametrize("name", _cases("outputs", list(corpus.CORPUS)))
def test_outputs_equal_the_real_quantizer(name, sim):
    """The test-mode outputs on the 4 eval samples, bit for bit; a float output under a torch other than the
    references' (FLOAT_OUTPUT): within one float32 step of the reference, torch's kernel being another."""
    root, refused = sim
    assert refused[name] is None, refused[name]
    got, want = np.load(os.path.join(root, name, "y_0.npy")), np.load(os.path.join(REAL, name, "y_0.npy"))
    assert got.dtype == want.dtype and got.shape == want.shape
    if name in FLOAT_OUTPUT and not torch_line_of_references():
        assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)))
    else:
        assert np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("name", _cases("xmodel", list(corpus.CORPUS)))
def test_xmodel_equals_the_real_one(name, sim):
    """The real quantizer wrote every case's xmodel; the simulation writes the same (checked against the
    simulation by the writer's interpreter run before it is written)."""
    root, refused = sim
    assert refused[name] is None, refused[name]
    folder = os.path.join(root, name)
    path = os.path.join(folder, "xmodel_refused.txt")
    if os.path.exists(path):
        with open(path) as f:
            pytest.fail("the simulation refused the xmodel: " + f.read())
    real = sorted(f for f in os.listdir(os.path.join(REAL, name)) if f.endswith(".xmodel"))
    assert real == ["%s_int.xmodel" % type(corpus.make_model(name)).__name__]
    assert sorted(os.listdir(os.path.join(folder, "xmodel"))) == real
    assert_same_xmodel(os.path.join(folder, "xmodel", real[0]), os.path.join(REAL, name, real[0]))
