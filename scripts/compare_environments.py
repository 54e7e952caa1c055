"""The main job's artifacts in another environment against this one's, for the same trained weights.

CI runs it with the Vitis AI 3.5 image's environment (Python 3.8, torch 1.13.1: ``.venv-image``)
against the pinned one (Python 3.11, torch 2.13.0: ``.venv``); any two environments work:

    python scripts/compare_environments.py --other .venv-image/bin/python [--config CONFIG] [--work DIR]

1. This environment runs the config's train step once (``DIR/trained``); its ``model/float.pt`` is
   the weights both sides use (training itself is not compared: its float sums follow each torch's
   kernels, README "What the main job does").
2. Each environment runs ``calib,test,export,compile,deploy`` with ``model.weights`` set to them, in
   the same folder ``DIR/run`` (so the paths written into the files are the same), moved afterwards to
   ``DIR/this`` and ``DIR/other``.
3. Every artifact of the two run folders is compared: byte for byte, except where a stated rule says
   what may differ and why:

   - ``*.xmodel``: op and tensor names follow torch's trace numbering (``..._ret_3`` under torch 2.13,
     ``..._ret_5`` under torch 1.13); the files must hold the same graph once each op is renamed by its
     position, and each name must equal the other's except for its runs of digits;
   - ``bias_corr.pth``: each correction is a float mean of the float model's outputs, whose last bits
     follow each torch's kernels (the real quantizer's own runs differ so), and torch.save's zip layout
     differs between torch releases: the same keys in order and lengths, each value within 1e-6 of the
     other's (measured: 3e-8); what the corrections decide (the quantized biases in the xmodel,
     quant_info.json, the outputs) is compared exactly below;
   - ``calib_fingerprint.json``: equal except ``torch_version`` and ``graph_hash`` (the graph's node
     names follow the trace numbering too);
   - ``calib_manifest.json``, ``SHA256SUMS``, ``deploy/manifest.json``: equal once the digests of the
     files compared by a rule above are exchanged for the other side's;
   - the run's own records (``steps/*.json``, ``report.*``, ``status.json``, ``plots/*.png``, the
     lock and the mark) hold times, versions and plots drawn by each matplotlib: not compared as
     files; the results they carry are: float and quantized accuracy, the ONNX and xmodel agreement,
     copies per batch.

Prints one line per artifact and exits 0 when all agree, 1 otherwise.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from pipeline.fileio import sha256_file  # noqa: E402

STEPS = "calib,test,export,compile,deploy"
RECORDS = re.compile(r"^(steps/.*|report\.(json|md|html)|status\.json|plots/.*|\.pipeline-run|\.pipeline\.lock)$")
DIGEST_FILES = re.compile(r"(^|/)(calib_manifest\.json|SHA256SUMS|manifest\.json)$")


def _run(python, config, work, *args):
    argv = [python, os.path.join(REPO, "scripts", "run_pipeline.py"), config, "--set", "run.work_dir=%s" % work]
    proc = subprocess.run(argv + list(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        raise SystemExit("%s failed (exit %d):\n%s" % (" ".join(argv + list(args)), proc.returncode, proc.stdout[-3000:]))


def _files(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root)] = path
    return out


def _same_xmodel(a, b):
    """None when the two files hold the same graph up to the trace's numbering (the tests' one rule,
    tests/support/xmodel_compare.py: names equal but for their runs of digits, then the graphs equal
    once ``a``'s ops carry ``b``'s names by position), else what differs."""
    from pipeline.xir import schema
    from tests.support import xmodel_compare
    mine, theirs = xmodel_compare.load(a), xmodel_compare.load(b)
    names = xmodel_compare.op_names(theirs)
    wrong = xmodel_compare.names_differ_only_in_numbers(xmodel_compare.op_names(mine), names)
    if wrong:
        return "; ".join(wrong[:3])
    xmodel_compare.rename_ops(mine, names)
    return None if schema.canonical(mine) == schema.canonical(theirs) else "; ".join(
        xmodel_compare.differences(mine, theirs)[:3])


BIAS_CORR_TOLERANCE = 1e-6


def _same_bias_correction(a, b):
    """The same keys in order and lengths; each value within BIAS_CORR_TOLERANCE of the other's."""
    import torch
    x, y = torch.load(a), torch.load(b)
    if list(x) != list(y):
        return "keys %s against %s" % (list(x), list(y))
    worst = 0.0
    for k in x:
        u, v = torch.as_tensor(x[k], dtype=torch.float64), torch.as_tensor(y[k], dtype=torch.float64)
        if u.shape != v.shape:
            return "%s: shape %s against %s" % (k, tuple(u.shape), tuple(v.shape))
        worst = max(worst, float((u - v).abs().max()) if u.numel() else 0.0)
    return None if worst <= BIAS_CORR_TOLERANCE else "a correction differs by %g > %g" % (worst, BIAS_CORR_TOLERANCE)


