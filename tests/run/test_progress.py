"""The newcomer's path: every long step says what it does and how long it took (also when stderr is a
log file, not a terminal), and the run's last lines tell the truth about what to do next."""
import logging
import os
import re
import shlex
from types import SimpleNamespace

import pytest

from tests.support import cli, make_case

from pipeline import progress as progress_module
from pipeline.steps.compile import _next

PHASES = {  # step -> the lines its phases print on stderr (start, then "done in")
    "inspect": ["inspect: assigning the nodes of DigitsCNN to the DPU of DPUCZDX8G_ISA1_B4096 or the CPU"],
    "train": [],
    "test": ["test: float and quantized inference on 3 eval batches",
             "test: per-layer sensitivity (SQNR, cosine) on 3 eval batches"],
    "export": ["export: writing onnx_exact (1 of 2)", "export: writing onnx_qdq (2 of 2)",
               "export: verifying onnx_exact, onnx_qdq against the quantized model"],
}


@pytest.fixture(scope="module")
def onnx_only_run(tmp_path_factory):
    """A small digits run of every step, inspect included, exporting ONNX only (no xmodel)."""
    tmp = tmp_path_factory.mktemp("progress")
    config, _ = make_case(tmp, data={"batch_size": 50}, export={"formats": ["onnx_exact", "onnx_qdq"]},
                          compile={"target": "DPUCZDX8G_ISA1_B4096"})
    proc = cli("run", config, "--steps", "train,inspect,calib,test,export,compile,deploy")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return config, str(tmp / "run"), proc


def test_long_steps_print_their_phases_with_durations_when_stderr_is_not_a_terminal(onnx_only_run):
    _, _, proc = onnx_only_run  # stderr is a pipe here, as in a log file or CI: no tqdm bar, the lines remain
    for step, phases in PHASES.items():
        for what in phases:
            assert "INFO %s ...\n" % what in proc.stderr, (step, proc.stderr)
            assert re.search(r"INFO %s: done in \d+\.\d s\n" % re.escape(what), proc.stderr), (step, proc.stderr)
    assert re.search(r"INFO train: DigitsCNN on 240 images, 2 epochs of \d+ batches \.\.\.\n", proc.stderr)


def test_quiet_hides_the_phases(tmp_path):
    config, _ = make_case(tmp_path)
    proc = cli("run", config, "--steps", "inspect", "-q")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "inspect: assigning" not in proc.stderr and "INFO" not in proc.stderr


