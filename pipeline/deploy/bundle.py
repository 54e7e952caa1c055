"""``build_bundle``: the deploy bundle assembled from files read once and checked, written as one unit.

Every file the bundle carries from the run folder (the compiled xmodel, or the compile plan and the
quantized xmodel) is read once; when the caller gives its sha256 (``expected``: the deploy step
passes the records of the steps that wrote them, ``pipeline.handoff``), the bytes must match it, and
the quantized xmodel is read back and checked (``xmodel_check``). Only then is anything written: in
a temporary sibling of ``out_dir``, from those same bytes, with ``SHA256SUMS`` and the manifest
computed from what was written, and the folder renamed into place. A refused file leaves no bundle
under the final name (nor a temporary one).
"""
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple, Union

from ..compilers import vai_c
from ..errors import CompileError, ConfigError, HandoffError
from ..fileio import process_umask
from ..handoff import mismatch
from .library import model_prototxt, words_text
from .spec import WORDS, preprocess_spec
from .xmodel_check import check_quantized_xmodel

MANIFEST = "manifest.json"
PREPROCESS = "preprocess.json"
SUMS = "SHA256SUMS"
PLAN_FILES = ("compile_plan.md", "compile.sh")
BOARD_MODELS = "/usr/share/vitis_ai_library/models"


def _write(path: str, data: bytes, mode: int = 0o666) -> None:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode & ~process_umask())


def _compiled_path(compiled: Union[None, str, Dict[str, Any]]) -> Optional[str]:
    if isinstance(compiled, dict):
        return compiled.get("xmodel")
    return compiled


def _read(path: str, expected: Optional[Dict[str, Any]], redo: str) -> bytes:
    """The bytes of ``path``, read once, matched with ``expected[path]`` when the caller gave it."""
    with open(path, "rb") as f:
        data = f.read()
    want = (expected or {}).get(path)
    if want is not None:
        found = mismatch(path, want, data)
        if found is not None:
            raise HandoffError("deploy: %s changed after it was checked: %s; the bundle does not carry it. %s"
                               % (path, found, redo))
    return data


