"""Static checks that run with the tests: the Python 3.8 floor (vermin), hadolint on the Dockerfile,
shellcheck on scripts/docker_run.sh, and that script against a fake docker client."""
import os
import shutil
import stat
import subprocess
import sys
import tarfile

import pytest

from tests.support import REPO


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
    # the Vitis AI 3.5 image runs Python 3.8 (docs/environment.md#the-vitis-ai-35-image)
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
case "$1" in
    version) [ -z "$FAKE_DAEMON_DOWN" ] || { echo "Cannot connect to the Docker daemon" >&2; exit 1; } ;;
    image) exit "${FAKE_IMAGE_MISSING:-0}" ;;
    build) printf '%s\\n' "${DOCKER_BUILDKIT-unset}" > "$FAKE_DOCKER_LOG.buildkit"
           cat > "$FAKE_DOCKER_LOG.context" ;;
esac
exit 0
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    exe = tmp_path / "docker"
    exe.write_text(FAKE_DOCKER)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("DOCKER", str(exe))
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "log"))
    for name in ("VITIS_PIPELINE_IMAGE", "VITIS_AI_IMAGE", "DOCKER_BUILDKIT", "FAKE_IMAGE_MISSING",
                 "FAKE_DAEMON_DOWN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "log"


SCRIPT = os.path.join(REPO, "scripts", "docker_run.sh")


def _run_script(*args):
    return subprocess.run(["bash", SCRIPT] + list(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("script", ["scripts/docker_run.sh", "scripts/find_python.sh", "scripts/lock.sh", ".ci/run"])
def test_shell_scripts_pass_shellcheck(script):
    proc = subprocess.run([_tool("shellcheck"), os.path.join(REPO, script)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout


def test_find_python_finds_this_interpreter_and_says_where_it_looked_when_there_is_none():
    here = "%d.%d" % sys.version_info[:2]
    proc = subprocess.run(["bash", os.path.join(REPO, "scripts", "find_python.sh"), here], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, env=dict(os.environ, PATH=os.path.dirname(
                              sys.executable) + os.pathsep + os.environ["PATH"]))
    assert proc.returncode == 0, proc.stderr
    found = proc.stdout.strip()
    version = subprocess.run([found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    assert version == here
    bad = subprocess.run(["bash", os.path.join(REPO, "scripts", "find_python.sh"), "x"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True)
    assert bad.returncode == 2 and "expected a version like 3.8, got 'x'" in bad.stderr


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
    proc = _run_script("pyproject.toml")
    assert proc.returncode == 0, proc.stderr
    build = open(str(fake_docker) + ".build").read().splitlines()
    # a plain `docker build` (no buildx, BuildKit not forced) reading its context from stdin
    assert build[:3] == ["build", "-f", "docker/Dockerfile"] and build[-1] == "-"
    assert "buildx" not in build and "VITIS_AI_IMAGE=xilinx/vitis-ai-pytorch-rocm:latest" in build
    assert build[build.index("-t") + 1] == "vitis-pipeline:latest"
    assert open(str(fake_docker) + ".buildkit").read().strip() == "unset"
    # the context holds what the image installs and nothing else (no .venv, runs/, data, caches)
    with tarfile.open(str(fake_docker) + ".context") as tar:
        names = tar.getnames()
    assert {"pyproject.toml", "README.md", "docker/Dockerfile", "pipeline/__init__.py",
            "pipeline/compilers/vai_c.py"} <= set(names)
    assert all(n in ("pyproject.toml", "README.md", "docker/Dockerfile") or n.startswith("pipeline")
               for n in names), names
    assert not any("__pycache__" in n for n in names)
    assert os.path.exists(str(fake_docker) + ".run"), "the run follows the build"


@pytest.mark.parametrize("value", ["1", "0"])
def test_docker_run_passes_the_users_buildkit_choice_through(fake_docker, monkeypatch, value):
    monkeypatch.setenv("FAKE_IMAGE_MISSING", "1")
    monkeypatch.setenv("DOCKER_BUILDKIT", value)
    assert _run_script("pyproject.toml").returncode == 0
    assert open(str(fake_docker) + ".buildkit").read().strip() == value


def test_docker_run_without_a_docker_client_says_so_in_one_line(tmp_path, monkeypatch):
    # a PATH with bash's helpers but no docker, and DOCKER unset: the default client name is looked up
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "awk", "id", "tar", "cat"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, str(bin_dir / tool))
    monkeypatch.delenv("DOCKER", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    proc = subprocess.run([shutil.which("bash") or "/bin/bash", SCRIPT, "pyproject.toml"], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "needs the docker client" in lines[0] and "'docker' is not on PATH" in lines[0]
    assert "rest of the pipeline runs without it" in lines[0] and "python -m pipeline run --config" in lines[0]
    assert "building" not in proc.stderr and "command not found" not in proc.stderr


def test_docker_run_without_a_daemon_says_so_before_building(fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DAEMON_DOWN", "1")
    monkeypatch.setenv("FAKE_IMAGE_MISSING", "1")
    proc = _run_script("pyproject.toml")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "cannot reach a docker daemon" in proc.stderr
    assert "Cannot connect to the Docker daemon" in proc.stderr and "runs without docker" in proc.stderr
    assert not os.path.exists(str(fake_docker) + ".build") and not os.path.exists(str(fake_docker) + ".run")


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_docker_run_help_prints_the_usage_and_succeeds(fake_docker, flag):
    proc = _run_script(flag)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("Run the pipeline on a config inside the Vitis AI image")
    assert "Usage: scripts/docker_run.sh CONFIG.yaml" in proc.stdout and "DOCKER_BUILDKIT" in proc.stdout
    assert "set -euo" not in proc.stdout, "the usage stops at the end of the header comment"
    assert not os.path.exists(str(fake_docker) + ".version"), "help does not call docker"


def test_docker_run_refuses_bad_arguments(fake_docker, tmp_path):
    bare = _run_script()
    assert bare.returncode == 2 and bare.stdout == "" and "Usage: scripts/docker_run.sh" in bare.stderr
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
