"""The compile plan: what to run, and where, when ``vai_c_xir`` did not run here.

The quantized ``<ModelClass>_int.xmodel`` is written on any machine by the ``sim`` backend
(``pipeline.quantizers.sim.xmodel``: the real quantizer's file, without pytorch_nndct or ``xir``;
docs/xmodel.md), or inside the Vitis AI image by the ``nndct`` backend (pytorch_nndct's
``export_xmodel()``: docs/quantizer.md#methods-and-exports). The compiler exists only in the image
(docs/compiler.md#usage). Instead of a compiled model the compile folder gets ``compile.sh`` (the
exact command, quoted with ``shlex``) and ``compile_plan.md`` (why it did not run here, which xmodel
the command reads and whether it exists, and the commands that compile it inside the image). Paths
inside the run folder are written relative to the compile folder (``compile.sh`` changes there first,
the docker command mounts the folder above it), so a moved or copied run folder compiles as it is;
paths outside it are written absolute. The deploy bundle carries copies of both files
(pipeline.deploy) with the quantized xmodel next to them, which ``compile.sh`` then compiles. Both
name the image the command runs in: the target's compile image
(``DpuTarget.compile_image``, a pinned tag from ``pipeline.targets.releases``), and the plan says which
Vitis AI release the board runs and what the board must report (docs/targets.md#releases-and-images).
"""
import os
import shlex

from typing import Dict, List, Optional, Tuple

from .. import targets
from ..fileio import write_text
from ..targets.releases import RELEASES, compile_image, pipeline_image

PLAN_NAME = "compile_plan.md"
SCRIPT_NAME = "compile.sh"
CONDA_ACTIVATE = "source /opt/vitis_ai/conda/etc/profile.d/conda.sh && conda activate vitis-ai-pytorch"
PATH_FLAGS = ("-x", "-a", "-o", "--xmodel", "--arch", "--output_dir")
IMAGE_ROOT = "/opt/vitis_ai"
# export_xmodel() names its file after the traced graph, i.e. the float model's class
# (docs/quantizer.md#methods-and-exports).
XMODEL_SUFFIX = "_int.xmodel"
PLACEHOLDER_XMODEL = "<ModelClass>" + XMODEL_SUFFIX
# `python -m pipeline run` arguments that make the nndct backend write the xmodel (pipeline.config:
# export.formats must be ones the nndct backend writes; calib and test must be its own, since the
# calibration fingerprint names the backend).
NNDCT_ARGS = ["--set", "quantizer.backend=nndct", "--set", "export.formats=[xmodel]"]


def _in_image(path: str) -> bool:
    return os.path.isabs(path) and path.startswith(IMAGE_ROOT + os.sep)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + os.sep)


def _relative_argv(argv: List[str], run_dir: str, root: Optional[str] = None) -> List[str]:
    """Copy of ``argv`` whose path arguments inside ``root`` (the run folder; default ``run_dir``) are
    made relative to ``run_dir`` (e.g. ``../export/M_int.xmodel``); every other path is made absolute
    (paths under ``/opt/vitis_ai``, which exist inside the image, are kept)."""
    here = os.path.abspath(run_dir)
    top = os.path.abspath(root or run_dir)
    out = list(argv)
    for i in range(1, len(out)):
        if out[i - 1] in PATH_FLAGS and not _in_image(out[i]):
            full = os.path.abspath(out[i])
            out[i] = os.path.relpath(full, here) if _inside(full, top) else full
    return out


def _path_notes(rel: List[str]) -> List[Tuple[str, str]]:
    """``("<flag> <path>", what the path is relative to)`` for each path argument of ``rel``
    (from ``_relative_argv``)."""
    notes = []
    for i in range(1, len(rel)):
        if rel[i - 1] in PATH_FLAGS:
            value = rel[i]
            if _in_image(value):
                kind = "a path inside the Vitis AI image"
            elif os.path.isabs(value):
                kind = "an absolute path on the machine that wrote this file"
            else:
                kind = "relative to the folder of compile.sh (it changes there first)"
            notes.append(("%s %s" % (rel[i - 1], value), kind))
    return notes