def build_bundle(run_dir: str, out_dir: str, compiled_xmodel: Union[None, str, Dict[str, Any]],
                 preprocess: Dict[str, Any], model_name: str, plan_dir: Optional[str] = None,
                 classification: Optional[Dict[str, Any]] = None,
                 quantized_xmodel: Optional[str] = None, expected: Optional[Dict[str, Any]] = None,
                 redo: str = "", deploy_check: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Assemble the deploy bundle in ``out_dir`` and return its manifest (also written to manifest.json).

    Layout (``out_dir``)::

        manifest.json            what is in the bundle, the sha256 of every file, compiled or not and why
        <net>/                   the model folder; copy it to /usr/share/vitis_ai_library/models/ on the board
            <net>.xmodel         the compiled model from vai_c_xir (only when it was compiled)
            <net>.prototxt       Vitis AI Library model config: kernel mean and scale, model_type and the
                                 task's parameters (classification: top_k, preprocess_type)
            preprocess.json      the board-side preprocessing (resize and crop, mean, scale, channel order,
                                 layout, fix_pos, class names; what the library does differently)
            words.txt            the class names, line i names output i (when the source names them)
            SHA256SUMS           ``sha256sum -c SHA256SUMS`` checks the folder on the board
            compile_plan.md, compile.sh   instead of the xmodel when it could not be compiled here
            <Model>_int.xmodel   with them, the quantized model the plan compiles (when one was exported)
            deploy_check_data_int/<Model>/   the export's deploy-check dumps (export.deploy_check), the
                                 reference a board-side layer-by-layer check compares against

    Args:
        run_dir: the run folder (recorded in the manifest; ``<run_dir>/compile`` holds the plan).
        out_dir: the bundle folder; built in a temporary sibling and moved into place, replacing an
            earlier bundle (a folder with a manifest.json). A non-empty folder without one is refused.
        compiled_xmodel: path of the compiled ``<net>.xmodel`` (or the dict ``vai_c.compile_xmodel``
            returns), or None when it was not compiled.
        preprocess: see ``spec.preprocess_spec``.
        model_name: the network name: the model folder, xmodel and prototxt are named after it.
        plan_dir: where ``compile_plan.md`` and ``compile.sh`` are (default ``<run_dir>/compile``).
        classification: the task for the prototxt (see ``library.model_prototxt``), or None.
        quantized_xmodel: the exported ``<Model>_int.xmodel``; when the model was not compiled, the
            bundle carries it (with its sha256, in SHA256SUMS and the manifest) next to the plan,
            so the image can compile it with ``compile.sh`` alone. It is read back and checked first
            (``xmodel_check.check_quantized_xmodel``: an XIR graph of this model, input shape and
            input fix_pos).
        expected: ``{path: record}`` of the files above as the steps that wrote them recorded them
            (``{"sha256", "bytes"}``, or the bare sha256); a file's bytes must match (HandoffError
            otherwise). A path without an entry is copied as read.
        redo: what to do when a file is refused, for the message.
        deploy_check: ``{path in the model folder: source}`` of the deploy-check dumps to carry
            (``deploy_check_data_int/<Model>/<file>``), read and matched like the files above; None: none.

    Returns:
        the manifest: ``model_name``, ``compiled`` (bool), ``status`` (one sentence), ``model_dir``,
        ``files`` (list of ``{"path": relative to out_dir, "sha256", "bytes"}``), ``sources`` (each copied
        file's bundle path, the file it came from and whether its sha256 was matched with a record),
        ``class_names``, ``preprocess``, ``install`` (the copy command for the board), ``deploy_check``
        (the dumps' folder in the bundle, or None).

    Raises:
        ConfigError: bad preprocessing spec or model name, a compiled or quantized xmodel path that does
            not exist, or an ``out_dir`` that holds something else.
        CompileError: no compiled xmodel and no compile plan either.
        HandoffError: a file does not match ``expected``, or the quantized xmodel fails its check.
    """
    if not vai_c.is_plain_name(model_name):
        raise ConfigError("deploy: model name must be letters, digits, '_', '-' or '.' (not first), got %r"
                          % (model_name,))
    top_k = (classification or {}).get("top_k", 1)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError("deploy: classification top_k must be an int >= 1, got %r" % (top_k,))
    spec = preprocess_spec(preprocess)
    xmodel = _compiled_path(compiled_xmodel)
    if xmodel is not None and not os.path.isfile(xmodel):
        raise ConfigError("deploy: compiled xmodel %s does not exist" % xmodel)
    plan_dir = plan_dir or os.path.join(run_dir, "compile")
    plans = [os.path.join(plan_dir, n) for n in PLAN_FILES]
    if xmodel is None and not all(os.path.isfile(p) for p in plans):
        raise CompileError("deploy: there is no compiled xmodel and no compile plan in %s; run the compile step "
                           "first" % plan_dir)
    if xmodel is None and quantized_xmodel is not None and not os.path.isfile(quantized_xmodel):
        raise ConfigError("deploy: quantized xmodel %s does not exist" % quantized_xmodel)
    out_dir = os.path.abspath(out_dir)
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not os.path.isfile(os.path.join(out_dir, MANIFEST)):
        raise ConfigError("deploy: %s exists and is not a deploy bundle (no %s); choose an empty folder"
                          % (out_dir, MANIFEST))
    # everything the bundle carries, read and checked before anything is written
    copied = []  # type: List[Tuple[str, str, bytes, int]]  # (name in the model folder, source, bytes, mode)
    if xmodel is not None:
        copied.append((model_name + ".xmodel", xmodel, _read(xmodel, expected, redo), 0o666))
        status = "compiled: %s.xmodel is ready for the board" % model_name
    else:
        copied += [(os.path.basename(p), p, _read(p, expected, redo), os.stat(p).st_mode & 0o777) for p in plans]
        if quantized_xmodel is not None:
            data = _read(quantized_xmodel, expected, redo)
            check_quantized_xmodel(data, os.path.relpath(quantized_xmodel, run_dir).replace(os.sep, "/"),
                                   spec["input_shape"], spec["input_fix_pos"], redo)
            copied.append((os.path.basename(quantized_xmodel), quantized_xmodel, data, 0o666))
            status = ("not compiled: compiling needs the Vitis AI image; %s/%s is the quantized model and "
                      "%s/compile_plan.md says how to compile it there"
                      % (model_name, os.path.basename(quantized_xmodel), model_name))
        else:
            status = ("not compiled: compiling needs the Vitis AI image; %s/compile_plan.md says how, and there "
                      "is no xmodel in this bundle" % model_name)
    dumps = [(n, src, _read(src, expected, redo), 0o666) for n, src in sorted((deploy_check or {}).items())]
    copied += dumps
    written = [(n, data, mode) for n, _, data, mode in copied]
    written.append((model_name + ".prototxt", model_prototxt(model_name, spec, classification).encode(), 0o666))
    written.append((PREPROCESS, (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode(), 0o666))
    if spec["class_names"]:
        written.append((WORDS, words_text(spec["class_names"]).encode("utf-8"), 0o666))
    written.sort(key=lambda item: item[0])
    sums = "".join("%s  %s\n" % (hashlib.sha256(data).hexdigest(), n) for n, data, _ in written).encode()
    files = [{"path": model_name + "/" + n, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
             for n, data, _ in sorted(written + [(SUMS, sums, 0o666)], key=lambda item: item[0])]
    quantized = [(n, data) for n, src, data, _ in copied if src == quantized_xmodel and xmodel is None]
    manifest = {
        "model_name": model_name,
        "compiled": xmodel is not None,
        "status": status,
        "model_dir": model_name,
        "source_xmodel": xmodel,
        "quantized_xmodel": None if not quantized else {
            "path": model_name + "/" + quantized[0][0], "sha256": hashlib.sha256(quantized[0][1]).hexdigest()},
        "run_dir": os.path.abspath(run_dir),
        "files": files,
        "sources": [{"path": model_name + "/" + n, "from": src, "checked": src in (expected or {})}
                    for n, src, _, _ in copied],
        "class_names": spec["class_names_file"] and model_name + "/" + spec["class_names_file"],
        "preprocess": spec,
        "install": "scp -r %s root@<board>:%s/" % (model_name, BOARD_MODELS),
        "deploy_check": model_name + "/" + os.path.dirname(dumps[0][0]) if dumps else None,
    }
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(out_dir) + "-")
    os.chmod(work, 0o777 & ~process_umask())  # mkdtemp makes 0700; the bundle is copied to boards and shared
    try:
        model_dir = os.path.join(work, model_name)
        os.makedirs(model_dir)
        for n, data, mode in written + [(SUMS, sums, 0o666)]:
            if "/" in n:  # the deploy-check dumps' folder
                os.makedirs(os.path.dirname(os.path.join(model_dir, n)), exist_ok=True)
            _write(os.path.join(model_dir, n), data, mode)
        _write(os.path.join(work, MANIFEST), (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.replace(work, out_dir)
    finally:
        if os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)
    return manifest
