"""The compile plan: what to run, and where, when ``vai_c_xir`` is not installed here.

Outside the Vitis AI image there is neither the quantized ``<Model>_int.xmodel`` (``export_xmodel``
needs the ``xir`` package, facts 1.2) nor the compiler (facts 4). Instead of a compiled model the
run folder gets ``compile.sh`` (the exact command, quoted with ``shlex``) and ``compile_plan.md``
(why it did not run here, and the docker command that runs it in the image).
"""
import os
import shlex

from typing import Dict, List, Optional

from ..fileio import write_text
from . import targets

PLAN_NAME = "compile_plan.md"
SCRIPT_NAME = "compile.sh"
IMAGE = "xilinx/vitis-ai-pytorch-cpu:latest"
CONDA_ACTIVATE = "source /opt/vitis_ai/conda/etc/profile.d/conda.sh && conda activate vitis-ai-pytorch"
PATH_FLAGS = ("-x", "-a", "-o", "--xmodel", "--arch", "--output_dir")
IMAGE_ROOT = "/opt/vitis_ai"


def _relative_argv(argv: List[str], run_dir: str) -> List[str]:
    """Copy of ``argv`` whose path arguments inside ``run_dir`` are made relative to it."""
    root = os.path.abspath(run_dir)
    out = list(argv)
    for i in range(1, len(out)):
        if out[i - 1] in PATH_FLAGS:
            full = os.path.abspath(out[i])
            if full == root or full.startswith(root + os.sep):
                out[i] = os.path.relpath(full, root)
    return out


def _mounts(run_dir: str, argv: List[str]) -> List[str]:
    """Host folders the compile command needs: ``run_dir`` and the folder of each path argument outside
    it (paths inside the image, under ``/opt/vitis_ai``, excepted); nested folders are merged."""
    root = os.path.abspath(run_dir)
    folders = {root}
    for i in range(1, len(argv)):
        if argv[i - 1] in PATH_FLAGS:
            full = os.path.abspath(argv[i])
            if full.startswith(IMAGE_ROOT + os.sep) or full == root or full.startswith(root + os.sep):
                continue
            folders.add(os.path.dirname(full))
    ordered = sorted(folders)
    return [f for f in ordered if not any(f != g and f.startswith(g.rstrip(os.sep) + os.sep) for g in ordered)]


def docker_command(run_dir: str, argv: Optional[List[str]] = None, image: str = IMAGE) -> str:
    """The shell command that runs ``compile.sh`` of ``run_dir`` inside the Vitis AI image.

    Every host folder the command needs (see ``_mounts``) is mounted at the same path inside the
    container, so the paths in ``compile.sh`` stay valid; the ``vitis-ai-pytorch`` conda env is
    activated first (facts 5).
    """
    volumes = " ".join("-v %s:%s" % (shlex.quote(f), shlex.quote(f)) for f in _mounts(run_dir, argv or []))
    return "docker run --rm %s -w %s %s bash -c %s" % (
        volumes, shlex.quote(os.path.abspath(run_dir)), image,
        shlex.quote(CONDA_ACTIVATE + " && sh " + SCRIPT_NAME))


def write_compile_plan(run_dir: str, argv: List[str], target: str, reason: str,
                       config_path: Optional[str] = None) -> Dict[str, str]:
    """Write ``compile.sh`` and ``compile_plan.md`` into ``run_dir``.

    Returns ``{"plan": path of compile_plan.md, "script": path of compile.sh}``.

    Args:
        run_dir: the run folder (created if missing).
        argv: the ``vai_c_xir`` command from ``vai_c.build_argv``; its ``-x``/``-a``/``-o`` paths inside
            ``run_dir`` are written relative to it, and ``compile.sh`` changes to its own folder first.
        target: the configured DPU target name (its fingerprints are written into the plan).
        reason: one sentence saying why the compiler did not run here.
        config_path: the run's resolved config, named in the plan's "whole flow" command, or None.

    Raises:
        ConfigError: unknown target.
    """
    entry = targets.get_target(target)
    os.makedirs(run_dir, exist_ok=True)
    rel = _relative_argv(argv, run_dir)
    command = " ".join(shlex.quote(a) for a in rel)
    xmodel = rel[rel.index("-x") + 1] if "-x" in rel else "<Model>_int.xmodel"
    out = rel[rel.index("-o") + 1] if "-o" in rel else "."
    mkdir = "" if out == "." else "mkdir -p %s\n" % shlex.quote(out)
    script = ("#!/bin/sh\n"
              "# vai_c_xir command for DPU target %s (fingerprint %s), written by the pipeline.\n"
              "# Run it inside the Vitis AI image (conda env vitis-ai-pytorch); paths are relative to this folder.\n"
              "set -eu\n"
              "cd \"$(dirname \"$0\")\"\n"
              "%s"
              "%s\n" % (target, targets.hex_fingerprint(entry.fingerprint), mkdir, command))
    script_path = os.path.join(run_dir, SCRIPT_NAME)
    write_text(script_path, script, executable=True)
    whole = ("scripts/docker_run.sh %s" % shlex.quote(config_path)) if config_path else \
        "scripts/docker_run.sh <config.yaml>"
    plan = "\n".join([
        "# Compile plan",
        "",
        "**Compiling needs the Vitis AI image.** %s" % reason,
        "",
        "- DPU target: `%s` (family %s), fingerprint `%s` (Vitis AI 3.x)%s" % (
            target, entry.family, targets.hex_fingerprint(entry.fingerprint),
            "" if entry.fingerprint_2_5 in (None, entry.fingerprint) else
            "; the 2.5 release used `%s`, and a model compiled for it fails on a 3.x board image" % targets.hex_fingerprint(entry.fingerprint_2_5)),
        "- Quantized model the compiler reads: `%s`. It is written by the `nndct` backend "
        "(`export_xmodel()`, test mode, batch 1), which also runs only in the image." % xmodel,
        "",
        "## The whole flow in the image (quantize with pytorch_nndct, export, compile)",
        "",
        "```sh",
        whole,
        "```",
        "",
        "## Only the compile step, once the quantized xmodel is in this folder",
        "",
        "`%s` holds the exact command:" % SCRIPT_NAME,
        "",
        "```sh",
        command,
        "```",
        "",
        "Run it in the image:",
        "",
        "```sh",
        docker_command(run_dir, argv),
        "```",
        "",
        "The compiler writes `<net_name>.xmodel` into the output folder; check the DPU/CPU split with "
        "`xir subgraph <file>` and that the board reports the same fingerprint (`xdputil query`).",
        "",
    ])
    path = os.path.join(run_dir, PLAN_NAME)
    write_text(path, plan)
    return {"plan": path, "script": script_path}
