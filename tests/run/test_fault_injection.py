"""Kill a calibration and an export at every file commit, then check that status.json, the report and
the drop-in test mode all tell the truth (issue 14, item 4 and the fault-injection test).

The child process replaces ``os.replace`` (every file of the pipeline reaches its final name through
it, ``pipeline.fileio``) by a wrapper that SIGKILLs the process just before the K-th rename; K runs
over every rename the step makes, so the kill lands between every pair of files.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.support.small_net import small_batches as _batches
from tests.support.small_net import small_net as _model
from tests.support import REPO, artifact_hashes, make_case, sha

from pipeline.apis import torch_quantizer
from pipeline.errors import QuantizationError
from pipeline.runner.status import read_status

KILLER = r"""
import atexit, os, signal, sys
point, calls, real = int(sys.argv[1]), [0], os.replace
def replace(src, dst):
    calls[0] += 1
    if calls[0] == point:
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
os.replace = replace
atexit.register(lambda: sys.stderr.write("\nRENAMES %d\n" % calls[0]))
"""

RUN = KILLER + r"""
from pipeline.cli import main
sys.exit(main(sys.argv[2:]))
"""

DROP_IN_CALIB = KILLER + r"""
import torch
from tests.support.small_net import small_batches as _batches
from tests.support.small_net import small_net as _model
from pipeline.apis import torch_quantizer
batches = [3.0 * x for x in _batches(seed=5)]
q = torch_quantizer("calib", _model(), (batches[0],), output_dir=sys.argv[2], device="cpu")
for b in batches:
    q.quant_model(b)
