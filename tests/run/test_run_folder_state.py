"""The run folder reads and adopts only its own, and reads its state files as typed, bounded data
(issue 34, items 1, 3 and 6's `status`).

- A folder without the pipeline's mark is refused with nothing changed and nothing read, whatever it
  holds: a user's folder holding status.json and steps/ is not adopted as "a run folder from before the
  mark" (before: report.md, source.json, status.json and config.resolved.yaml were overwritten, then a
  raw traceback).
- A damaged state file (truncated JSON, a list where an object is expected, a folder where a file is
  expected, a field of another type) stops the run, or `python -m pipeline status`, with one message
  naming the file, what was expected, what was found and what to do; never a traceback.
- `python -m pipeline status` speaks to people (state, step, pid, times, what to do next); `--json`
  gives status.json's content.
"""
import hashlib
import json
import os
import shutil

import pytest

from tests.support import cli, make_case

import pipeline
from pipeline.errors import PipelineError, RunFolderError


def _tree(folder):
    """``{relative path: sha256 or "<dir>"}`` of everything under ``folder``."""
    out = {}
    for root, dirs, files in os.walk(str(folder)):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), str(folder))] = "<dir>"
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.relpath(os.path.join(root, f), str(folder))] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """A run folder after train (1 epoch) and calib, made once; each test copies it."""
    base = tmp_path_factory.mktemp("calibrated")
    cfg, _ = make_case(base, model={"train": {"epochs": 1}},
                       quantizer={"max_accuracy_drop": 1.0, "require_float_above_chance": False})
    pipeline.run(cfg, steps=["train", "calib"])
    return base


def _copy(calibrated, tmp_path):
    """The calibrated case in ``tmp_path``: (config, run folder)."""
    for name in ("images.npy", "labels.npy", "case.yaml"):
        shutil.copy(str(calibrated / name), str(tmp_path / name))
    shutil.copytree(str(calibrated / "run"), str(tmp_path / "run"))
    cfg = tmp_path / "case.yaml"
    cfg.write_text(cfg.read_text().replace(str(calibrated), str(tmp_path)))
    return str(cfg), tmp_path / "run"


# ---- item 1: no adoption by shape ----------------------------------------------------------------

def test_a_users_folder_shaped_like_an_old_run_folder_is_refused_with_nothing_changed(tmp_path):
    cfg, _ = make_case(tmp_path, model={"train": {"epochs": 1}})
    mine = tmp_path / "results"
    (mine / "steps").mkdir(parents=True)
    (mine / "steps" / "train.json").write_text('{"epochs": ')        # truncated: read before, a traceback
    (mine / "status.json").write_text(json.dumps({"state": "ok", "note": "my own bookkeeping"}))
    (mine / "report.md").write_text("my report")
    (mine / "source.json").write_text("[1, 2]")
    (mine / "config.resolved.yaml").write_text("mine: true\n")
    before = _tree(mine)
    for steps in (["train"], ["calib"], ["train", "calib"]):
        with pytest.raises(RunFolderError, match="already holds files the pipeline did not write") as err:
            pipeline.run(cfg, steps=steps, overrides=["run.work_dir=" + str(mine)])
        assert "not adopted" in str(err.value) and ".pipeline-run" in str(err.value)
        assert _tree(mine) == before                                   # nothing written, no lock, no mark
    proc = cli("run", cfg, "--steps", "train", "--set", "run.work_dir=" + str(mine))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "already holds files the pipeline did not write" in proc.stderr and _tree(mine) == before


def test_a_run_folder_whose_mark_was_removed_is_refused_not_adopted(tmp_path, calibrated):
    cfg, work = _copy(calibrated, tmp_path)
    os.remove(str(work / ".pipeline-run"))
    before = _tree(work)
    with pytest.raises(RunFolderError, match="look like a run folder of a pipeline version from before the mark"):
        pipeline.run(cfg, steps=["test"])
    assert _tree(work) == before


def test_a_mark_that_is_not_the_pipelines_is_refused(tmp_path, calibrated):
    cfg, work = _copy(calibrated, tmp_path)
    (work / ".pipeline-run").write_text("not json")
    with pytest.raises(RunFolderError, match=r"\.pipeline-run: expected the pipeline's mark of a run folder"):
        pipeline.run(cfg, steps=["test"])


def test_status_refuses_a_folder_without_the_mark(tmp_path):
    (tmp_path / "steps").mkdir()
    (tmp_path / "status.json").write_text(json.dumps({"state": "ok"}))
    proc = cli("status", str(tmp_path))
    assert proc.returncode == 2 and "not a run folder" in proc.stderr and ".pipeline-run mark" in proc.stderr


# ---- item 3: typed, bounded reads with clear errors ---------------------------------------------

