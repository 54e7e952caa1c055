"""The deploy bundle: what goes to the board, with a manifest that lets a user check every file.

Layout (``out_dir``)::

    manifest.json            what is in the bundle, the sha256 of every file, compiled or not and why
    <net>/                   the model folder; copy it to /usr/share/vitis_ai_library/models/ on the board
        <net>.xmodel         the compiled model from vai_c_xir (only when it was compiled)
        <net>.prototxt       Vitis AI Library model config: mean and scale of the input, model_type and
                             the task's parameters (classification: top_k)
        preprocess.json      the board-side preprocessing spec (mean, scale, channel order, layout, fix_pos)
        SHA256SUMS           ``sha256sum -c SHA256SUMS`` checks the folder on the board
        compile_plan.md, compile.sh   instead of the xmodel when it could not be compiled here
        <Model>_int.xmodel   with them, the quantized model the plan compiles (when one was exported)

A bundle made without the Vitis AI image never contains a compiled xmodel: it carries the compile
plan and the quantized ``<Model>_int.xmodel`` (its sha256 in SHA256SUMS and the manifest), and says
so in the manifest.

Board-side input arithmetic (docs/deploy.md#input-arithmetic): the Vitis AI Library computes
``(pixel - mean[c]) * scale[c] * 2^fix_pos``; the pipeline normalizes ``(x - mean) / std`` with mean
and std in source pixel units, so ``scale = 1 / std``. The prototxt is a ``DpuModelParamList`` in
protobuf text format (docs/deploy.md#model-prototxt).
"""
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Union

from .compilers import vai_c
from .fileio import process_umask, sha256_file
from .errors import CompileError, ConfigError
from .config.specs import check_mean_std

MANIFEST = "manifest.json"
PREPROCESS = "preprocess.json"
SUMS = "SHA256SUMS"
PLAN_FILES = ("compile_plan.md", "compile.sh")
BOARD_MODELS = "/usr/share/vitis_ai_library/models"


def _num(x: float) -> str:
    return "%.9g" % float(x)


def model_color(source_color: Optional[str], indices: Optional[List[int]], channels: int) -> Optional[str]:
    """The channel order the model sees, in letters: ``"RGB"``, ``"BGR"``, ``"L"`` (gray, also when
    repeated to several channels), or another letter string for a selection (``"G"``); None when the
    source's own order (``source_color``: RGB, BGR, L or None) is unknown.

    ``indices``: source channel per model channel (the boundary's channel order), or None for the
    source's order; ``channels``: the model's input channels.
    """
    if source_color is None:
        return None
    letters = list(source_color)
    if indices is None:
        indices = list(range(channels)) if channels == len(letters) else [0] * channels
    seen = "".join(letters[i] for i in indices)
    return "L" if set(seen) == {"L"} else seen


