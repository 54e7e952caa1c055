"""Check that pyproject.toml's dependency ranges resolve for the Vitis AI 3.5 image (Python 3.8).

The image keeps its own torch 1.13.1, numpy 1.22 and protobuf 3.20.3 (the Dockerfile pins what the
image holds and lets pip add the rest from the ranges), so the lock file is not used there. This asks
pip's resolver, without installing anything, for the wheels pip takes in the image: Python 3.8 on
Ubuntu 20.04 x86_64 (glibc 2.31), so every manylinux tag up to manylinux_2_31 (``PLATFORMS``; with
manylinux2014 alone, onnxruntime's newer wheels, tagged manylinux_2_27/2_28, would be missed):

- ``newest``: the ranges with the image's numpy and protobuf pinned: what the Dockerfile installs;
- ``floors``: every lower bound pinned exactly: the oldest set the ranges admit.

torch is left out (the image brings it; its wheel is not needed to check the rest). Needs the package
index. Exit code 0 and the resolved set on success; 1 with pip's reasons when a mode does not resolve;
3 when the index cannot be reached.

    python scripts/check_image_floors.py [--mode newest|floors|both]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The vitis-ai-pytorch conda env of the Vitis AI 3.5 CPU image (Xilinx/Vitis-AI v3.5, docker/conda/):
IMAGE_PINS = ["numpy==1.22.4", "protobuf==3.20.3"]
PYTHON = "3.8"
# The CPU image's base is ubuntu:20.04 (Xilinx/Vitis-AI v3.5, docker/): glibc 2.31
PLATFORMS = ["manylinux_2_%d_x86_64" % minor for minor in range(31, 16, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
UNREACHABLE = ("NewConnectionError", "Max retries exceeded", "Temporary failure in name resolution",
               "Network is unreachable", "ConnectTimeoutError", "ProxyError")


def project_dependencies():
    """pyproject.toml's [project] dependencies as written (a small reader: no TOML library on 3.8)."""
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        text = f.read()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    return re.findall(r'^\s*"([^"]+)"', block, re.M)


def _applies(dep):
    """Whether ``dep``'s environment marker, if any, holds for Python 3.8 (the image's)."""
    from packaging.requirements import Requirement
    marker = Requirement(dep).marker
    return marker is None or marker.evaluate({"python_version": PYTHON, "python_full_version": PYTHON + ".0"})


def requirements(mode):
    deps = [d.split(";")[0].strip() for d in project_dependencies() if not re.match(r"torch\b", d) and _applies(d)]
    if mode == "newest":
        return deps + IMAGE_PINS
    floors = []
    for dep in deps:
        name, lower = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)", dep).groups()
        floors.append("%s==%s" % (name, lower))
    return floors + ["protobuf==3.20.3"]


def resolve(mode):
    """(returncode, resolved {name: version} or pip's output)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                "--no-cache-dir", "--target", os.path.join(tmp, "t"), "--python-version", PYTHON,
                "--only-binary=:all:", "--report", report] + [
                    a for p in PLATFORMS for a in ("--platform", p)] + requirements(mode)
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        if proc.returncode != 0:
            return (3 if any(u in proc.stdout for u in UNREACHABLE) else 1), proc.stdout
        with open(report) as f:
            return 0, {i["metadata"]["name"]: i["metadata"]["version"] for i in json.load(f)["install"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("newest", "floors", "both"), default="both")
    args = parser.parse_args(argv)
    worst = 0
    for mode in ("newest", "floors") if args.mode == "both" else (args.mode,):
        code, result = resolve(mode)
        if code:
            print("%s: does not resolve for Python %s%s\n%s" % (mode, PYTHON, " (index unreachable)" if code == 3 else "",
                                                                result.strip()[-3000:]))
            worst = max(worst, code)
        else:
            print("%s: resolves for Python %s: %s" % (mode, PYTHON, ", ".join(
                "%s==%s" % kv for kv in sorted(result.items(), key=lambda kv: kv[0].lower()))))
    return worst


if __name__ == "__main__":
    sys.exit(main())
