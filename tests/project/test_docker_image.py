"""scripts/docker_run.sh builds on the image of the config's DPU target: the stdlib-only reader
(pipeline/targets/docker_image.py) and the script against a fake docker client."""
import os
import stat
import subprocess
import sys

import pytest

from pipeline.targets import docker_image
from pipeline.targets.releases import RELEASES, pipeline_image
from tests.support import REPO

SCRIPT = os.path.join(REPO, "scripts", "docker_run.sh")
IMAGE_3_5 = RELEASES["3.5"].image
IMAGE_3_0 = RELEASES["3.0"].image

FAKE_DOCKER = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_DOCKER_LOG.$1"
case "$1" in
    image) exit "${FAKE_IMAGE_MISSING:-0}" ;;
    build) cat > /dev/null ;;
esac
exit 0
"""


@pytest.mark.parametrize("text,target", [
    ("compile:\n  target: DPUCVDX8G_ISA3_C32B3   # VCK190\n  arch_json: null\n", "DPUCVDX8G_ISA3_C32B3"),
    ("run:\n  name: x\ncompile:\n    board: KV260\n    target: 'DPUCZDX8G_ISA1_B4096'\n", "DPUCZDX8G_ISA1_B4096"),
    ('compile:\n  target: "DPUCV2DX8G_ISA1_C20B14"\nexport:\n  target: nope\n', "DPUCV2DX8G_ISA1_C20B14"),
    ("compile: {board: VCK190, target: DPUCVDX8G_ISA3_C32B3}\n", "DPUCVDX8G_ISA3_C32B3"),
    ("# compile:\n#   target: DPUCVDX8G_ISA3_C32B3\nquantizer:\n  target: DPUCVDX8G_ISA3_C32B3\n", None),
    ("compile:\n  options:\n    target: nested\n  net_name: n\n", None),
    ("compile:\n  options: {target: nested}\n", None),
    ("", None),
])
def test_config_target_reads_compile_target_only(text, target):
    assert docker_image.config_target(text) == target


def test_the_last_set_override_wins():
    args = ["--steps", "calib", "--set", "compile.target=DPUCVDX8G_ISA3_C32B3", "--set", "run.name=x",
            "--set=compile.target='DPUCV2DX8G_ISA1_C20B14'"]
    assert docker_image.override_target(args) == "DPUCV2DX8G_ISA1_C20B14"
    assert docker_image.override_target(["--set", "compile.board=KV260", "--set"]) is None


@pytest.mark.parametrize("target,image,noted", [
    ("DPUCZDX8G_ISA1_B4096", IMAGE_3_5, False),   # compiles in 3.5 for its 3.0 boards
    ("DPUCV2DX8G_ISA1_C20B14", IMAGE_3_5, False),
    ("DPUCVDX8G_ISA3_C32B3", IMAGE_3_5, True),    # compiles in 3.0, where the package cannot run
    ("DPUCAHX8H_ISA2_DWC", IMAGE_3_5, False),     # no known compile image: the pipeline's own
    ("NOT_A_TARGET", IMAGE_3_5, False),            # the config check reports the name
    (None, IMAGE_3_5, False),
])
def test_choose(target, image, noted):
    got, note = docker_image.choose(target)
    assert got == image == pipeline_image()
    assert (note is not None) == noted
    if noted:
        assert IMAGE_3_0 in note and "Python 3.7" in note and "writes compile/compile.sh and compile/compile_plan.md" in note


def test_the_reader_needs_only_the_standard_library(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("compile:\n  target: DPUCVDX8G_ISA3_C32B3\n")
    # -S: no site-packages (no yaml, torch, pydantic); the package comes from PYTHONPATH
    proc = subprocess.run([sys.executable, "-S", "-m", "pipeline.targets.docker_image", str(config)],
                          env=dict(os.environ, PYTHONPATH=REPO), cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == IMAGE_3_5 + "\n"
    assert proc.stderr.startswith("docker_run.sh: DPUCVDX8G_ISA3_C32B3 compiles with Vitis AI 3.0's vai_c_xir (%s)"
                                  % IMAGE_3_0)


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    """A fake docker client first on PATH, and the test's Python as the host's python3."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "docker"
    exe.write_text(FAKE_DOCKER)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    os.symlink(sys.executable, str(bindir / "python3"))
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("DOCKER", str(exe))
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_IMAGE_MISSING", "1")
    for name in ("VITIS_PIPELINE_IMAGE", "VITIS_AI_IMAGE", "DOCKER_BUILDKIT", "PYTHONPATH"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "log"


def _run(*args, env=None):
    return subprocess.run(["bash", SCRIPT] + list(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, stdin=subprocess.DEVNULL, env=env)


def _base(log):
    build = open(str(log) + ".build").read().splitlines()
    return [a.split("=", 1)[1] for a in build if a.startswith("VITIS_AI_IMAGE=")]


def test_docker_run_builds_on_the_mpsoc_targets_image(fake_docker):
    proc = _run("configs/digits_sim_zcu102.yaml", "--steps", "calib")
    assert proc.returncode == 0, proc.stderr
    assert _base(fake_docker) == [IMAGE_3_5]
    assert "compiles with Vitis AI" not in proc.stderr
    run = open(str(fake_docker) + ".run").read().splitlines()
    assert run[-3:] == ["configs/digits_sim_zcu102.yaml", "--steps", "calib"]  # the arguments go through


def test_docker_run_for_a_3_0_compile_target_runs_in_3_5_and_says_how_to_compile(fake_docker):
    proc = _run("configs/digits_sim_zcu102.yaml", "--set", "compile.target=DPUCVDX8G_ISA3_C32B3")
    assert proc.returncode == 0, proc.stderr
    assert _base(fake_docker) == [IMAGE_3_5]
    assert "docker_run.sh: DPUCVDX8G_ISA3_C32B3 compiles with Vitis AI 3.0's vai_c_xir (%s)" % IMAGE_3_0 in proc.stderr
    assert "building vitis-pipeline:latest on %s (once)" % IMAGE_3_5 in proc.stderr


def test_docker_run_keeps_the_users_base_image(fake_docker, monkeypatch):
    monkeypatch.setenv("VITIS_AI_IMAGE", "xilinx/vitis-ai-pytorch-rocm:ubuntu2004-3.5.0.306")
    proc = _run("configs/digits_sim_zcu102.yaml", "--set", "compile.target=DPUCVDX8G_ISA3_C32B3")
    assert proc.returncode == 0, proc.stderr
    assert _base(fake_docker) == ["xilinx/vitis-ai-pytorch-rocm:ubuntu2004-3.5.0.306"]
    assert "compiles with Vitis AI" not in proc.stderr  # the target is not read


def test_docker_run_without_python3_uses_the_dockerfiles_default(fake_docker, tmp_path):
    # a PATH with the tools the script uses, without python3
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("bash", "sed", "tar", "id", "dirname", "basename", "awk", "cat", "sh", "printf"):
        for folder in ("/usr/bin", "/bin"):
            if os.path.exists(os.path.join(folder, name)):
                os.symlink(os.path.join(folder, name), str(tools / name))
                break
    env = dict(os.environ, PATH=str(tools))
    proc = _run("configs/digits_sim_zcu102.yaml", env=env)
    assert proc.returncode == 0, proc.stderr
    assert _base(fake_docker) == [pipeline_image()]
    assert "could not read compile.target of configs/digits_sim_zcu102.yaml with python3" in proc.stderr
    assert "using docker/Dockerfile's default image %s" % pipeline_image() in proc.stderr
