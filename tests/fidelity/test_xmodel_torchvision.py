"""The torchvision families' xmodels (tests/support/corpus_torchvision.py, default config) against the real
quantizer's: the drop-in's two phases (``corpus_models.phase``: calibration, then in a new process test mode
and ``export_xmodel``) and the real quantizer's same two phases (tests/data/README.md, corpus_real/tv_*)
must give the same graph: ops, names, order, attributes, constants, fix positions and shapes.

The real files (0.3 to 28 MB) are not stored; each family's ``xmodel/`` holds the sha256 of the real
file's canonical message and its structural summary (tests/support/xmodel_digest.py). Equal hashes are
the verdict; on unequal ones the summaries say where the files first part (op, field, ours, real).

Op names follow the torch that traced (docs/xmodel.md#names): under a torch of another major version than
the references' (torch 1.13, the Vitis AI 3.5 image) the simulation's ops are compared by
tests/support/xmodel_compare.py's rule: names equal up to their runs of digits, then renamed by position
to the reference's names before hashing.

The model is torchvision's source, which changes between releases: torchvision 0.14 (the torch 1.13 env's)
reshapes ShuffleNetV2's channel shuffle back with ``x.view(batchsize, -1, height, width)`` where 0.28 gives
``num_channels``, and the real quantizer writes what the model says: a ``const`` -1 for that reshape
dimension. Both files are stored (``xmodel/``: 0.28's; ``xmodel_view_minus1/``: the real quantizer on
0.28 with 0.14's ``channel_shuffle``), and the test takes the one this torchvision's source calls for.

A family whose xmodel the simulation refuses today is an expected failure naming the gap (strict: the
day its writer writes it, the test fails, XPASS or a difference, until the mark goes).
"""
import glob
import inspect
import json
import os

import pytest

from pipeline.cpu import cpu_capability
from tests.support import DATA, SUPPORT, corpus_models, pinned_threads, xmodel_compare, xmodel_digest
from tests.support import corpus_torchvision as corpus

pytestmark = [pytest.mark.slow]
corpus.require_torchvision()

REAL = os.path.join(DATA, "corpus_real")
THREADS = pinned_threads(1)
SETTING = "{}-{}".format(cpu_capability(), THREADS)


class SimulationRefuses(Exception):
    """The drop-in's export_xmodel refused the family with the expected gap (xmodel_refused.txt)."""


# family -> the gap in the simulation's xmodel writer, as its refusal says it (the real quantizer writes
# all thirteen: tests/data/README.md)
# (Swin: its shifted-window mask, assigned into a new_zeros tensor by slices: the real file writes the zeros as a
# const of zeros and each assignment as an aten::fill_ nothing reads, a file without the mask; after it, the
# attention scale (C // heads) ** -0.5 computed from sizes, aten::pow of a float)
GAPS = {
    # its relative position bias gather (nndct_index on the int64 index buffer) is written, as the real file names it
    "tv_swin": "node aten_fill__182 (aten::fill_, setitem) cannot be written: it assigns into a tensor in place "
               "(x[idx] = v): the real quantizer writes aten::fill_ as a custom op whose output no op reads",
}


def _param(name):
    if name not in GAPS:
        return name
    return pytest.param(name, marks=pytest.mark.xfail(
        strict=True, raises=SimulationRefuses,
        reason="the simulation's xmodel writer refuses it: " + GAPS[name]))


def _shuffle_views_minus_one():
    """Whether this torchvision's ShuffleNetV2 channel shuffle reshapes back with -1 (0.14) rather
    than ``num_channels`` (0.28)."""
    from torchvision.models import shufflenetv2
    return "view(batchsize, -1, height, width)" in inspect.getsource(shufflenetv2.channel_shuffle)


def reference(name):
    """The folder of the real quantizer's xmodel digest for ``name`` at this SETTING and this
    torchvision's source (skips where none)."""
    with open(os.path.join(REAL, name, "settings.json")) as f:
        folder = json.load(f)["default"].get(SETTING)
    sub = "xmodel_view_minus1" if name == "tv_shufflenet_v2" and _shuffle_views_minus_one() else "xmodel"
    ref = None if folder is None else os.path.join(REAL, name, folder, sub)
    if ref is None or not os.path.isdir(ref):
        pytest.skip("no real-quantizer xmodel for {} at {} (made at one thread; tests/data/README.md)".format(
            name, SETTING))
    return ref


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    return corpus_models.run_phases(os.path.join(SUPPORT, "corpus_torchvision.py"), tmp_path_factory.mktemp("tvx"),
                                    {"default": None}, env=dict(os.environ, PIPELINE_TEST_THREADS=str(THREADS)))


@pytest.mark.parametrize("name", [_param(n) for n in corpus.CORPUS])
def test_torchvision_xmodel_equals_the_real_quantizers(name, phases):
    with open(os.path.join(REAL, name, "seeded.sha256")) as f:
        assert corpus_models.seeded_sha256(name, corpus) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"
    ref = xmodel_digest.read(reference(name))
    folder = os.path.join(phases["default"], name)
    refused = os.path.join(folder, "xmodel_refused.txt")
    if os.path.exists(refused):
        with open(refused) as f:
            message = f.read()
        assert name in GAPS and GAPS[name] in message, "the simulation refused the xmodel: " + message
        raise SimulationRefuses(message)
    files = glob.glob(os.path.join(folder, "xmodel", "*.xmodel"))
    assert len(files) == 1, files
    mine = xmodel_compare.load(files[0])
    real_names = [op["name"] for op in ref["summary"]["ops"]]
    if not xmodel_compare.numbering_matches_references():
        problems = xmodel_compare.names_differ_only_in_numbers(xmodel_compare.op_names(mine), real_names)
        assert not problems, problems[:5] + [xmodel_compare.numbering_note()]
        xmodel_compare.rename_ops(mine, real_names)
    if xmodel_digest.canonical_sha256(mine) != ref["sha256"]:
        where = xmodel_digest.first_difference(xmodel_digest.summary(mine), ref["summary"])
        pytest.fail("%s: the xmodel differs from the real quantizer's: %s (%s)" % (
            name, where or "in a field the summary leaves out (the canonical hashes differ, the summaries not)",
            xmodel_compare.numbering_note()))