def preprocess_spec(preprocess: Dict[str, Any]) -> Dict[str, Any]:
    """The board-side preprocessing spec derived from the run's preprocessing.

    Args:
        preprocess: ``mean`` and ``std`` (one float per model input channel, in source pixel units,
            normalization ``(x - mean) / std``), ``channel_order`` (list of source channel indices per
            model channel, or None for the source's order), ``layout`` (memory layout of the
            quantizer boundary, ``NCHW``/``channels_last``), ``input_fix_pos`` (int from
            ``quant_info.json``'s ``nndct_input_0``, or None), ``input_shape`` (the batch-1 export
            input, NCHW, or None); optional ``source_layout`` and ``source_color`` (RGB, BGR, L).

    Returns a JSON-serialisable dict with those values plus ``scale`` (``1/std``), ``channel_order``
    in letters (:func:`model_color`, or a sentence saying how to make it known), ``channel_indices``,
    ``dpu_layout`` ("NHWC": XIR tensors are NHWC, docs/targets.md#xir-is-nhwc), the int8 formula,
    ``rounding`` and the int8 range.

    Raises:
        ConfigError: missing key, mean/std lengths differ from each other or from the channel count
            of ``input_shape``, a std <= 0, or a non-integer fix_pos.
    """
    for key in ("mean", "std", "channel_order", "layout", "input_fix_pos", "input_shape"):
        if key not in preprocess:
            raise ConfigError("deploy: the preprocessing spec needs %r; got keys %s" % (key, sorted(preprocess)))
    mean, std = check_mean_std(preprocess["mean"], preprocess["std"])
    shape = preprocess["input_shape"]
    if shape is not None and (len(shape) != 4 or int(shape[1]) != len(mean)):
        raise ConfigError("deploy: input_shape %s should be NCHW with %d channels (one per mean value)"
                          % (shape, len(mean)))
    fix_pos = preprocess["input_fix_pos"]
    if fix_pos is not None and int(fix_pos) != fix_pos:
        raise ConfigError("deploy: input_fix_pos must be an integer, got %r" % (fix_pos,))
    indices = preprocess["channel_order"]
    source_color = preprocess.get("source_color")
    color = model_color(source_color, indices, len(mean))
    spec = {
        "mean": mean,
        "std": std,
        "scale": [1.0 / s for s in std],
        "units": "source pixel units (0..255 for uint8 images)",
        "channel_order": color or "not known: the source does not say; set data.source.color to RGB or BGR",
        "source_channel_order": source_color,
        "channel_indices": list(range(len(mean))) if indices is None else [int(i) for i in indices],
        "layout": preprocess["layout"],
        "source_layout": preprocess.get("source_layout"),
        "input_shape": None if shape is None else [int(d) for d in shape],
        "dpu_layout": "NHWC",
        "input_fix_pos": None if fix_pos is None else int(fix_pos),
        "formula": "int8[c] = clamp(round((pixel[c] - mean[c]) * scale[c] * 2^input_fix_pos), -128, 127)",
        "rounding": "half_up (round to nearest, ties toward +inf, as the quantizer rounds its input)",
        "int8_range": [-128, 127],
    }
    return spec


def model_prototxt(net_name: str, spec: Dict[str, Any], classification: Optional[Dict[str, Any]] = None) -> str:
    """Vitis AI Library model config text (docs/deploy.md#model-prototxt): ``model { name kernel { name
    mean... scale... } model_type classification_param { top_k test_accuracy } }``.

    ``mean`` and ``scale`` are listed in model-input channel order, in pixel units (see the module
    docstring); the library multiplies by ``2^input_fix_pos`` itself. ``classification``: None (no
    ``model_type``), or ``top_k`` (int >= 1) and optional ``accuracy`` (the measured quantized top-1,
    written as a comment); ``test_accuracy`` is the library's accuracy-test switch and stays false.
    """
    lines = [
        "# Vitis AI Library model config written by the pipeline (DpuModelParamList text format).",
        "# mean/scale: pixel units, model input channel order %s; int8 = (pixel - mean) * scale * 2^%s."
        % (spec["channel_order"], spec["input_fix_pos"] if spec["input_fix_pos"] is not None else "fix_pos"),
    ]
    if classification is not None and classification.get("accuracy") is not None:
        lines.append("# quantized top-1 accuracy measured by the test step: %.4f" % classification["accuracy"])
    lines += [
        "model {",
        "  name: \"%s\"" % net_name,
        "  kernel {",
        "    name: \"%s_0\"" % net_name,
    ]
    lines += ["    mean: %s" % _num(m) for m in spec["mean"]]
    lines += ["    scale: %s" % _num(s) for s in spec["scale"]]
    lines.append("  }")
    if classification is not None:
        lines += ["  model_type: CLASSIFICATION", "  classification_param {",
                  "    top_k: %d" % int(classification["top_k"]), "    test_accuracy: false", "  }"]
    lines += ["}", ""]
    return "\n".join(lines)


def _write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _compiled_path(compiled: Union[None, str, Dict[str, Any]]) -> Optional[str]:
    if isinstance(compiled, dict):
        return compiled.get("xmodel")
    return compiled


