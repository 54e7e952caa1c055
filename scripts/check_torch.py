"""Check this project on a torch (and Python) of your choice: a fresh venv, the main job, the golden sets.

What it does, in order, and what the README's version matrix reports for each row it measured:

1. finds a Python of the asked version (scripts/find_python.sh) and makes a venv (``--venv``, default
   ``runs/check-torch/py<X.Y>-torch<V>``, made anew);
2. installs ``torch==V`` (and ``torchvision==W`` with ``--torchvision``) from the package index, then
   this project with its ``dev`` extra, without a lock: the extra requires no torch, so the torch you
   asked for is kept (checked: the installed torch must still be ``V`` afterwards);
3. runs the main job (``configs/digits_sim_zcu102.yaml``, the README's first command) and keeps its
   summary lines;
4. runs the golden-set tests against the real quantizer's references: ``tests/sim/test_sim_golden.py``,
   ``tests/sim/test_sim_golden_wide.py``, ``tests/export/test_xmodel_golden.py`` and
   ``tests/fidelity/test_corpus.py`` (fast set);
5. prints one result line per part and exits 0 when all passed, 1 otherwise, 2 on bad arguments, 3 when
   the venv cannot be made or torch cannot be installed (pip's message is printed).

    python scripts/check_torch.py --torch 2.15.0 [--python 3.11] [--torchvision 0.30.0] [--venv DIR]

A torch wheel from the package index is several hundred MB (the CUDA build on Linux x86_64, with its
CUDA libraries: about 3 GB in the venv). pip settings of your machine apply (a machine that caps torch
releases in a pip config refuses a newer one: see pip's message).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN_JOB = "configs/digits_sim_zcu102.yaml"
GOLDEN_TESTS = ["tests/sim/test_sim_golden.py", "tests/sim/test_sim_golden_wide.py",
                "tests/export/test_xmodel_golden.py", "tests/fidelity/test_corpus.py"]


def _run(argv, **kw):
    """(returncode, stdout+stderr, seconds) of ``argv`` run in the repository."""
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, **kw)
    return proc.returncode, proc.stdout, time.monotonic() - start


def _version(arg):
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", arg):
        raise argparse.ArgumentTypeError("expected a version like 2.15.0, got %r" % arg)
    return arg


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", required=True, type=_version, help="torch release to install, e.g. 2.15.0")
    parser.add_argument("--python", default="%d.%d" % sys.version_info[:2], type=_version,
                        help="Python major.minor (default: this interpreter's)")
    parser.add_argument("--torchvision", type=_version, help="torchvision release to install with it (optional)")
    parser.add_argument("--venv", help="the venv folder (made anew); default runs/check-torch/py<X.Y>-torch<V>")
    args = parser.parse_args(argv)

    code, found, _ = _run([os.path.join(REPO, "scripts", "find_python.sh"), args.python])
    if code != 0:
        print("no Python %s: %s" % (args.python, found.strip()))
        return 3
    python = found.strip().splitlines()[-1]
    venv = os.path.abspath(args.venv or os.path.join(REPO, "runs", "check-torch",
                                                     "py%s-torch%s" % (args.python, args.torch)))
    shutil.rmtree(venv, ignore_errors=True)
    exe = os.path.join(venv, "bin", "python")
    wanted = ["torch==%s" % args.torch] + (["torchvision==%s" % args.torchvision] if args.torchvision else [])
    for step in ([python, "-m", "venv", venv], [exe, "-m", "pip", "install", "-q"] + wanted,
                 [exe, "-m", "pip", "install", "-q", "-e", ".[dev]"]):
        code, out, seconds = _run(step)
        if code != 0:
            print("setup failed (%s, %.0f s):\n%s" % (" ".join(step[2:]), seconds, out.strip()[-3000:]))
            return 3
    code, out, _ = _run([exe, "-c", "import platform, torch; print(platform.python_version(), torch.__version__)"])
    py_full, torch_now = out.split()[-2:]
    kept = torch_now.split("+")[0] == args.torch
    print("environment: Python %s, torch %s (%s), venv %s" % (py_full, torch_now, "kept after installing the dev extra"
                                                             if kept else "CHANGED by installing the dev extra", venv))
    ok = kept

    run_dir = os.path.join(venv, "run")
    code, out, seconds = _run([exe, "scripts/run_pipeline.py", MAIN_JOB, "--set", "run.work_dir=%s" % run_dir])
    summary = [line for line in out.splitlines() if not line.startswith(("INFO ", "WARNING "))]
    print("main job: %s in %.0f s" % ("ok" if code == 0 else "FAILED (exit %d)" % code, seconds))
    print("\n".join("    " + line for line in (summary if code == 0 else out.splitlines()[-30:])))
    ok = ok and code == 0

    code, out, seconds = _run([exe, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + GOLDEN_TESTS)
    counts = out.strip().splitlines()[-1] if out.strip() else "no output"
    print("golden sets (%s): %s in %.0f s" % (", ".join(GOLDEN_TESTS), counts, seconds))
    if code != 0:
        print("\n".join("    " + line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))))
    ok = ok and code == 0
    print("result: Python %s, torch %s: %s" % (py_full, torch_now, "all passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
