"""scripts/bench_qat.py (QAT against PTQ, docs/performance.md#qat) runs its smallest path: the digits
CNN, a few QAT steps, one timed step; the table has its columns and exact_deploy's trained and
deployed outputs are the same bits (the figures themselves are the script's business)."""
import json
import os
import subprocess
import sys

from tests.support import REPO

SCRIPT = os.path.join(REPO, "scripts", "bench_qat.py")


def test_the_qat_benchmark_prints_its_table_and_exact_deploy_differs_nowhere(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--models", "digits8", "--digits-epochs", "1",
                           "--calib", "64", "--qat-steps", "3", "--time-steps", "1", "--time-warmup", "1",
                           "--no-memory", "--threads", "1", "--out", str(out)], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    columns = ["model", "bits", "float", "PTQ", "PTQ+FT", "QAT trainable", "QAT deployed", "QAT diff",
               "exact trainable", "exact deployed", "exact diff", "float ms", "QAT x", "exact x", "float MiB",
               "QAT MiB", "real/ours"]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| model"))
    assert [c.strip() for c in header.strip().strip("|").split("|")] == columns
    assert "threads 1" in proc.stdout and "load average" in proc.stdout
    result = json.loads(out.read_text())
    assert result["columns"] == columns
    (cells,), (row,) = result["table"], result["rows"]
    assert cells["model"] == "digits_cnn" and cells["bits"] == "8"
    assert cells["exact diff"] == "0/797" and row["exact diff"] == 0 and row["exact_max_abs_diff"] == 0.0
    assert cells["exact trainable"] == cells["exact deployed"]
    assert row["QAT_steps"] == row["exact_steps"] == 3
    assert cells["real/ours"] == "n/a (real quantizer not installed)"
    assert row["qat_step_s"] > 0 and row["float_step_s"] > 0