def _mounts(argv: List[str], root: str) -> List[str]:
    """Host folders outside the run folder ``root`` that the compile command reads: the folder of each
    such path argument (paths inside the image, under ``/opt/vitis_ai``, excepted); nested folders merged."""
    top = os.path.abspath(root)
    folders = set()
    for i in range(1, len(argv)):
        if argv[i - 1] in PATH_FLAGS:
            full = os.path.abspath(argv[i])
            if _in_image(full) or _inside(full, top):
                continue
            folders.add(os.path.dirname(full))
    ordered = sorted(folders)
    return [f for f in ordered if not any(f != g and f.startswith(g.rstrip(os.sep) + os.sep) for g in ordered)]


def docker_command(run_dir: str, argv: Optional[List[str]] = None, image: Optional[str] = None,
                   root: Optional[str] = None) -> str:
    """The shell command that runs ``compile.sh`` of ``run_dir`` (the compile folder) inside the Vitis AI
    image ``image`` (default: the image this package runs in, ``releases.pipeline_image()``), typed in
    the folder of ``compile.sh``: the run folder ``root`` (default ``run_dir``) is mounted by its place
    relative to that folder (``"$(cd .. && pwd)"``), so the command holds no path of the run folder and
    works wherever it was moved or copied (the deploy bundle's copy mounts the bundle), and each host
    folder outside it that the command reads (``_mounts``) at its own path, so the absolute paths in
    ``compile.sh`` stay valid. The container runs as the calling user (``$(id -u):$(id -g)``, expanded by
    the caller's shell), so the compiled files are theirs; the ``vitis-ai-pytorch`` conda env is
    activated first (docs/environment.md#the-vitis-ai-35-image).
    """
    up = os.path.relpath(os.path.abspath(root or run_dir), os.path.abspath(run_dir))
    here = "$(pwd)" if up == "." else "$(cd %s && pwd)" % shlex.quote(up)
    volumes = ["-v \"%s\":\"%s\"" % (here, here)]
    volumes += ["-v %s:%s" % (shlex.quote(f), shlex.quote(f)) for f in _mounts(argv or [], root or run_dir)]
    return "docker run --rm --user \"$(id -u):$(id -g)\" -e HOME=/tmp %s -w \"$(pwd)\" %s bash -c %s" % (
        " ".join(volumes), image or pipeline_image(), shlex.quote(CONDA_ACTIVATE + " && sh " + SCRIPT_NAME))


def expected_xmodel(argv: List[str]) -> Tuple[str, Optional[str]]:
    """``(file name, model class)`` of the quantized xmodel that ``argv``'s ``-x``/``--xmodel`` names.

    The class is the name before ``_int.xmodel`` (``DigitsCNN_int.xmodel`` -> ``DigitsCNN``), or None
    when the argv holds no xmodel path or a placeholder such as ``<Model>_int.xmodel``.
    """
    for flag in ("-x", "--xmodel"):
        if flag in argv[:-1]:
            name = os.path.basename(argv[argv.index(flag) + 1])
            stem = name[:-len(XMODEL_SUFFIX)] if name.endswith(XMODEL_SUFFIX) else ""
            return name, (stem if stem.isidentifier() else None)
    return PLACEHOLDER_XMODEL, None


def _xmodel_exists(argv: List[str]) -> bool:
    flag = "-x" if "-x" in argv[:-1] else "--xmodel"
    return flag in argv[:-1] and expected_xmodel(argv)[1] is not None and \
        os.path.isfile(argv[argv.index(flag) + 1])


def _xmodel_lines(argv: List[str], rel: List[str]) -> List[str]:
    """The plan's paragraph about the quantized xmodel: which file, where (``rel``: the argv as
    compile.sh writes it), and whether it exists."""
    name, model_class = expected_xmodel(argv)
    flag = "-x" if "-x" in argv[:-1] else "--xmodel"
    if model_class is None or flag not in argv[:-1]:
        line = "- Quantized model the compiler reads: **`%s`**, where `<ModelClass>` is the class name of the " \
               "float model (`export_xmodel()` names the file after the traced graph)." % PLACEHOLDER_XMODEL
    else:
        shown = rel[argv.index(flag) + 1]
        line = "- Quantized model the compiler reads: **`%s`** (`%s`%s)." % (
            name, shown, "" if os.path.isabs(shown) else ", from the folder of this plan")
    if _xmodel_exists(argv):
        return [line + " It is there: only the compile step is left, and it needs nothing but the image's "
                "`vai_c_xir` (the quantization is not run again)."]
    return [line + " **It does not exist yet.** Add `xmodel` to `export.formats` and run the export step on any "
            "machine (the `sim` backend writes the real quantizer's file, checked against the simulation), or "
            "export it with the `nndct` backend (pytorch_nndct's `export_xmodel()`) inside the Vitis AI image."]


