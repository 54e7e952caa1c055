"""Installs: the lock file (constraints.txt) agrees with pyproject.toml and with what is installed,
and pyproject.toml's ranges still resolve for the Vitis AI image (Python 3.8, numpy 1.22)."""
import importlib.metadata as metadata
import os
import re
import subprocess
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11: the same parser, from PyPI (the dev extra's tomli)
    import tomli as tomllib

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support import REPO

EXTRAS = ("cpu", "dev", "samples")


def _pyproject():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _lock():
    pins = {}
    with open(os.path.join(REPO, "constraints.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line)
                assert m, "constraints.txt: every line pins one package with ==, got %r" % line
                name = canonicalize_name(m.group(1))
                assert name not in pins, "constraints.txt pins %s twice" % name
                pins[name] = Version(m.group(2))
    return pins


def _project_requirements():
    project = _pyproject()
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in EXTRAS:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def test_every_pyproject_requirement_is_pinned_inside_its_range():
    pins = _lock()
    for req in _project_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, "%s (pyproject.toml) is not pinned in constraints.txt: run scripts/lock.sh" % req
        assert req.specifier.contains(pins[name], prereleases=True), \
            "constraints.txt pins %s==%s outside pyproject.toml's %s: run scripts/lock.sh" % (name, pins[name], req)


def test_the_lock_holds_the_whole_dependency_closure_and_nothing_else():
    """Transitive dependencies included: walk the installed metadata from pyproject's requirements."""
    pins, env = _lock(), default_environment()
    seen, todo = set(), [(r, "") for r in _project_requirements()]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate(dict(env, extra=extra)):
            continue
        name = canonicalize_name(req.name)
        key = (name, tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        for r in metadata.requires(req.name) or []:
            sub = Requirement(r)
            for e in sorted(req.extras) or [""]:
                todo.append((sub, e))
    closure = {name for name, _ in seen}
    assert closure - set(pins) == set(), "installed dependencies missing from constraints.txt: run scripts/lock.sh"
    assert set(pins) - closure == set(), "constraints.txt pins packages nothing requires: run scripts/lock.sh"


def test_installed_versions_are_the_locked_ones():
    """The test command installs through the lock; another version here means another machine's results."""
    wrong = {}
    for name, version in _lock().items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong[name] = "not installed"
            continue
        if installed != version:
            wrong[name] = str(installed)
    assert not wrong, ("installed versions differ from constraints.txt %s: reinstall with "
                       "pip install -c constraints.txt -e '.[cpu,dev]'" % wrong)


def test_the_cpu_extra_and_the_lock_agree_on_torch():
    cpu = [Requirement(r) for r in _pyproject()["optional-dependencies"]["cpu"]]
    torch = [r for r in cpu if canonicalize_name(r.name) == "torch"]
    assert len(torch) == 1 and str(torch[0].specifier).startswith("==")
    assert _lock()["torch"].public == Version(str(torch[0].specifier)[2:]).public


def test_readme_commands_and_ci_install_through_the_lock():
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    commands = re.findall(r"^python3 -m venv .*$", readme, re.M)
    assert len(commands) == 2, commands
    assert all("pip install -c constraints.txt -e" in c for c in commands), commands
    with open(os.path.join(REPO, ".ci", "run")) as f:
        ci = f.read()
    assert commands[1] in ci, "CI must run the README's test command verbatim"
    assert "rm -rf .venv" in ci and "PIP_NO_CACHE_DIR" in ci


@pytest.mark.slow
def test_pyproject_ranges_resolve_for_the_vitis_ai_image():
    """Python 3.8 with the image's numpy 1.22.4 and protobuf 3.20.3, and with every lower bound (pip dry run)."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "check_image_floors.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=600)
    if proc.returncode == 3:
        pytest.skip("the package index cannot be reached: %s" % proc.stdout.strip().splitlines()[0])
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "newest: resolves for Python 3.8" in proc.stdout and "numpy==1.22.4" in proc.stdout
    assert "floors: resolves for Python 3.8" in proc.stdout and "numpy==1.22.0" in proc.stdout
