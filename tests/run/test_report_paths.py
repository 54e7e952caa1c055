"""report.json, report.md and report.html name no path of the run folder (README), also where a failed
step's message names a file in it (an export's ``<file>.rejected``): the path relative to the folder."""
import json

import pytest

from tests.support import make_case


def test_a_failed_steps_message_names_its_file_relative_to_the_run_folder(tmp_path, monkeypatch):
    from pipeline.runner.folder import RunDir
    config, _ = make_case(tmp_path)
    work = tmp_path / "run"
    pipeline_run = __import__("pipeline").run
    pipeline_run(config, steps=["train"])

    def fails(self):  # as an export's refusal: "...; the file was kept as <run folder>/export/m.onnx.rejected"
        raise IsADirectoryError(21, "Is a directory", self.path("export", "m.onnx.rejected"))
    monkeypatch.setattr(RunDir, "write_resolved_config", fails)
    with pytest.raises(OSError):
        pipeline_run(config, steps=["train"])
    with open(str(work / "status.json")) as f:
        assert str(work) in json.load(f)["error"]  # the status (and the command line) keep the full path
    with open(str(work / "report.json")) as f:
        report = json.load(f)
    assert report["status"]["state"] == "failed" and "'export/m.onnx.rejected'" in report["status"]["error"]
    for name in ("report.json", "report.md", "report.html"):
        with open(str(work / name)) as f:
            assert str(work) not in f.read(), name
