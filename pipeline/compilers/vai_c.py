"""Run the XIR compiler front end ``vai_c_xir`` on a quantized ``<Model>_int.xmodel``.

Usage of the real tool (docs/compiler.md#usage; UG1414 "VAI_C Usage" and "Compiling for DPU"):
``vai_c_xir -x <Model>_int.xmodel -a <arch.json> -o <output_dir> -n <net_name> [--options '<json>']``.
It writes ``<output_dir>/<net_name>.xmodel`` (the model VART and the Vitis AI Library load on the
board) and may exit 0 although compilation aborted, so the output file is always checked.
``vai_c_xir`` exists only inside the Vitis AI image (conda env ``vitis-ai-pytorch``).
"""
import json
import os
import re
import shutil
import subprocess
from typing import Any, Dict, List, Optional

from .. import specs, targets
from ..errors import BackendUnavailableError, CompileError, ConfigError
from ..fileio import write_text
from ..targets.releases import pipeline_image

EXECUTABLE = "vai_c_xir"
LOG_NAME = "vai_c_xir.log"
STDERR_TAIL_LINES = 20
# Python distributions that ship the compiler in the image (docs/environment.md#the-vitis-ai-35-image):
# the first one found gives version().
COMPILER_DISTRIBUTIONS = ("xcompiler", "vaic")


def is_plain_name(name: str) -> bool:
    """True for a name that keeps ``pipeline.specs.NAME_RULE`` (letters, digits, ``.``, ``_``, ``-``, the
    first a letter or digit): safe as a file and folder name, as a command argument (never an option
    such as ``-x``), and as the Vitis AI Library model name."""
    return specs.is_plain_name(name)


def build_argv(xmodel: str, arch_json: str, out_dir: str, net_name: str,
               options: Optional[Dict[str, Any]] = None) -> List[str]:
    """The ``vai_c_xir`` command line as a list of strings; pure (reads and writes nothing).

    Args:
        xmodel: path of the quantized ``<Model>_int.xmodel`` (from ``export_xmodel`` in test mode,
            batch 1).
        arch_json: path of the DPU's ``arch.json`` (see ``targets.arch_json_path``).
        out_dir: folder the compiler writes ``<net_name>.xmodel`` into.
        net_name: name of the compiled network (``is_plain_name``: the run names' alphabet).
        options: extra compiler options, passed as one JSON string after ``--options``
            (keys sorted, so the same options give the same argv), or None.

    Raises:
        ConfigError: an empty path, or a net_name that is empty or not a plain name.
    """
    for label, value in (("xmodel", xmodel), ("arch_json", arch_json), ("out_dir", out_dir)):
        if not isinstance(value, str) or not value:
            raise ConfigError("compile.%s: expected a non-empty path, got %r" % (label, value))
    if not is_plain_name(net_name):
        raise ConfigError("compile.net_name: %r is not a plain name: give %s" % (net_name, specs.NAME_RULE))
    argv = [EXECUTABLE, "-x", xmodel, "-a", arch_json, "-o", out_dir, "-n", net_name]
    if options:
        if not isinstance(options, dict):
            raise ConfigError("compile.options: expected a mapping of compiler options, got %r" % (options,))
        argv += ["--options", json.dumps(options, sort_keys=True)]
    return argv


def is_available() -> bool:
    """True when ``vai_c_xir`` is on PATH (inside the Vitis AI image)."""
    return shutil.which(EXECUTABLE) is not None


def version() -> Optional[str]:
    """Version of the installed compiler package (``xcompiler`` or ``vaic``), or None when unknown.

    Read from the package metadata, without running the compiler (its version flag is not documented).
    """
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8 has no importlib.metadata
        return None
    for dist in COMPILER_DISTRIBUTIONS:
        try:
            return "%s %s" % (dist, metadata.version(dist))
        except metadata.PackageNotFoundError:
            continue
    return None


def release() -> Optional[str]:
    """The Vitis AI release (``"3.5"``, ``"3.0"``) of the installed compiler package, read from its
    version (``xcompiler 3.5.0`` -> ``"3.5"``); None when no compiler package is installed or its
    version does not say."""
    found = version()
    match = re.search(r"\s(\d+)\.(\d+)", found or "")
    return "%s.%s" % match.groups() if match else None


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _write_log(path: str, argv: List[str], returncode: Optional[int], stdout: str, stderr: str) -> None:
    write_text(path, "argv: %s\nreturncode: %s\n--- stdout ---\n%s\n--- stderr ---\n%s\n"
               % (json.dumps(argv), returncode, stdout, stderr))


REJECTED = ".rejected"


