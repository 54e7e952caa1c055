"""Helpers shared by the tests: the repository and data folders, child processes, the digits case.

The other modules here are the tests' models, corpora and the scripts tests run in child processes
(by path: ``os.path.join(SUPPORT, "<name>.py")``); they import each other as ``tests.support.<name>``.
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import yaml

SUPPORT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(SUPPORT))
DATA = os.path.join(REPO, "tests", "data")

# The torch every stored real-quantizer reference was made with (tests/data/README.md).
REFERENCE_TORCH = "2.13.0"


def torch_line_of_references(version=None):
    """True when torch ``version`` (this torch's by default) is of the references' major version
    (``REFERENCE_TORCH``): it numbers ``torch.jit`` trace values as they were numbered, and its float
    kernels are the references' (tests/support/xmodel_compare.py, test_segmentation_fidelity.py say
    what differs under torch 1.13, the Vitis AI 3.5 image's, and how they compare there)."""
    import torch
    version = version or torch.__version__
    return version.split(".")[0] == REFERENCE_TORCH.split(".")[0]


def pinned_threads(reference):
    """The torch thread count a bit-exact test runs at: ``reference`` (the setting its reference was
    made with), or ``PIPELINE_TEST_THREADS`` where set (test_isa_fidelity reruns the golden tests at
    1 and 2 threads: the simulation's bits must not depend on it)."""
    return int(os.environ.get("PIPELINE_TEST_THREADS", reference))


def python(*args, cwd=REPO):
    """``python *args`` in a child process (the repository as working folder); text output captured."""
    return subprocess.run([sys.executable] + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)


def cli(*args):
    """``python -m pipeline *args`` in a child process, as users run it."""
    return python("-m", "pipeline", *args)


def cli_in_process(capsys, *argv):
    """``pipeline.cli.main(argv)`` in this process: (exit code, stdout, stderr), after asserting that neither
    holds a Python traceback (the commands answer bad input with a message)."""
    from pipeline.cli import main
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def cli_json(capsys, *argv):
    """``cli_in_process`` with ``--json``: (exit code, the parsed output)."""
    code, out, _ = cli_in_process(capsys, *(list(argv) + ["--json"]))
    return code, json.loads(out)


def file_tree(folder):
    """``{path relative to folder, with '/': bytes}`` of every file under ``folder``."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")] = f.read()
    return out


def sha(path):
    """sha256 (hex) of the file at ``path``."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def digits_u8():
    """scikit-learn's digits, unshuffled, as the ``digits`` source decodes them: images uint8 NHWC
    (1797, 8, 8, 1) in 0..255 and labels int64."""
    from sklearn.datasets import load_digits
    d = load_digits()
    return np.round(d.images * 255 / 16).astype(np.uint8).reshape(-1, 8, 8, 1), d.target.astype(np.int64)


def make_case(tmp_path, images=None, labels=None, **sections):
    """A config on an .npy source in tmp_path (relative paths), the first 400 digits by default;
    ``sections`` update the config's sections. Returns (config path, images .npy path)."""
    if images is None:
        images, labels = digits_u8()
        images, labels = images[:400], labels[:400]
    np.save(str(tmp_path / "images.npy"), images)
    np.save(str(tmp_path / "labels.npy"), labels)
    raw = {
        "run": {"name": "case", "work_dir": str(tmp_path / "run")},
        "data": {"source": {"type": "npy", "path": "images.npy", "labels": "labels.npy", "layout": "NHWC"},
                 "batch_size": 50},
        "preprocess": {"stages": [{"type": "layout", "src": "NHWC", "dst": "NCHW"}], "mean": [77.85], "std": [95.85]},
        "model": {"zoo": "digits_cnn", "train": {"epochs": 2}},
        "quantizer": {"max_accuracy_drop": 1.0},
    }
    for key, value in sections.items():
        raw.setdefault(key, {}).update(value)
    cfg = tmp_path / "case.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    return str(cfg), str(tmp_path / "images.npy")


ARTIFACTS_EXCLUDED = ("steps/", "config.resolved.yaml")


def artifact_hashes(work):
    """``{path: sha256}`` of the run folder's artifacts as report.json lists them, less the per-run records."""
    with open(os.path.join(work, "report.json")) as f:
        return {a["path"]: a["sha256"] for a in json.load(f)["artifacts"] if not a["path"].startswith(ARTIFACTS_EXCLUDED)}
