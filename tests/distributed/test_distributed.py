"""Calibration and evaluation under torchrun give one process's bits; a dead rank fails every rank cleanly.

The end-to-end tests launch ``python -m torch.distributed.run --standalone`` (free ports) with 2
ranks on the digits source and the digits CNN (seeded, untrained weights saved to a file: the
comparison needs identical weights, not good ones), a few batches each, under a timeout.
"""
import json
import os
import subprocess
import sys
import time

import pytest
import torch

from tests.support import REPO, SUPPORT

from tests.support import dist_api_helper
import pipeline

from pipeline import distributed
from pipeline.checks import InputStats
from pipeline.models.loading import build_model
from pipeline.quantizers.quant_info import read_bias_corr

TIMEOUT = 120
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)

CONFIG = """
run: {name: dist, seed: 0, num_threads: 1, distributed_timeout_s: 30}
data:
  source: {type: digits, seed: 0}
  split: {train: 0.6, calib: 0.1, eval: 0.3}
  batch_size: 16
  calib_batches: 9           # odd: rank 0 calibrates 5 batches, rank 1 four; a bias stops mid-round
  eval_batches: 3
preprocess:
  stages:
    - {type: layout, src: NHWC, dst: NCHW}
  mean: [77.85]
  std: [95.85]
  layout: NCHW
model:
  zoo: digits_cnn
  weights: %s
quantizer: {backend: sim, bitwidth: 8, max_accuracy_drop: 1.0, require_float_above_chance: false}  # untrained
compile: {target: DPUCZDX8G_ISA1_B4096}
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dist")
    torch.manual_seed(0)
    weights = str(folder / "float.pt")
    torch.save(build_model("digits_cnn", None, {}).state_dict(), weights)
    path = str(folder / "dist.yaml")
    with open(path, "w") as f:
        f.write(CONFIG % weights)
    return path


def launch(config, work, *extra):
    """Run calib,test under torchrun, 2 ranks (``python -m torch.distributed.run``: no PATH lookup) in a child;
    returns (process, seconds)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "-m", "pipeline", "run", config, "--steps", "calib,test", "-q", "--set", "run.work_dir=" + work] + list(extra)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    return proc, time.monotonic() - start


def step(work, name):
    with open(os.path.join(work, "steps", name + ".json")) as f:
        return json.load(f)


@pytest.mark.slow
def test_two_ranks_give_one_process_bits_with_an_odd_batch_count(config, tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    pipeline.run(config, steps=["calib", "test"], overrides=["run.work_dir=" + one])  # one process, in this one
    proc, _ = launch(config, two, "--set", "model.zoo=null",
                     "--set", "model.factory=tests.support.dist_helpers:digits_cnn_reporting_mid_round_stops")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bias correction stopped mid-round" in proc.stderr  # the data exercise that path too
    with open(os.path.join(one, "quantize_result", "quant_info.json"), "rb") as a, \
            open(os.path.join(two, "quantize_result", "quant_info.json"), "rb") as b:
        assert a.read() == b.read()
    corr_one = read_bias_corr(os.path.join(one, "quantize_result"))
    corr_two = read_bias_corr(os.path.join(two, "quantize_result"))
    assert list(corr_one) == list(corr_two) and corr_one
    for name in corr_one:
        assert torch.equal(corr_one[name], corr_two[name]), name
    c1, c2 = step(one, "calib"), step(two, "calib")
    assert c1["batches"] == c2["batches"] == 9
    assert c1["input_stats"] == c2["input_stats"]
    assert c2["distributed"]["world_size"] == 2
    # each rank's ledger: its own batches (5 and 4), one boundary copy each
    assert [r["batches"] for r in c2["distributed"]["ledger_by_rank"]] == [5, 4]
    assert all(r["copies_per_batch"] == 1 for r in c2["distributed"]["ledger_by_rank"])
    t1, t2 = step(one, "test"), step(two, "test")
    for key in ("float_accuracy", "quant_accuracy", "eval_images", "sensitivity"):
        assert t1[key] == t2[key], key
    assert t2["eval_images"] == 48
    with open(os.path.join(two, "status.json")) as f:
        assert json.load(f)["state"] == "ok"


@pytest.mark.slow
def test_a_killed_rank_fails_the_others_cleanly_and_leaves_no_calibration(config, tmp_path):
    work = str(tmp_path / "killed")
    proc, seconds = launch(config, work, "--set", "model.zoo=null",
                           "--set", "model.factory=tests.support.dist_helpers:digits_cnn_rank1_dies")
    assert proc.returncode != 0
    assert seconds < 30 + 30  # run.distributed_timeout_s, plus a margin for starting three Pythons
    assert "error (rank 0): rank 0 of 2: " in proc.stderr, proc.stderr[-3000:]
    assert "rank 1 (pid" in proc.stderr and "exited or was killed" in proc.stderr
    assert not os.path.exists(os.path.join(work, "quantize_result"))
    assert not os.path.exists(os.path.join(work, "steps", "calib.json"))
    with open(os.path.join(work, "status.json")) as f:
        status = json.load(f)
    assert status["state"] == "failed" and status["step"] == "calib"
    assert "rank 1" in status["error"] and "DistributedError" in status["error"]


@pytest.mark.slow
def test_drop_in_api_calib_forwards_on_two_ranks_combine_into_one_calibration(tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    helper = os.path.join(SUPPORT, "dist_api_helper.py")
    dist_api_helper.main(one)  # one process, in this one
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           helper, two], env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote " + os.path.join(two, "quant_info.json")) == 2  # both ranks return the path
    with open(os.path.join(one, "quant_info.json"), "rb") as a, open(os.path.join(two, "quant_info.json"), "rb") as b:
        assert a.read() == b.read()
    corr_one, corr_two = read_bias_corr(one), read_bias_corr(two)
    assert list(corr_one) == list(corr_two)
    assert all(torch.equal(corr_one[k], corr_two[k]) for k in corr_one)


def test_interleave_puts_rank_shards_back_in_batch_order():
    # 7 batches on 3 ranks: rank r holds batches r, r+3, r+6
    by_rank = [[0, 3, 6], [1, 4], [2, 5]]
    assert distributed.Comm.interleave(by_rank) == list(range(7))
    assert distributed.Comm.interleave([[], []]) == []


class _LocalComm:
    """A stand-in for several ranks in one process: gather_ordered returns the shards it was given."""

    def __init__(self, shards):
        self.shards = shards

    def gather_ordered(self, local):
        return distributed.Comm.interleave(self.shards)


def test_input_stats_merged_in_batch_order_equal_one_process():
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(3, 2, 4, 4, generator=g) * 10 ** k for k in range(5)]
    one = InputStats()
    for x in batches:
        one.add(x)
    ranks = [InputStats().defer() for _ in range(2)]
    for i, x in enumerate(batches):
        ranks[i % 2].add(x)
    merged = InputStats()
    merged.merge_ordered(_LocalComm([r._deferred for r in ranks]))
    assert merged.n == one.n
    assert torch.equal(merged.total, one.total) and torch.equal(merged.total_sq, one.total_sq)
    assert torch.equal(merged.cmin, one.cmin) and torch.equal(merged.cmax, one.cmax)