def _check_compiled(compiled: str, fingerprint: Optional[int], argv: List[str], log: str, tail: str) -> None:
    """Raise CompileError when ``compiled`` is not a compiled model (``compiled.problems``); the file is
    then kept as ``<net>.xmodel.rejected``, out of the deploy step's way."""
    from .compiled import problems
    with open(compiled, "rb") as f:
        wrong, _ = problems(f.read(), fingerprint)
    if wrong is None:
        return
    os.replace(compiled, compiled + REJECTED)
    raise CompileError("compile: %s exited 0 but its %s is not a compiled model: expected an XIR graph with a DPU "
                       "subgraph for this target, got %s. The compilation aborted or was cut short: read the "
                       "compiler's log %s, fix what it says and run the compile step again (--steps compile,deploy). "
                       "The file was kept as %s%s; %s"
                       % (EXECUTABLE, compiled, wrong, log, compiled, REJECTED,
                          "end of stderr:\n" + tail if tail.strip() else "its stderr was empty."),
                       argv=argv, returncode=0, stderr_tail=tail)


def compile_xmodel(xmodel: str, arch_json: str, out_dir: str, net_name: str,
                   options: Optional[Dict[str, Any]] = None, target: Optional[str] = None,
                   timeout_s: Optional[float] = None) -> Dict[str, Any]:
    """Compile ``xmodel`` for the DPU described by ``arch_json``; no shell is involved.

    Steps: when ``target`` is given, check that ``arch_json`` describes it (``targets.check_arch_json``,
    public case P11); check the compiler is installed and the xmodel exists; remove a stale
    ``<out_dir>/<net_name>.xmodel``;
    run the compiler; keep its stdout and stderr in ``<out_dir>/vai_c_xir.log``; check the exit code
    and that ``<net_name>.xmodel`` was written and is a compiled model: an XIR graph with a DPU subgraph,
    compiled for the target's fingerprint when it names one (``compiled.problems``; the tool can exit 0
    after an abort, docs/compiler.md#exit-status). A file that is not is kept as ``<net_name>.xmodel.rejected``.

    Returns:
        dict with ``argv`` (list), ``returncode`` (0), ``xmodel`` (compiled model path), ``log``
        (log path), ``files`` (sorted paths of every file in ``out_dir`` after the run) and
        ``fingerprint`` (int, or None when no target was given).

    Raises:
        ConfigError: missing input file, or an ``arch.json`` that belongs to another DPU.
        BackendUnavailableError: ``vai_c_xir`` is not on PATH (write a compile plan instead).
        CompileError: non-zero exit, timeout, no ``<net_name>.xmodel`` or one that is not a compiled
            model; carries ``argv``,
            ``returncode`` and the last lines of stderr.
    """
    argv = build_argv(xmodel, arch_json, out_dir, net_name, options)
    fingerprint = targets.check_arch_json(arch_json, target) if target is not None else None
    if target is None and not os.path.isfile(arch_json):
        raise ConfigError("compile: arch.json %s does not exist" % arch_json)
    if not is_available():
        raise BackendUnavailableError("compile: %s is not on PATH; it comes with the Vitis AI image "
                                      "(%s, conda env vitis-ai-pytorch). Run scripts/docker_run.sh, or use "
                                      "the written compile plan" % (EXECUTABLE, pipeline_image()))
    if not os.path.isfile(xmodel):
        raise ConfigError("compile: quantized model %s does not exist; it comes from the nndct backend's "
                          "export_xmodel() in the Vitis AI image" % xmodel)
    os.makedirs(out_dir, exist_ok=True)
    compiled = os.path.join(out_dir, net_name + ".xmodel")
    for stale in (compiled, compiled + REJECTED):
        if os.path.exists(stale):
            os.remove(stale)
    log = os.path.join(out_dir, LOG_NAME)
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout_s, shell=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode("utf-8", "replace")
        err = exc.stderr if isinstance(exc.stderr, str) else (exc.stderr or b"").decode("utf-8", "replace")
        _write_log(log, argv, None, out, err)
        raise CompileError("compile: %s did not finish within %s s (log: %s)" % (EXECUTABLE, timeout_s, log),
                           argv=argv, returncode=None, stderr_tail=_tail(err))
    _write_log(log, argv, proc.returncode, proc.stdout, proc.stderr)
    tail = _tail(proc.stderr)
    if proc.returncode != 0:
        raise CompileError("compile: %s exited with status %d (log: %s); end of stderr:\n%s"
                           % (EXECUTABLE, proc.returncode, log, tail),
                           argv=argv, returncode=proc.returncode, stderr_tail=tail)
    if not os.path.isfile(compiled):
        raise CompileError("compile: %s exited 0 but wrote no %s (log: %s); end of stderr:\n%s"
                           % (EXECUTABLE, compiled, log, tail),
                           argv=argv, returncode=proc.returncode, stderr_tail=tail)
    _check_compiled(compiled, fingerprint, argv, log, tail)
    files = sorted(os.path.join(out_dir, n) for n in os.listdir(out_dir)
                   if os.path.isfile(os.path.join(out_dir, n)))
    return {"argv": argv, "returncode": proc.returncode, "xmodel": compiled, "log": log,
            "files": files, "fingerprint": fingerprint}
