"""Distributed runs started wrongly fail fast with an error that says what to do (issue 25, "commit what you
wrote"): ranks with different configs refuse before any step, naming the first differing key and both
values; a drop-in collective that one rank never joins fails within a bounded wait (PIPELINE_COLLECTIVE_TIMEOUT_S)
saying what every rank must call, instead of waiting for gloo's 30-minute default.

Each end-to-end test launches ``python -m torch.distributed.run --standalone`` with 2 ranks on
tests/support/dist_misuse_helper.py, under a timeout.
"""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.support import REPO, SUPPORT

from pipeline.models.loading import build_model
from pipeline.runner.driver import MISSING, first_difference

HELPER = os.path.join(SUPPORT, "dist_misuse_helper.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)

CONFIG = """
run: {name: dist, seed: 0, num_threads: 1, distributed_timeout_s: 60}
data:
  source: {type: digits, seed: 0}
  split: {train: 0.6, calib: 0.1, eval: 0.3}
  batch_size: 16
  calib_batches: 4
  eval_batches: 2
preprocess:
  stages:
    - {type: layout, src: NHWC, dst: NCHW}
  mean: [77.85]
  std: [95.85]
  layout: NCHW
model:
  zoo: digits_cnn
  weights: %s
quantizer: {backend: sim, bitwidth: 8, max_accuracy_drop: 1.0, require_float_above_chance: false}
compile: {target: DPUCZDX8G_ISA1_B4096}
"""


def _torchrun(*args, env=ENV, timeout=120):
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", HELPER] + list(args)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group: a hang kills the ranks too
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), time.monotonic() - start


def test_first_difference_names_the_dotted_key_and_both_values():
    a = {"run": {"seed": 0}, "preprocess": {"mean": [77.85], "std": [95.85]}, "data": {"batch_size": 16}}
    b = {"run": {"seed": 0}, "preprocess": {"mean": [0.0], "std": [95.85]}, "data": {"batch_size": 8}}
    assert first_difference(a, b) == ("preprocess.mean[0]", 77.85, 0.0)
    assert first_difference(a, a) is None
    assert first_difference({"x": 1}, {"x": 1, "y": 2}) == ("y", MISSING, 2)
    assert first_difference({"x": [1]}, {"x": [1, 2]}) == ("x", [1], [1, 2])
    assert first_difference({"x": 1}, {"x": True}) == ("x", 1, True)


@pytest.mark.slow
def test_ranks_started_with_different_configs_refuse_before_any_step(tmp_path):
    torch.manual_seed(0)
    weights = str(tmp_path / "float.pt")
    torch.save(build_model("digits_cnn", None, {}).state_dict(), weights)
    config = str(tmp_path / "dist.yaml")
    with open(config, "w") as f:
        f.write(CONFIG % weights)
    work = str(tmp_path / "work")
    proc, _ = _torchrun("config", config, work, "preprocess.mean=[0.0]")
    assert proc.returncode != 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # every rank refuses with the same sentence (the two ranks write stderr at once: their lines may run together)
    for rank in (0, 1):
        assert "error (rank %d): the 2 ranks of this torchrun were started with different configs" % rank \
            in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("rank 1's config differs from rank 0's at preprocess.mean[0]: rank 0 has 77.85, "
                             "rank 1 has 0.0") == 2, proc.stderr[-3000:]
    assert proc.stderr.count("same --set overrides") == 2
    assert "rank 0 done" not in proc.stdout
    assert not os.path.exists(os.path.join(work, "quantize_result"))  # no step ran
    assert not os.path.exists(os.path.join(work, "steps", "calib.json"))


@pytest.mark.slow
def test_export_quant_config_on_rank_0_only_fails_within_the_bounded_wait(tmp_path):
    out = str(tmp_path / "q")
    env = dict(ENV, PIPELINE_COLLECTIVE_TIMEOUT_S="5")
    proc, seconds = _torchrun("rank0-export", out, env=env, timeout=80)
    found = re.search(r"error after ([0-9.]+) s: (\w+): (.*)", proc.stderr)
    assert found, proc.stderr[-3000:]
    waited, kind, message = float(found.group(1)), found.group(2), found.group(3)
    assert kind == "DistributedError"
    assert 5 <= waited < 5 + 15, waited  # the bound, plus the grace to name a failed rank
    assert "export_quant_config() is a collective: every rank must call it" in message
    assert "rank 1" in message and "PIPELINE_COLLECTIVE_TIMEOUT_S=5" in message
    assert seconds < 60  # not gloo's 30 minutes, nor rank 1's 90-second sleep
    assert not os.path.exists(os.path.join(out, "quant_info.json"))  # nothing written