def test_a_failed_rank_is_named_from_the_store():
    store = torch.distributed.HashStore()
    comm = distributed.Comm(0, 3, store)
    comm.context = "calibration round 2"
    other = distributed.Comm(1, 3, store)
    other.post_failure(ValueError("bad batch"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    distributed.comm.post(store, "pipeline/pid/2", "%s %d" % (__import__("socket").gethostname(), dead.pid))
    message = comm.lost_message(RuntimeError("Connection closed by peer"))
    assert message.startswith("rank 0 of 3: calibration round 2 stopped")
    assert "rank 1 failed: ValueError: bad batch" in message
    assert "rank 2 (pid %d) exited or was killed" % dead.pid in message


def test_no_process_group_means_one_process():
    assert distributed.current() is None
    assert distributed.init_from_env() is None  # WORLD_SIZE unset


def test_the_nndct_backend_refuses_a_distributed_run(monkeypatch, tmp_path):
    from pipeline.runner import driver as runner
    from pipeline.config import load_config
    from pipeline.errors import ConfigError
    posted = []

    class TwoRanks(distributed.Comm):
        def post_failure(self, exc):
            posted.append(exc)

    monkeypatch.setattr(distributed, "init_from_env", lambda timeout_s: TwoRanks(0, 2))
    loaded = load_config(os.path.join(REPO, "configs", "digits_sim_zcu102.yaml"),
                         ["quantizer.backend=nndct", "export.formats=[xmodel]", "run.work_dir=" + str(tmp_path / "run")])
    with pytest.raises(ConfigError, match=r"backend nndct cannot run under torchrun .2 processes.: it keeps "
                                          r"process-global state; .*over the ranks \(sim\)"):
        runner.run_steps(loaded, ["calib", "test"])
    assert len(posted) == 1 and not os.path.exists(str(tmp_path / "run"))


def test_a_calib_step_failing_after_the_quantizer_wrote_leaves_no_quantize_result(config, tmp_path, monkeypatch):
    # as when a rank fails in the last collectives of a torchrun calibration, after rank 0 wrote quant_info.json
    from pipeline.errors import DistributedError
    from pipeline.quantizers import fingerprint
    work = str(tmp_path / "run")

    def lost(out_dir, fp):
        assert os.path.isfile(os.path.join(out_dir, "quant_info.json"))
        raise DistributedError("rank 0 of 2: rank 1 failed")

    monkeypatch.setattr(fingerprint, "write_fingerprint", lost)
    with pytest.raises(DistributedError, match="rank 1 failed"):
        pipeline.run(config, steps=["calib"], overrides=["run.work_dir=" + work])
    assert not os.path.exists(os.path.join(work, "quantize_result"))
    with open(os.path.join(work, "status.json")) as f:
        assert json.load(f)["state"] == "failed"
