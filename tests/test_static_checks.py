"""Static checks that run with the tests: the Python 3.8 floor (vermin), hadolint on the Dockerfile,
and scripts/docker_run.sh against a fake docker client."""
import os
import shutil
import stat
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool(name):
    """The dev-dependency tool next to this Python (the venv's bin), else on PATH; skip if absent."""
    local = os.path.join(os.path.dirname(sys.executable), name)
    path = local if os.path.isfile(local) else shutil.which(name)
    if path is None:
        pytest.skip("%s is not installed (pip install -e '.[dev]')" % name)
    return path


# --eval-annotations: Python 3.8 evaluates annotations at definition time, so ``list[int]`` in a
# signature fails there; vermin ignores annotations without this flag.
VERMIN = ["-q", "--no-tips", "--target=3.8-", "--violations", "--eval-annotations"]


def test_code_runs_on_python_3_8():
    # the Vitis AI 3.5 image runs Python 3.8 (facts 5)
    proc = subprocess.run([_tool("vermin")] + VERMIN + ["pipeline", "scripts"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout


@pytest.mark.parametrize("code", ["def f(x: list[int]) -> None:\n    return None\n",
                                  "y = 'ab'.removeprefix('a')\n",
                                  "z = {'a': 1} | {'b': 2}\n"])
def test_vermin_flags_3_9_constructs(tmp_path, code):
    bad = tmp_path / "bad.py"
    bad.write_text(code)
    proc = subprocess.run([_tool("vermin")] + VERMIN + [str(bad)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode != 0 and "3.9" in proc.stdout, proc.stdout


def test_dockerfile_passes_hadolint():
    proc = subprocess.run([_tool("hadolint"), "docker/Dockerfile"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout


def test_dockerfile_installs_into_the_vitis_ai_pytorch_env():
    with open(os.path.join(REPO, "docker", "Dockerfile")) as f:
        text = f.read()
    assert "ARG VITIS_AI_IMAGE=xilinx/vitis-ai-pytorch-cpu:" in text and "FROM ${VITIS_AI_IMAGE}" in text
    assert "/opt/vitis_ai/conda/envs/vitis-ai-pytorch/bin/python" in text


FAKE_DOCKER = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_DOCKER_LOG.$1"
[ "$1" = image ] && exit "${FAKE_IMAGE_MISSING:-0}"
exit 0
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    exe = tmp_path / "docker"
    exe.write_text(FAKE_DOCKER)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("DOCKER", str(exe))
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "log"))
    monkeypatch.delenv("VITIS_PIPELINE_IMAGE", raising=False)
    return tmp_path / "log"


def _run_script(*args):
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "docker_run.sh")] + list(args), cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          stdin=subprocess.DEVNULL)


def test_docker_run_mounts_the_repository_and_runs_the_config(fake_docker):
    proc = _run_script("pyproject.toml", "--steps", "calib")
    assert proc.returncode == 0, proc.stderr
    argv = open(str(fake_docker) + ".run").read().splitlines()
    assert argv[:4] == ["run", "--rm", "-v", REPO + ":/workspace"]
    assert argv[4:6] == ["-w", "/workspace"]
    i = argv.index("vitis-pipeline:latest")
    assert argv[i + 1:i + 3] == ["bash", "-c"]
    assert "conda activate vitis-ai-pytorch" in argv[i + 3] and "python -m pipeline run --config" in argv[i + 3]
    assert argv[i + 4:] == ["pyproject.toml", "--steps", "calib"]
    assert not os.path.exists(str(fake_docker) + ".build"), "the image exists: no build"


def test_docker_run_builds_the_image_when_missing(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_IMAGE_MISSING", "1")
    monkeypatch.setenv("VITIS_AI_IMAGE", "xilinx/vitis-ai-pytorch-rocm:latest")
    assert _run_script("pyproject.toml").returncode == 0
    build = open(str(fake_docker) + ".build").read().splitlines()
    assert build[:3] == ["build", "-f", os.path.join(REPO, "docker", "Dockerfile")]
    assert "VITIS_AI_IMAGE=xilinx/vitis-ai-pytorch-rocm:latest" in build and build[-1] == REPO


def test_docker_run_refuses_bad_arguments(fake_docker, tmp_path):
    assert _run_script().returncode == 2
    missing = _run_script("configs/none.yaml")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    outside = tmp_path / "c.yaml"
    outside.write_text("run: {}\n")
    proc = _run_script(str(outside))
    assert proc.returncode == 2 and "outside the repository" in proc.stderr
    assert not os.path.exists(str(fake_docker) + ".run")


def _code_lines():
    for folder, _, files in os.walk(os.path.join(REPO, "pipeline")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    for number, line in enumerate(f, 1):
                        if not line.lstrip().startswith("#"):
                            yield os.path.relpath(path, REPO), number, line


@pytest.mark.parametrize("pattern, allowed_in", [
    ("shell=True", ()),                    # subprocesses run without a shell
    ("os.system(", ()),
    ("yaml.load(", ()),                    # YAML only through yaml.safe_load
    ("torch.load(", ("pipeline/safeload.py",)),   # checkpoints only through safe_torch_load
    ("pickle.load(", ()),
])
def test_untrusted_input_is_only_read_through_the_safe_paths(pattern, allowed_in):
    hits = ["%s:%d: %s" % (path, n, line.strip()) for path, n, line in _code_lines()
            if pattern in line and path not in allowed_in and "``" not in line and '"' + pattern not in line]
    assert hits == [], hits