def _image_commands(config: str, target: str, model_file: str, exported: bool, image: str,
                    hosts_pipeline: bool) -> List[str]:
    """The commands to run inside ``image``: compile the exported xmodel (re-using the run folder:
    nothing is quantized again), or, when there is none, export it with the nndct backend first. In an
    image this package cannot run in (``hosts_pipeline`` False: Vitis AI 3.0), compile.sh alone."""
    if not hosts_pipeline:
        return _compile_sh_only(config, model_file, exported, image)
    if exported:
        run = "python -m pipeline run %s" % config
        return [
            "## Inside the Vitis AI image: compile",
            "",
            "```sh",
            "# compile %s for %s (the vai_c_xir command of compile.sh) and rebuild the deploy bundle" % (model_file,
                                                                                                        target),
            "%s --steps compile,deploy" % run,
            "```",
            "",
            "Add any other `--set` this run was started with (the same run folder is used: calib, test and export "
            "are not run again). From the host, `scripts/docker_run.sh %s --steps compile,deploy` runs it in the "
            "image `%s`, with this repository mounted at /workspace (the config and the run folder must lie inside "
            "it)." % (config, image),
        ]
    run = "python -m pipeline run %s %s" % (config, " ".join(shlex.quote(a) for a in NNDCT_ARGS))
    return [
        "## Inside the Vitis AI image: export the xmodel with the real quantizer, then compile",
        "",
        "```sh",
        "# 1. calibrate, test and export %s with the nndct backend (the real quantizer)" % model_file,
        "%s --steps calib,test,export" % run,
        "# 2. compile it for %s (the vai_c_xir command of compile.sh) and rebuild the deploy bundle" % target,
        "%s --steps compile,deploy" % run,
        "```",
        "",
        "Add any other `--set` this run was started with. From the host, `scripts/docker_run.sh %s` "
        "followed by the same arguments (from `--set` on) runs each command in the image `%s`, with this "
        "repository mounted at /workspace (the config must lie inside it)." % (config, image),
    ]


def factory_lines(factory: Optional[str]) -> List[str]:
    """The plan's note for a model built by ``model.factory`` (``"module:function"``): every ``python -m
    pipeline run`` imports that module, so it must be importable where the command runs (``PYTHONPATH``),
    with the folder that holds it on this machine when Python finds it here. Empty for None."""
    if not factory:
        return []
    import importlib.util
    top = factory.split(":", 1)[0].split(".", 1)[0]
    folder = None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and spec.origin not in ("built-in", "frozen"):
        folder = os.path.dirname(spec.origin)
        if os.path.basename(spec.origin) == "__init__.py":
            folder = os.path.dirname(folder)
    return [
        "",
        "This config builds its model with `model.factory: %s`: each `python -m pipeline run` above imports "
        "`%s`, so run it where Python finds that module: from the folder that holds it, or with `PYTHONPATH=<that "
        "folder>` in front of the command%s." % (factory, top, " (on this machine: `%s`)" % folder if folder else ""),
    ]