def build_bundle(run_dir: str, out_dir: str, compiled_xmodel: Union[None, str, Dict[str, Any]],
                 preprocess: Dict[str, Any], model_name: str, plan_dir: Optional[str] = None,
                 classification: Optional[Dict[str, Any]] = None,
                 quantized_xmodel: Optional[str] = None) -> Dict[str, Any]:
    """Assemble the deploy bundle in ``out_dir`` and return its manifest (also written to manifest.json).

    Args:
        run_dir: the run folder (recorded in the manifest; ``<run_dir>/compile`` holds the plan).
        out_dir: the bundle folder; built in a temporary sibling and moved into place, replacing an
            earlier bundle (a folder with a manifest.json). A non-empty folder without one is refused.
        compiled_xmodel: path of the compiled ``<net>.xmodel`` (or the dict ``vai_c.compile_xmodel``
            returns), or None when it was not compiled.
        preprocess: see ``preprocess_spec``.
        model_name: the network name: the model folder, xmodel and prototxt are named after it.
        plan_dir: where ``compile_plan.md`` and ``compile.sh`` are (default ``<run_dir>/compile``).
        classification: the task for the prototxt (see ``model_prototxt``), or None.
        quantized_xmodel: the exported ``<Model>_int.xmodel``; when the model was not compiled, the
            bundle carries it (with its sha256, in SHA256SUMS and the manifest) next to the plan,
            so the image can compile it with ``compile.sh`` alone.

    Returns:
        the manifest: ``model_name``, ``compiled`` (bool), ``status`` (one sentence), ``model_dir``,
        ``files`` (list of ``{"path": relative to out_dir, "sha256", "bytes"}``), ``preprocess``,
        ``install`` (the copy command for the board).

    Raises:
        ConfigError: bad preprocessing spec or model name, a compiled xmodel path that does not exist,
            or an ``out_dir`` that holds something else.
        CompileError: no compiled xmodel and no compile plan either.
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
    out_dir = os.path.abspath(out_dir)
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not os.path.isfile(os.path.join(out_dir, MANIFEST)):
        raise ConfigError("deploy: %s exists and is not a deploy bundle (no %s); choose an empty folder"
                          % (out_dir, MANIFEST))
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(dir=parent, prefix="." + os.path.basename(out_dir) + "-")
    os.chmod(work, 0o777 & ~process_umask())  # mkdtemp makes 0700; the bundle is copied to boards and shared
    try:
        model_dir = os.path.join(work, model_name)
        os.makedirs(model_dir)
        if xmodel is not None:
            shutil.copyfile(xmodel, os.path.join(model_dir, model_name + ".xmodel"))
            status = "compiled: %s.xmodel is ready for the board" % model_name
        else:
            for p in plans:
                shutil.copy2(p, os.path.join(model_dir, os.path.basename(p)))
            if quantized_xmodel is not None and os.path.isfile(quantized_xmodel):
                shutil.copyfile(quantized_xmodel, os.path.join(model_dir, os.path.basename(quantized_xmodel)))
                status = ("not compiled: compiling needs the Vitis AI image; %s/%s is the quantized model and "
                          "%s/compile_plan.md says how to compile it there"
                          % (model_name, os.path.basename(quantized_xmodel), model_name))
            else:
                quantized_xmodel = None
                status = ("not compiled: compiling needs the Vitis AI image; %s/compile_plan.md says how, and there "
                          "is no xmodel in this bundle" % model_name)
        _write_text(os.path.join(model_dir, model_name + ".prototxt"), model_prototxt(model_name, spec, classification))
        _write_text(os.path.join(model_dir, PREPROCESS), json.dumps(spec, indent=2, sort_keys=True) + "\n")
        names = sorted(os.listdir(model_dir))
        sums = ["%s  %s" % (sha256_file(os.path.join(model_dir, n)), n) for n in names]
        _write_text(os.path.join(model_dir, SUMS), "\n".join(sums) + "\n")
        files = []  # type: List[Dict[str, Any]]
        for n in sorted(names + [SUMS]):
            full = os.path.join(model_dir, n)
            files.append({"path": model_name + "/" + n, "sha256": sha256_file(full), "bytes": os.path.getsize(full)})
        manifest = {
            "model_name": model_name,
            "compiled": xmodel is not None,
            "status": status,
            "model_dir": model_name,
            "source_xmodel": xmodel,
            "quantized_xmodel": None if xmodel is not None or quantized_xmodel is None else {
                "path": model_name + "/" + os.path.basename(quantized_xmodel),
                "sha256": sha256_file(os.path.join(model_dir, os.path.basename(quantized_xmodel)))},
            "run_dir": os.path.abspath(run_dir),
            "files": files,
            "preprocess": spec,
            "install": "scp -r %s root@<board>:%s/" % (model_name, BOARD_MODELS),
        }
        _write_text(os.path.join(work, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.replace(work, out_dir)
    finally:
        if os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)
    return manifest
