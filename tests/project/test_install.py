"""Installs: each lock file (constraints.txt for this project's machines, constraints-image.txt for the
Vitis AI 3.5 image's versions) agrees with pyproject.toml, and the environment the tests run in holds
exactly its lock; pyproject.toml's ranges still resolve for the Vitis AI image (Python 3.8, numpy 1.22)."""
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

# lock file -> the extras it resolves (scripts/lock.sh) and the extra that pins its torch stack
LOCKS = {"constraints.txt": (("cpu", "dev", "samples"), "cpu"),
         "constraints-image.txt": (("image", "dev", "samples"), "image")}


def _pyproject():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _lock(name):
    """({canonical name: Version}, the Python version the lock was resolved with) of lock file ``name``."""
    pins, python = {}, None
    with open(os.path.join(REPO, name)) as f:
        for line in f:
            line = line.strip()
            found = re.search(r"with Python (\d+\.\d+\.\d+)\.", line)
            if line.startswith("#") and found:
                python = found.group(1)
            if line and not line.startswith("#"):
                m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line)
                assert m, "%s: every line pins one package with ==, got %r" % (name, line)
                key = canonicalize_name(m.group(1))
                assert key not in pins, "%s pins %s twice" % (name, key)
                pins[key] = Version(m.group(2))
    assert python, "%s: the header must say which Python it was resolved with (scripts/lock.sh writes it)" % name
    return pins, python


def _marker_env(python):
    """packaging's marker environment of this machine, for Python ``python`` (``"3.8.18"``)."""
    return dict(default_environment(), python_version=".".join(python.split(".")[:2]), python_full_version=python)


def _requirements(extras, env):
    """pyproject.toml's dependencies and ``extras``' requirements whose markers hold in ``env``."""
    project = _pyproject()
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(dict(env, extra=""))]


def _this_environments_lock():
    """The lock this environment was installed through: the one resolved for this Python whose torch
    is the installed torch; None when there is none (an environment of the user's own)."""
    torch = Version(metadata.version("torch"))
    here = "%d.%d" % sys.version_info[:2]
    for name in LOCKS:
        pins, python = _lock(name)
        if python.rsplit(".", 1)[0] == here and pins["torch"].public == torch.public:
            return name
    return None


def _require_locked_environment():
    name = _this_environments_lock()
    if name is None:
        pytest.skip("this environment (Python %d.%d, torch %s) was not installed through a lock file (%s): the "
                    "lock checks apply to the locked environments only" % (sys.version_info[0], sys.version_info[1],
                                                                          metadata.version("torch"), ", ".join(LOCKS)))
    return name


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_pyproject_requirement_is_pinned_inside_its_range(lock):
    pins, python = _lock(lock)
    for req in _requirements(LOCKS[lock][0], _marker_env(python)):
        name = canonicalize_name(req.name)
        assert name in pins, "%s (pyproject.toml) is not pinned in %s: run scripts/lock.sh" % (req, lock)
        assert req.specifier.contains(pins[name], prereleases=True), \
            "%s pins %s==%s outside pyproject.toml's %s: run scripts/lock.sh" % (lock, name, pins[name], req)


def test_the_lock_holds_the_whole_dependency_closure_and_nothing_else():
    """Transitive dependencies included: walk the installed metadata from pyproject's requirements."""
    lock = _require_locked_environment()
    pins, python = _lock(lock)
    env = _marker_env(python)
    seen, todo = set(), [(r, "") for r in _requirements(LOCKS[lock][0], env)]
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
    assert closure - set(pins) == set(), "installed dependencies missing from %s: run scripts/lock.sh" % lock
    assert set(pins) - closure == set(), "%s pins packages nothing requires: run scripts/lock.sh" % lock


def test_installed_versions_are_the_locked_ones():
    """The test commands install through a lock; another version here means another machine's results."""
    lock = _require_locked_environment()
    wrong = {}
    for name, version in _lock(lock)[0].items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            wrong[name] = "not installed"
            continue
        if installed != version:
            wrong[name] = str(installed)
    extras = ",".join(e for e in LOCKS[lock][0] if e != "samples")
    assert not wrong, ("installed versions differ from %s %s: reinstall with pip install -c %s -e '.[%s]'"
                       % (lock, wrong, lock, extras))


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_pinning_extra_and_its_lock_agree(lock):
    """The cpu extra pins torch and torchvision, the image extra the image's torch, torchvision, numpy and
    protobuf: each with ==, each the version its lock holds."""
    pins, _ = _lock(lock)
    extra = [Requirement(r) for r in _pyproject()["optional-dependencies"][LOCKS[lock][1]]]
    exact = {canonicalize_name(r.name): str(r.specifier)[2:] for r in extra if str(r.specifier).startswith("==")}
    assert {"torch", "torchvision"} <= set(exact)
    for name, version in exact.items():
        assert pins[name].public == Version(version).public, (lock, name)


def test_readme_commands_and_ci_install_through_the_locks():
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    commands = re.findall(r"^python3 -m venv .*$", readme, re.M)
    assert len(commands) == 2, commands
    assert all("pip install -c constraints.txt -e" in c for c in commands), commands
    with open(os.path.join(REPO, ".ci", "run")) as f:
        ci = f.read()
    assert commands[1] in ci, "CI must run the README's test command verbatim"
    assert "rm -rf .venv" in ci and "PIP_NO_CACHE_DIR" in ci
    # the image's environment: a fresh venv of the Python 3.8 scripts/find_python.sh finds, through its lock
    assert "scripts/find_python.sh 3.8" in ci and "pip install -c constraints-image.txt -e '.[image,dev]'" in ci


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