DAMAGE = {
    "truncated": ('{"batches": 8, "files": [', r"truncated JSON"),
    "a list": ("[1, 2, 3]", r"found a list"),
    "a field of another type": ('{"batches": "eight"}', r"whose 'batches' is an integer, found a string \(\"eight\"\)"),
    "not UTF-8": (b"\xff\xfe{}", r"bytes that are not UTF-8 text"),
    "nested too deeply": ("[" * 100000, r"nested more than 64 levels"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_step_result_names_the_file_and_the_step_to_run_again(tmp_path, calibrated, damage):
    cfg, work = _copy(calibrated, tmp_path)
    content, found = DAMAGE[damage]
    path = work / "steps" / "calib.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    before = _tree(work)
    proc = cli("run", cfg, "--steps", "test")                       # test requires calib's result
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in proc.stderr and "expected the calib step's results" in proc.stderr
    assert __import__("re").search(found, proc.stderr), proc.stderr
    assert "run the calib step again (--steps calib)" in proc.stderr
    assert _tree(work) == before                                     # refused before any work
    # what the message says works: the calib step replaces the damaged file (a warning names it)
    report = pipeline.run(cfg, steps=["calib", "test"])
    assert report["status"]["state"] == "ok"


def test_a_folder_where_a_state_file_belongs_is_named_with_the_fix(tmp_path, calibrated):
    cfg, work = _copy(calibrated, tmp_path)
    for name in ("report.md", "status.json", os.path.join("steps", "calib.json")):
        os.remove(str(work / name))
        (work / name).mkdir()
        proc = cli("run", cfg, "--steps", "calib")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "%s: expected a file the pipeline writes, found a folder; remove it" % (work / name) in proc.stderr
        os.rmdir(str(work / name))
    assert pipeline.run(cfg, steps=["calib"])["status"]["state"] == "ok"


def test_a_damaged_source_json_or_status_json_is_rewritten_by_the_next_run(tmp_path, calibrated, caplog):
    cfg, work = _copy(calibrated, tmp_path)
    (work / "source.json").write_text('{"kind": ')
    (work / "status.json").write_text('["running"]')
    report = pipeline.run(cfg, steps=["calib"])
    assert report["status"]["state"] == "ok" and report["source"]["unchanged"] is True
    assert any("source.json: expected the source's description" in r.getMessage() for r in caplog.records)


def test_a_damaged_record_of_written_files_is_ignored_and_nothing_is_removed_on_its_word(tmp_path, calibrated, caplog):
    cfg, work = _copy(calibrated, tmp_path)
    (work / "steps" / "calib.files.json").write_text(json.dumps({"files": "quantize_result"}))
    assert pipeline.run(cfg, steps=["calib"])["status"]["state"] == "ok"
    assert any("calib.files.json" in r.getMessage() and "is ignored" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("content, found", [('{"state": "ok", "pid": ', "truncated JSON"),
                                            ("[1]", "found a list"),
                                            ('{"state": 3}', "whose 'state' is a string, found an integer")])
def test_status_on_a_damaged_status_json_names_the_file_and_the_fix(tmp_path, calibrated, content, found):
    _, work = _copy(calibrated, tmp_path)
    (work / "status.json").write_text(content)
    for args in ((), ("--json",)):
        proc = cli("status", str(work), *args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "%s: expected the run's status" % (work / "status.json") in proc.stderr and found in proc.stderr
        assert "written anew by the next run" in proc.stderr


def test_a_state_file_over_the_bound_is_refused_without_reading_it(tmp_path, calibrated, monkeypatch):
    from pipeline.runner import state
    cfg, work = _copy(calibrated, tmp_path)
    monkeypatch.setattr(state, "MAX_STATE_BYTES", 100)  # the mark (83 bytes) passes, no step result does
    with pytest.raises(RunFolderError, match=r"steps/\w+\.json: expected .*found a file of \d+ bytes, more than the 100"):
        pipeline.run(cfg, steps=["test"])


# ---- item 6: status for people -------------------------------------------------------------------

def test_status_is_readable_and_json_on_request(tmp_path, calibrated):
    _, work = _copy(calibrated, tmp_path)
    proc = cli("status", str(work))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "run folder: %s" % work and lines[1] == "state: ok"
    assert lines[2].startswith("started: ") and ", finished: " in lines[2]
    assert "steps of the run: train, calib" in lines and any(line.startswith("next: ") for line in lines)
    status = json.loads(cli("status", str(work), "--json").stdout)
    assert status["state"] == "ok" and status["steps"] == ["train", "calib"]


def test_status_of_a_failed_run_says_which_steps_to_run_again(tmp_path, calibrated):
    _, work = _copy(calibrated, tmp_path)
    (work / "status.json").write_text(json.dumps({
        "state": "failed", "steps": ["train", "calib", "test", "export"], "step": "test", "pid": 12,
        "host": "h", "started": "2026-12-04T10:00:00+00:00", "finished": "2026-12-04T10:01:00+00:00",
        "error": "QuantizationError: accuracy drop 0.2 exceeds 0.01"}))
    out = cli("status", str(work)).stdout
    assert "state: failed at step test" in out and "error: QuantizationError: accuracy drop 0.2" in out
    assert "next: fix the cause above, then run the same command again with --steps test,export: the results of " \
           "the steps before test are kept" in out


def test_status_of_a_running_run_names_its_pid_and_step(tmp_path, calibrated):
    from pipeline.runner.folder import lock_work_dir, unlock
    _, work = _copy(calibrated, tmp_path)
    handle = lock_work_dir(str(work))  # this process plays the run
    try:
        (work / "status.json").write_text(json.dumps({
            "state": "running", "steps": ["calib", "test"], "step": "test", "pid": os.getpid(), "host": "h",
            "started": "2026-12-04T10:00:00+00:00", "step_started": "2026-12-04T10:00:30+00:00"}))
        out = cli("status", str(work)).stdout
    finally:
        unlock(handle)
    assert "state: running step test (pid %d on h)" % os.getpid() in out
    assert "this step since 2026-12-04T10:00:30+00:00" in out and "next: wait for it to finish" in out


def test_run_folder_errors_are_pipeline_errors():
    assert issubclass(RunFolderError, PipelineError)