q.export_quant_config()
"""


def _child(script, point, *args):
    return subprocess.run([sys.executable, "-c", script, str(point)] + list(args), cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def _renames(proc):
    lines = [line for line in proc.stderr.splitlines() if line.startswith("RENAMES ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    return int(lines[-1].split()[1])


def _test_out(out_dir, x, model=None):
    q = torch_quantizer("test", model or _model(), (x,), output_dir=out_dir, device="cpu")
    with torch.no_grad():
        return q.quant_model(x)


def _check_report(work):
    """report.json lists only files that exist, each with its bytes' sha256 (unless the file belongs
    to an unfinished step, whose folder the next run clears)."""
    path = os.path.join(work, "report.json")
    if not os.path.isfile(path):
        return
    with open(path) as f:
        report = json.load(f)
    for row in report["artifacts"]:
        full = os.path.join(work, row["path"])
        assert os.path.isfile(full), row["path"]
        assert sha(full) == row["sha256"] or row.get("incomplete"), row["path"]


@pytest.mark.slow
def test_a_drop_in_calibration_killed_at_every_rename_is_never_used_half_written(tmp_path):
    out = str(tmp_path / "q")
    x = _batches(1)[0]
    q = torch_quantizer("calib", _model(), (_batches()[0],), output_dir=out, device="cpu")
    for b in _batches():
        q.quant_model(b)
    q.export_quant_config()  # calibration A
    out_a = _test_out(out, x)
    spare = str(tmp_path / "spare")
    shutil.copytree(out, spare)
    total = _renames(_child(DROP_IN_CALIB, 0, out))  # calibration B over A, not killed
    out_b = _test_out(out, x)
    assert not torch.equal(out_a, out_b) and total >= 4
    outcomes = set()
    for point in range(1, total + 1):
        shutil.rmtree(out)
        shutil.copytree(spare, out)
        proc = _child(DROP_IN_CALIB, point, out)
        assert proc.returncode == -9, (point, proc.stderr[-2000:])
        try:
            got = _test_out(out, x)
        except QuantizationError as exc:
            assert "interrupted while its files were written" in str(exc), (point, str(exc))
            outcomes.add("refused")
            continue
        assert torch.equal(got, out_a) or torch.equal(got, out_b), "kill before rename %d: a mixed calibration " \
                                                                   "was used" % point
        outcomes.add("a" if torch.equal(got, out_a) else "b")
    assert outcomes == {"a", "refused"}  # until the commit, A stays whole or the folder is refused


def _digits_model(work):
    from pipeline.models.loading import build_model, load_weights
    return load_weights(build_model("digits_cnn", None, {}), os.path.join(work, "model", "float.pt"))


@pytest.mark.slow
def test_a_run_killed_at_every_rename_of_calib_and_export_reports_the_truth(tmp_path):
    config, _ = make_case(tmp_path, quantizer={"max_accuracy_drop": 1.0})
    work = str(tmp_path / "run")
    assert _child(RUN, 0, "run", "--config", config, "-q").returncode == 0
    clean = artifact_hashes(work)
    model = _digits_model(work)
    example = torch.from_numpy(__import__("numpy").load(os.path.join(work, "export", "example_input.npy")))
    expect = _test_out(os.path.join(work, "quantize_result"), example, model)  # the drop-in reads the runner's
    for step in ("calib", "export"):
        total = _renames(_child(RUN, 0, "run", "--config", config, "--steps", step, "-q"))
        assert total >= 8
        for point in range(1, total + 1):
            proc = _child(RUN, point, "run", "--config", config, "--steps", step, "-q")
            assert proc.returncode == -9, (step, point, proc.stderr[-2000:])
            status = read_status(work)
            with open(os.path.join(work, "status.json")) as f:
                on_disk = json.load(f)
            if on_disk["state"] == "ok":  # killed while the final report was written: the step finished
                assert on_disk["steps"] == [step]
            else:
                assert on_disk["state"] == "running" and on_disk["step"] in (None, step), (step, point, on_disk)
                assert status["state"] == "interrupted" and status["step"] == on_disk["step"], (step, point, status)
                assert ("stopped during step %s" % step if on_disk["step"] else "before its first step") \
                    in status["error"]
            _check_report(work)
            cli = subprocess.run([sys.executable, "-m", "pipeline", "status", work, "--json"], cwd=REPO,
                                 capture_output=True, text=True)
            assert json.loads(cli.stdout)["state"] == status["state"]
            # the drop-in test mode on the run's calibration: refused, or exactly the clean one
            try:
                got = _test_out(os.path.join(work, "quantize_result"), example, model)
            except QuantizationError as exc:
                assert step == "calib", (point, str(exc))
            else:
                assert torch.equal(got, expect), (step, point)
        # the next invocation records the dead run and redoes the step; everything equals the clean run
        proc = _child(RUN, 0, "run", "--config", config, "--steps", "calib,test,export,compile,deploy", "-q")
        assert proc.returncode == 0, proc.stderr[-2000:]
        with open(os.path.join(work, "status.json")) as f:
            status = json.load(f)
        assert status["state"] == "ok" and "step" not in status
        assert artifact_hashes(work) == clean
        _check_report(work)


def test_an_early_os_error_leaves_status_failed_not_the_previous_ok(tmp_path, monkeypatch):
    from pipeline.runner.folder import RunDir
    config, _ = make_case(tmp_path)
    work = tmp_path / "run"
    pipeline_run = __import__("pipeline").run
    pipeline_run(config, steps=["train"])
    with open(str(work / "status.json")) as f:
        assert json.load(f)["state"] == "ok"

    def fails(self):  # the run's first write fails (a folder where the file belongs is refused before the run)
        raise IsADirectoryError(21, "Is a directory", self.path("config.resolved.yaml"))
    monkeypatch.setattr(RunDir, "write_resolved_config", fails)
    with pytest.raises(OSError):
        pipeline_run(config, steps=["train"])
    status = read_status(str(work))
    assert status["state"] == "failed" and "IsADirectoryError" in status["error"], status


def test_a_dead_running_run_reads_as_interrupted_and_the_next_run_records_it(tmp_path):
    config, _ = make_case(tmp_path)
    work = tmp_path / "run"
    work.mkdir()
    (work / ".pipeline-run").write_text("{}")  # the mark the killed run left with its status
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (work / "status.json").write_text(json.dumps({"state": "running", "pid": int(dead.stdout), "step": "calib",
                                                  "steps": ["calib"], "started": "2026-01-01T00:00:00+00:00",
                                                  "host": __import__("socket").gethostname()}))
    status = read_status(str(work))
    assert status["state"] == "interrupted" and status["step"] == "calib"
    assert "stopped during step calib without finishing" in status["error"]
    report = __import__("pipeline").run(config, steps=["train"])
    assert report["status"]["state"] == "ok"
    assert report["status"]["previous"] == {"pid": int(dead.stdout), "step": "calib", "steps": ["calib"],
                                            "started": "2026-01-01T00:00:00+00:00"}