def _compile_sh_only(config: str, model_file: str, exported: bool, image: str) -> List[str]:
    """The plan's commands when the compile image cannot run this package: compile.sh alone in it."""
    release = [r for r in RELEASES.values() if r.image == image][0]
    lines = [
        "## Inside the Vitis AI %s image: compile.sh alone" % release.version,
        "",
        "This package cannot run in `%s` (Python %s), so only `compile.sh` runs there: the docker command at "
        "the end of this plan runs it in this folder. Copy the compiled model it writes into the deploy "
        "bundle's model folder, next to the `.prototxt`." % (image, release.python),
    ]
    if not exported:
        lines += [
            "",
            "First export `%s`: add `xmodel` to `export.formats` and run the export step on any machine (the "
            "`sim` backend), or with the real quantizer in the image this package runs in: `scripts/docker_run.sh "
            "%s %s --steps calib,test,export`. Then run `python -m pipeline run %s --steps compile,deploy` outside "
            "the image again: this plan and the bundle then carry the xmodel." % (
                model_file, config, " ".join(shlex.quote(a) for a in NNDCT_ARGS), config),
        ]
    return lines


def _release_lines(entry: "targets.DpuTarget", image: str, known: bool, warnings: List[str]) -> List[str]:
    """The plan's section on the board's Vitis AI release, the compile image, the fingerprint check, and
    the 3.0/3.5 differences the model hits (the export step's warnings)."""
    r = entry.release
    fingerprint = targets.hex_fingerprint(entry.fingerprint)
    boards = ", ".join("%s `%s`" % kv for kv in r.board_images.items())
    lines = ["## The board and its Vitis AI release", ""]
    if r.board_release:
        lines.append("- The %s boards run Vitis AI %s%s. Source: %s." % (
            entry.family, r.board_release, " (board images: %s)" % boards if boards else "", r.source))
    else:
        lines.append("- The Vitis AI release of the %s boards is not known (%s)." % (entry.family, r.source))
    if known:
        lines.append("- `compile.sh` runs in `%s`, the Vitis AI %s image, whose `vai_c_xir` compiles for %s%s." % (
            image, r.compile_release, entry.family,
            "" if r.compile_release == r.board_release or r.board_release is None else
            "; AMD's own flow for these boards compiles there and runs the result on the %s board image"
            % r.board_release))
    else:
        lines.append("- No Vitis AI image is known to compile for %s: the commands below use `%s`, whose target "
                     "factory still lists %s; check the result, or compile with the release the board runs."
                     % (entry.family, image, entry.name))
    lines.append("- On the board, `xdputil query` must report the fingerprint `%s` (it may print it without the "
                 "leading zero): the compiled model carries it, and VART refuses a model whose fingerprint differs "
                 "from the board's DPU (\"CHECK fingerprint fail\")." % fingerprint)
    if warnings:
        lines.append("- This model meets differences between Vitis AI 3.0 and 3.5 (the export step's warnings):")
        lines += ["  - %s" % w for w in warnings]
    return lines + [""]


