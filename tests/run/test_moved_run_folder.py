"""A moved or copied run folder works (issue 34, item 4): the paths inside the run folder are stored
relative to it (steps/*.json, report.json, report.md, compile.sh, compile_plan.md), and resolved against
its current place when read; the summary the command line prints names the folder where it is now.

Before: every saved result kept absolute paths, so a copy's report and summary sent the user to the old
folder's compile.sh, and the plan mounted the old folder.
"""
import os
import shutil
import subprocess

import pytest

from tests.support import cli, make_case

import pipeline

# the files a run writes about itself and its plan; none may hold the folder's own path
RECORDS = ("report.json", "report.md", os.path.join("compile", "compile.sh"), os.path.join("compile", "compile_plan.md"))


def _records(work):
    out = [os.path.join("steps", n) for n in sorted(os.listdir(str(work / "steps")))]
    return out + [r for r in RECORDS if (work / r).is_file()]


def _naming(work, path):
    """The run's own records that hold ``path`` (a folder's absolute path)."""
    return [r for r in _records(work) if str(path) in (work / r).read_text()]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A whole run (train 1 epoch ... deploy), made once; each test copies or moves it."""
    base = tmp_path_factory.mktemp("finished")
    cfg, _ = make_case(base, model={"train": {"epochs": 1}},
                       quantizer={"max_accuracy_drop": 1.0, "require_float_above_chance": False})
    report = pipeline.run(cfg)
    assert report["status"]["state"] == "ok"
    return base


def _fake_compiler(tmp_path):
    """A vai_c_xir stand-in on PATH that writes the compiled file and records what -x named."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vai_c_xir"
    fake.write_text('#!/bin/sh\n[ -f "$2" ] || { echo "no xmodel at $2" >&2; exit 3; }\n'
                    'echo "$2" > "%s"\nmkdir -p "$6" && echo compiled > "$6/$8.xmodel"\n' % (tmp_path / "x_arg"))
    fake.chmod(0o755)
    return dict(os.environ, PATH=str(bin_dir) + os.pathsep + os.environ["PATH"])


def test_the_run_folder_records_no_path_of_its_own(finished):
    work = finished / "run"
    assert _naming(work, work) == []
    report = (work / "report.json").read_text()
    assert '"report: report.md"' in report and '"script": "compile/compile.sh"' in (work / "steps" / "compile.json").read_text()


def test_a_moved_run_folder_compiles_deploys_and_reports_where_it_is(finished, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(str(finished / "run"), str(old))
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    os.rename(str(old), str(moved))                       # the folder is moved: its old place is gone
    cfg = str(finished / "case.yaml")
    status = cli("status", str(moved))
    assert status.returncode == 0 and "run folder: %s" % moved in status.stdout and str(old) not in status.stdout
    proc = cli("run", cfg, "--set", "run.work_dir=" + str(moved), "--steps", "compile,deploy")
    assert proc.returncode == 0, proc.stderr
    assert str(old) not in proc.stdout and str(finished / "run") not in proc.stdout
    assert "run %s inside the Vitis AI image" % (moved / "compile" / "compile.sh") in proc.stdout
    assert "report: %s" % (moved / "report.md") in proc.stdout
    assert _naming(moved, moved) == [] and _naming(moved, old) == [] and _naming(moved, finished / "run") == []
    # compile.sh compiles this folder's xmodel, from wherever it is run
    env = _fake_compiler(tmp_path)
    subprocess.run(["sh", str(moved / "compile" / "compile.sh")], env=env, check=True, cwd=str(tmp_path))
    assert (tmp_path / "x_arg").read_text().strip() == "../export/DigitsCNN_int.xmodel"
    assert (moved / "compile" / "case.xmodel").is_file()
    plan = (moved / "compile" / "compile_plan.md").read_text()
    assert '-v "$(cd .. && pwd)":"$(cd .. && pwd)" -w "$(pwd)" ' in plan


def test_a_copy_reports_its_own_compile_script_without_running_compile_again(finished, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(str(finished / "run"), str(copy))
    proc = cli("run", str(finished / "case.yaml"), "--set", "run.work_dir=" + str(copy), "--steps", "deploy")
    assert proc.returncode == 0, proc.stderr
    # the compile step's saved "next" (written for the original folder) now names the copy's script
    assert "run %s inside the Vitis AI image" % (copy / "compile" / "compile.sh") in proc.stdout
    assert str(finished / "run") not in proc.stdout
    assert _naming(copy, finished / "run") == [] and _naming(copy, copy) == []
    # the deploy bundle's copy of compile.sh compiles the xmodel it carries
    bundle = copy / "deploy" / "case"
    env = _fake_compiler(tmp_path)
    subprocess.run(["sh", str(bundle / "compile.sh")], env=env, check=True)
    assert (tmp_path / "x_arg").read_text().strip() == "DigitsCNN_int.xmodel"


def test_the_printed_summary_names_a_folder_below_the_current_one_relative_to_it(finished, tmp_path):
    from pipeline.cli import shown_path
    assert shown_path(os.path.join(os.getcwd(), "runs", "x")) == os.path.join("runs", "x")
    assert shown_path("/") == "/" or os.getcwd() == "/"
    assert shown_path(str(tmp_path)) == str(tmp_path) or str(tmp_path).startswith(os.getcwd())
