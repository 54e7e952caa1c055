"""scripts/compare_environments.py's rules (CI runs the script itself on the main job of the two
environments): what may differ between two environments' run folders, and that anything else is seen."""
import importlib.util
import json
import os
import re
import shutil

import torch

from pipeline.fileio import sha256_file
from tests.support import DATA, REPO
from tests.support import xmodel_compare

REFERENCE = os.path.join(DATA, "golden_xmodel", "golden", "mlp", "default", "xmodel", "MLP_int.xmodel")


def _script():
    spec = importlib.util.spec_from_file_location("compare_environments",
                                                  os.path.join(REPO, "scripts", "compare_environments.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _folder(root, xmodel_bytes, bias, accuracy=0.9852):
    """A run folder holding what the rules read: an xmodel, quant_info.json, bias_corr.pth, the deploy
    checksums, a fingerprint, report.json with the compared results, and a record that is not compared."""
    for sub in ("export", "quantize_result", "deploy/net", "steps"):
        os.makedirs(os.path.join(root, sub))
    with open(os.path.join(root, "export", "MLP_int.xmodel"), "wb") as f:
        f.write(xmodel_bytes)
    shutil.copy(os.path.join(root, "export", "MLP_int.xmodel"), os.path.join(root, "deploy", "net"))
    with open(os.path.join(root, "quantize_result", "quant_info.json"), "w") as f:
        json.dump({"param": {"MLP::fc1.weight": [[8, 7]]}}, f)
    torch.save({"MLP::nndct_dense_1": bias}, os.path.join(root, "quantize_result", "bias_corr.pth"))
    with open(os.path.join(root, "quantize_result", "calib_fingerprint.json"), "w") as f:
        json.dump({"target": "DPUCZDX8G_ISA1_B4096", "torch_version": torch.__version__, "graph_hash": root}, f)
    with open(os.path.join(root, "deploy", "net", "SHA256SUMS"), "w") as f:
        f.write("%s  MLP_int.xmodel\n" % sha256_file(os.path.join(root, "deploy", "net", "MLP_int.xmodel")))
    with open(os.path.join(root, "steps", "test.json"), "w") as f:
        f.write(root)  # a record: times and paths, never compared as a file
    steps = {"test": {"float_accuracy": accuracy, "quant_accuracy": accuracy}, "export": {"agreement": {}},
             "calib": {"ledger": {"copies_per_batch": 1}}}
    with open(os.path.join(root, "report.json"), "w") as f:
        json.dump({"steps": steps}, f)


def _renumbered(graph):
    """``graph`` as another torch's trace names it: every number in every op name plus 2."""
    names = [re.sub(r"[0-9]+", lambda m: str(int(m.group()) + 2), n) for n in xmodel_compare.op_names(graph)]
    return xmodel_compare.rename_ops(graph, names)


def _verdicts(tmp_path, other_graph=None, other_bias=None, accuracy=0.9852):
    script = _script()
    reference = xmodel_compare.load(REFERENCE)
    _folder(str(tmp_path / "this"), reference.SerializeToString(), [0.001, -0.002])
    other = other_graph if other_graph is not None else _renumbered(xmodel_compare.load(REFERENCE))
    _folder(str(tmp_path / "other"), other.SerializeToString(), other_bias or [0.001 + 3e-8, -0.002], accuracy)
    return {rel: verdict for rel, _, verdict in script.compare(str(tmp_path / "this"), str(tmp_path / "other"))}


def test_another_torchs_numbering_float_bits_versions_and_digests_are_what_may_differ(tmp_path):
    verdicts = _verdicts(tmp_path)
    assert verdicts == dict.fromkeys(["export/MLP_int.xmodel", "deploy/net/MLP_int.xmodel", "quantize_result/quant_info.json",
                                      "quantize_result/bias_corr.pth", "quantize_result/calib_fingerprint.json",
                                      "deploy/net/SHA256SUMS", "report.json: accuracy, agreement, ledger"])


def test_a_changed_constant_a_changed_correction_or_accuracy_is_seen(tmp_path):
    graph = _renumbered(xmodel_compare.load(REFERENCE))
    const = next(op for op in graph.op_node if op.op_type == "const")
    data = bytearray(const.op_attr["data"].bytes_value.value)
    data[0] ^= 1
    const.op_attr["data"].bytes_value.value = bytes(data)
    verdicts = _verdicts(tmp_path, other_graph=graph, other_bias=[0.001 + 1e-3, -0.002], accuracy=0.9870)
    assert verdicts["export/MLP_int.xmodel"].startswith("op ") and "differs" in verdicts["export/MLP_int.xmodel"]
    assert verdicts["quantize_result/bias_corr.pth"] == "a correction differs by 0.001 > 1e-06"
    assert verdicts["report.json: accuracy, agreement, ledger"] is not None
    assert verdicts["deploy/net/SHA256SUMS"] is None  # its digest is exchanged; the file itself is judged above