def write_compile_plan(run_dir: str, argv: List[str], target: str, reason: str,
                       config_path: Optional[str] = None,
                       release_warnings: Optional[List[str]] = None, root: Optional[str] = None,
                       factory: Optional[str] = None) -> Dict[str, str]:
    """Write ``compile.sh`` and ``compile_plan.md`` into ``run_dir`` (atomically, pipeline.fileio).

    Returns ``{"plan": path of compile_plan.md, "script": path of compile.sh}``.

    Args:
        run_dir: the compile folder (created if missing).
        argv: the ``vai_c_xir`` command from ``vai_c.build_argv``. Its path arguments inside ``root``
            are written relative to ``run_dir`` (``compile.sh`` changes to its own folder first); the
            others are written absolute, or kept as they are under ``/opt/vitis_ai`` (inside the image).
            ``compile.sh`` says which is which. The ``-x`` file name should be the real
            ``<ModelClass>_int.xmodel`` (``expected_xmodel``); the plan says whether it exists and,
            when it does not, how to produce it (the sim backend's export, or the nndct backend in
            the image).
        target: the configured DPU target name (its fingerprints are written into the plan).
        reason: one sentence saying why the compiler did not run here.
        config_path: the run's config as the user would pass it to ``python -m pipeline run``
            (best relative to the repository root), or None for a ``CONFIG.yaml`` placeholder.
        release_warnings: the 3.0/3.5 differences the model meets when the target's boards run Vitis AI
            3.0 (``pipeline.inspect.releases``, the export step's), listed in the plan.
        root: the run folder ``run_dir`` lies in (default ``run_dir``): the files that travel with it,
            written relative, so neither file names the folder's own path.
        factory: the config's ``model.factory`` (``"module:function"``), or None: the plan then says
            that ``python -m pipeline run`` must find that module (``factory_lines``).

    Raises:
        ConfigError: unknown target.
    """
    entry = targets.get_target(target)
    image, known = compile_image(entry.family)
    hosts_pipeline = [r for r in RELEASES.values() if r.image == image][0].hosts_pipeline
    os.makedirs(run_dir, exist_ok=True)
    rel = _relative_argv(argv, run_dir, root)
    command = " ".join(shlex.quote(a) for a in rel)
    out = rel[rel.index("-o") + 1] if "-o" in rel else "."
    mkdir = "" if out == "." else "mkdir -p %s\n" % shlex.quote(out)
    fingerprint = targets.hex_fingerprint(entry.fingerprint)
    xmodel_name, xmodel_class = expected_xmodel(argv)
    x_flag = "-x" if "-x" in rel[:-1] else "--xmodel" if "--xmodel" in rel[:-1] else None
    if x_flag is not None and xmodel_class is not None:
        # the deploy bundle carries the quantized xmodel next to its copy of this script
        x_at = rel.index(x_flag) + 1
        pick = ("xmodel=%s\nif [ -f %s ]; then xmodel=%s; fi  # the copy in the deploy bundle\n"
                % (shlex.quote(rel[x_at]), shlex.quote(xmodel_name), shlex.quote(xmodel_name)))
        run_line = " ".join(shlex.quote(a) if i != x_at else '"$xmodel"' for i, a in enumerate(rel))
    else:
        pick, run_line = "", command
    script = ("#!/bin/sh\n"
              "# vai_c_xir command for DPU target %s (fingerprint %s), written by the pipeline.\n"
              "# Run it inside the Vitis AI image %s (conda env vitis-ai-pytorch); compile_plan.md says how.\n"
              "%s"
              "set -eu\n"
              "cd \"$(dirname \"$0\")\"\n"
              "%s%s"
              "%s\n" % (target, fingerprint, image, "".join("# %s: %s\n" % n for n in _path_notes(rel)), mkdir, pick,
                         run_line))
    script_path = os.path.join(run_dir, SCRIPT_NAME)
    write_text(script_path, script, executable=True)
    model_file = xmodel_name if xmodel_class else PLACEHOLDER_XMODEL
    if config_path and config_path.startswith("-"):  # not an option to python -m pipeline
        config_path = os.path.join(".", config_path)
    config = shlex.quote(config_path) if config_path else "CONFIG.yaml"
    plan = "\n".join([
        "# Compile plan",
        "",
        "**The compiler did not run here.** %s" % reason,
        "",
        "- DPU target: `%s` (family %s), fingerprint `%s` (Vitis AI 3.x)%s" % (
            target, entry.family, fingerprint,
            "" if entry.fingerprint_2_5 in (None, entry.fingerprint) else
            "; the 2.5 release used `%s`, and a model compiled for it fails on a 3.x board image" % targets.hex_fingerprint(entry.fingerprint_2_5)),
    ] + _xmodel_lines(argv, rel) + [
        "",
    ] + _release_lines(entry, image, known, release_warnings or []) + _image_commands(
        config, target, model_file, _xmodel_exists(argv), image, hosts_pipeline) + factory_lines(factory) + [
        "",
        "## The compile command alone",
        "",
        "`%s` holds the exact command. Its paths:" % SCRIPT_NAME,
        "",
    ] + ["- `%s`: %s" % n for n in _path_notes(rel)] + [
        "",
        "```sh",
        command,
        "```",
        "",
        "Once `%s` exists, this runs it in `%s`, typed in the folder of this plan:" % (model_file, image),
        "",
        "```sh",
        docker_command(run_dir, argv, image, root),
        "```",
        "",
        "The compiler writes `<net_name>.xmodel` into the output folder; check the DPU/CPU split with "
        "`xir subgraph <file>` and that the board reports the fingerprint `%s` (`xdputil query`)." % fingerprint,
        "",
    ])
    path = os.path.join(run_dir, PLAN_NAME)
    write_text(path, plan)
    return {"plan": path, "script": script_path}