def _same_fingerprint(a, b):
    docs = []
    for path in (a, b):
        with open(path) as f:
            doc = json.load(f)
        docs.append({k: v for k, v in doc.items() if k not in ("torch_version", "graph_hash")})
    return None if docs[0] == docs[1] else "fields other than torch_version and graph_hash differ"


def _results(root):
    with open(os.path.join(root, "report.json")) as f:
        report = json.load(f)
    steps = report["steps"]
    return {"float_accuracy": steps["test"]["float_accuracy"], "quant_accuracy": steps["test"]["quant_accuracy"],
            "agreement": steps["export"]["agreement"] if "agreement" in steps["export"] else None,
            "ledger": steps["calib"].get("ledger")}


def compare(this, other):
    """[(artifact, how it was compared, verdict or None)]: None where the two agree."""
    mine, theirs = _files(this), _files(other)
    rows = [(p, "presence", "only in %s" % ("this run" if p in mine else "the other run"))
            for p in sorted(set(mine) ^ set(theirs)) if not RECORDS.match(p)]
    exchanged = {}
    ruled = {".xmodel": _same_xmodel, ".pth": _same_bias_correction}
    for rel in sorted(set(mine) & set(theirs)):
        a, b = mine[rel], theirs[rel]
        if RECORDS.match(rel) or DIGEST_FILES.search(rel):
            continue
        rule = ruled.get(os.path.splitext(rel)[1]) or (_same_fingerprint if rel.endswith("calib_fingerprint.json")
                                                      else None)
        digest_a, digest_b = sha256_file(a), sha256_file(b)
        if digest_a == digest_b:
            rows.append((rel, "bytes", None))
        elif rule is None:
            rows.append((rel, "bytes", "the bytes differ"))
        else:
            rows.append((rel, rule.__name__.strip("_").replace("_", " "), rule(a, b)))
            exchanged[digest_a] = digest_b
    for rel in sorted(set(mine) & set(theirs)):
        if DIGEST_FILES.search(rel) and not RECORDS.match(rel):
            with open(mine[rel]) as f:
                text = f.read()
            for old, new in exchanged.items():
                text = text.replace(old, new)
            with open(theirs[rel]) as f:
                rows.append((rel, "digests exchanged", None if text == f.read() else
                             "differs beyond the digests of the files above"))
            exchanged[sha256_file(mine[rel])] = sha256_file(theirs[rel])  # manifest.json lists SHA256SUMS's digest
    a, b = _results(this), _results(other)
    rows.append(("report.json: accuracy, agreement, ledger", "values", None if a == b else "%s against %s" % (a, b)))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, help="the other environment's python")
    parser.add_argument("--config", default=os.path.join("configs", "digits_sim_zcu102.yaml"))
    parser.add_argument("--work", default=os.path.join(REPO, "runs", "compare-environments"),
                        help="working folder (made anew)")
    args = parser.parse_args(argv)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    trained = os.path.join(work, "trained")
    _run(sys.executable, args.config, trained, "--steps", "train")
    weights = os.path.join(trained, "model", "float.pt")
    run = os.path.join(work, "run")
    for label, python in (("this", sys.executable), ("other", args.other)):
        _run(python, args.config, run, "--steps", STEPS, "--set", "model.weights=%s" % weights)
        os.rename(run, os.path.join(work, label))
    versions = [subprocess.run([p, "-c", "import platform, torch; print('Python', platform.python_version(), "
                                "'torch', torch.__version__)"], stdout=subprocess.PIPE, universal_newlines=True
                               ).stdout.strip() for p in (sys.executable, args.other)]
    print("this: %s; other: %s; weights %s (sha256 %s)"
          % (versions[0], versions[1], weights, sha256_file(weights)[:16]))
    rows = compare(os.path.join(work, "this"), os.path.join(work, "other"))
    for rel, how, verdict in rows:
        print("%-52s %-18s %s" % (rel, how, "same" if verdict is None else "DIFFERS: %s" % verdict))
    bad = sum(1 for _, _, v in rows if v is not None)
    print("%d of %d artifacts agree" % (len(rows) - bad, len(rows)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
