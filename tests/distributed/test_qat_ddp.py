"""QAT under torchrun with 2 ranks (DDP, gloo): the warm-up thresholds are rank 0's on every rank and stay
identical after every step; without the broadcast (the real quantizer's behaviour) they start apart."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(REPO, "tests", "support", "qat_ddp_helper.py")
ENV = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")


def _run(tmp_path, *extra):
    out = str(tmp_path / "thresholds.json")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           HELPER, out] + list(extra), env=ENV, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out) as f:
        return json.load(f)


@pytest.mark.slow
def test_qat_torchrun_two_ranks_keep_thresholds_identical(tmp_path):
    rank0, rank1 = _run(tmp_path)
    assert len(rank0) == 4  # after the warm-up forward, then after each of 3 steps
    assert rank0 == rank1  # bit-identical (JSON floats round-trip float32 exactly)
    assert rank0[0] != rank0[-1]  # and they did move
    assert os.listdir(str(tmp_path)) == ["thresholds.json"]  # no shared temp folder


@pytest.mark.slow
def test_qat_torchrun_without_the_broadcast_ranks_start_apart(tmp_path):
    rank0, rank1 = _run(tmp_path, "--real-warmup")
    assert rank0[0] != rank1[0]
