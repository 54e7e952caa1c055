"""The other commands of ``python -m pipeline``: inspect, targets, check-env, schema."""
import json
import os

import pytest

from tests.support import REPO, cli

CONFIG = os.path.join(REPO, "configs", "digits_sim_zcu102.yaml")


def test_inspect_command_ends_with_the_summary_and_writes_the_reports(tmp_path):
    proc = cli("inspect", CONFIG, "--set", "run.work_dir=%s" % tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "DPU: 13 nodes, CPU: 0 nodes"
    names = sorted(os.listdir(str(tmp_path / "inspect")))
    assert {"inspect_DPUCZDX8G_ISA1_B4096.txt", "inspect_DPUCZDX8G_ISA1_B4096.json",
            "inspect_DPUCZDX8G_ISA1_B4096.gv"} <= set(names)
    with open(str(tmp_path / "inspect" / "inspect_DPUCZDX8G_ISA1_B4096.json")) as f:
        report = json.load(f)
    assert all(n["device"] == "DPU" for n in report["nodes"])


def test_inspect_command_says_where_it_wrote_the_reports(tmp_path):
    proc = cli("inspect", "--config", CONFIG, "--set", "run.work_dir=%s" % tmp_path, "-q")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-2].startswith("reports: ")
    listed = lines[-2][len("reports: "):].split(", ")
    assert sorted(listed) == sorted(str(p) for p in (tmp_path / "inspect").iterdir())


@pytest.mark.parametrize("how", [["CONFIG"], ["--config", "CONFIG"]])
def test_run_takes_the_config_as_argument_or_option_and_quiet_keeps_the_summary(tmp_path, how):
    args = [CONFIG if a == "CONFIG" else a for a in how]
    proc = cli("run", *args, "--steps", "inspect", "-q", "--set", "run.work_dir=%s" % tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "INFO" not in proc.stderr  # -q hides the progress...
    assert proc.stdout.strip().splitlines()[-1] == "report: %s" % (tmp_path / "report.md")  # ...not the summary


@pytest.mark.parametrize("args", [["run"], ["run", CONFIG, "--config", CONFIG], ["inspect"]])
def test_the_config_must_be_given_once(args):
    proc = cli(*args)
    assert proc.returncode == 2
    assert "give the config once, as CONFIG or as --config CONFIG" in proc.stderr


def test_inspect_command_with_another_target(tmp_path):
    proc = cli("inspect", CONFIG, "--set", "run.work_dir=%s" % tmp_path, "--set", "compile.target=DPUCAHX8H_ISA2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("DPU: ")


def test_targets_lists_fingerprints_in_hex():
    proc = cli("targets")
    assert proc.returncode == 0
    line = [l for l in proc.stdout.splitlines() if l.startswith("DPUCZDX8G_ISA1_B4096 ")][0]
    assert "0x0101000056010407" in line and "0x0101000016010407" in line and "ZCU102" in line


def test_check_env_says_why_steps_cannot_run_here():
    proc = cli("check-env")
    assert proc.returncode == 0
    assert "calib/test (sim)       yes" in proc.stdout
    if "pytorch_nndct  not installed" in proc.stdout:
        assert "calib/test (nndct)     no" in proc.stdout and "Vitis AI image" in proc.stdout


def test_schema_is_json_schema_of_the_config():
    proc = cli("schema")
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    assert schema["title"] == "Config"
    assert "calib_batches" in schema["$defs"]["DataSection"]["properties"]


def test_run_leaves_the_cyclic_collector_enabled_after_its_paused_imports(tmp_path):
    # `run` imports torch with the collector paused and freezes what the imports made; a run that
    # fails (here: no such config) must still leave the collector running for the caller.
    import gc

    from pipeline.cli import main
    assert gc.isenabled()
    assert main(["run", str(tmp_path / "missing.yaml")]) != 0
    assert gc.isenabled()
    gc.unfreeze()
