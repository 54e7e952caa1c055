"""scripts/bench_preprocess.py checks every method's output against the float32 definition before
timing it: the script must run, and a method that computes something else must stop it (correctness
only; the timings are the script's business)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.support import REPO

SCRIPT = os.path.join(REPO, "scripts", "bench_preprocess.py")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_preprocess", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_runs_checks_and_prints_every_alternative(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--batches", "1,8", "--sizes", "32", "--threads", "1",
                           "--rounds", "2", "--json", str(out)], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| batch"))
    names = ["boundary", "pipeline", "pipeline-torch", "expert torch"]
    try:
        import cv2  # noqa: F401  (the dev extra installs it)
        names += ["cv2 blob", "cv2.split+numpy"]
    except ImportError:
        pass
    names += ["per-image ToTensor", "limit"]
    assert [c.strip() for c in header.strip().strip("|").split("|")] == ["batch", "cast ms"] + names
    results = json.loads(out.read_text())["results"]
    assert [(r["batch"], r["size"]) for r in results] == [(1, 32), (8, 32)]
    assert all(r["copies_per_batch"] == 1 and r["allocated_over_output"] == 1 for r in results)
    assert all(sorted(r["ratios_to_cast"]) == sorted(names) and min(r["ratios_to_cast"].values()) > 0
               for r in results)


def test_a_method_that_disagrees_with_the_definition_stops_the_benchmark():
    bench = _bench()
    threads = torch.get_num_threads()
    try:
        fns, images, _ = bench.methods_for(2, 32)
        fns["expert torch"] = lambda: torch.zeros(2, 3, 32, 32)
        with pytest.raises(SystemExit, match="expert torch disagrees with the definition"):
            bench.check(fns, images)
    finally:
        torch.set_num_threads(threads)