def test_without_an_xmodel_the_last_lines_do_not_send_the_user_to_compile_sh(onnx_only_run):
    config, work, proc = onnx_only_run
    line = [l for l in proc.stdout.splitlines() if l.startswith("not compiled: ")]
    assert len(line) == 1, proc.stdout
    line = line[0]
    assert "no xmodel was exported (export.formats: onnx_exact, onnx_qdq)" in line
    assert not os.path.exists(os.path.join(work, "export", "DigitsCNN_int.xmodel"))
    if "vai_c_xir is not on this machine" in line:  # compile.sh only after the xmodel is there
        assert line.index("export the xmodel first") < line.index("compile.sh inside the Vitis AI image")
    # the advice works as given: the rerun it names exports the xmodel, and then compile.sh is next
    args = shlex.split(line[line.index("run again with ") + len("run again with "):].split(", then ")[0]
                       .split(" (the compile step")[0])
    rerun = cli("run", config, *args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert os.path.isfile(os.path.join(work, "export", "DigitsCNN_int.xmodel"))
    line = [l for l in rerun.stdout.splitlines() if l.startswith(("not compiled: ", "compiled: "))][0]
    assert "no xmodel" not in line and "export the xmodel first" not in line
    if line.startswith("not compiled: "):
        assert "run %s inside the Vitis AI image" % os.path.join(work, "compile", "compile.sh") in line
    with open(os.path.join(work, "report.md")) as f:
        assert "no xmodel was exported" not in f.read()


def test_next_step_names_compile_sh_only_for_an_exported_xmodel():
    # the script named relative to the run folder, as steps/compile.json stores it (summary_lines shows it in place)
    ctx = SimpleNamespace(cfg=SimpleNamespace(export=SimpleNamespace(formats=["onnx_exact"])),
                          folder=SimpleNamespace(work_dir="/w/run"),
                          loaded=SimpleNamespace(target=SimpleNamespace(compile_image="vitis-ai:3.5")))
    plan = {"script": "/w/run/compile/compile.sh", "plan": "/w/run/compile/compile_plan.md"}
    assert _next(ctx, True, False, plan) == "run compile/compile.sh inside the Vitis AI image (vitis-ai:3.5)"
    without = _next(ctx, False, False, plan)
    assert without.startswith("export the xmodel first: run again with --set export.formats=[onnx_exact,xmodel] "
                              "--steps export,compile,deploy, then run compile/compile.sh")
    here = _next(ctx, False, True, plan)  # vai_c_xir here: the rerun compiles, no compile.sh to run
    assert "compile.sh" not in here and here.endswith("(the compile step then compiles it here)")


def test_a_loop_logs_its_progress_when_stderr_is_not_a_terminal(monkeypatch, caplog):
    monkeypatch.setattr(progress_module, "_is_terminal", lambda: False)
    monkeypatch.setattr(progress_module, "LOG_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="pipeline"):
        assert list(progress_module.progress(iter(range(3)), "eval", total=3)) == [0, 1, 2]
        bar = progress_module.progress(None, "train", total=2, unit="epoch")
        bar.set_postfix(loss="0.5000")
        bar.update(1)
        bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert re.match(r"eval: 1/3 batches, \d+\.\d s, about \d+\.\d s left$", lines[0]), lines
    assert lines[2].startswith("eval: 3/3 batches, ") and "left" not in lines[2]
    assert re.match(r"train: 1/2 epochs, \d+\.\d s, about \d+\.\d s left, loss 0.5000$", lines[3]), lines


def test_a_short_loop_adds_no_line_and_a_terminal_gets_a_bar(monkeypatch, caplog, capsys):
    monkeypatch.setattr(progress_module, "_is_terminal", lambda: False)
    with caplog.at_level(logging.INFO, logger="pipeline"):
        assert list(progress_module.progress(range(3), "eval", total=3)) == [0, 1, 2]
    assert not caplog.records  # under LOG_EVERY_S: nothing
    monkeypatch.setattr(progress_module, "_is_terminal", lambda: True)
    with caplog.at_level(logging.INFO, logger="pipeline"):
        assert list(progress_module.progress(range(3), "eval", total=3)) == [0, 1, 2]
    assert "eval" in capsys.readouterr().err and not caplog.records
    with caplog.at_level(logging.WARNING, logger="pipeline"):  # --quiet: neither
        p = progress_module.progress(range(3), "eval", total=3)
        assert p.bar is None and not p.lines and list(p) == [0, 1, 2]


def test_seconds_reads_well():
    assert progress_module.seconds(0.44) == "0.4 s"
    assert progress_module.seconds(125.2) == "2 min 05 s"


def _quick_command(text, prefix=""):
    """The ResNet-18 quick command of ``text`` (README or the config's comment), continuation lines joined."""
    lines = [l[len(prefix):].strip() if l.startswith(prefix) else None for l in text.splitlines()]
    for i, line in enumerate(lines):
        if line and line.startswith(".venv/bin/python scripts/run_pipeline.py configs/resnet18_sim_vek280.yaml") \
                and "data.source.crop" in (line + (lines[i + 1] or "")):
            command = line
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i]
            return shlex.split(command)
    raise AssertionError("no quick ResNet-18 command")


def test_the_quick_resnet18_command_is_the_same_in_readme_and_config_and_validates():
    from tests.support import REPO
    from pipeline.config import load_config
    config = os.path.join(REPO, "configs", "resnet18_sim_vek280.yaml")
    with open(os.path.join(REPO, "README.md")) as f:
        readme = _quick_command(f.read())
    with open(config) as f:
        text = f.read()
    assert _quick_command(text, "#") == readme
    assert "epochs=1   # quicker" not in text  # the old shortcut ended at chance
    overrides = [readme[i + 1] for i, a in enumerate(readme) if a == "--set"]
    cfg = load_config(config, overrides).cfg
    assert (cfg.data.source["resize"], cfg.data.source["crop"], cfg.model.train.epochs) == (64, 56, 5)
    assert cfg.run.work_dir == "runs/resnet18_quick"
