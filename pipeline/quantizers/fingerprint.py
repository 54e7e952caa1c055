"""Calibration fingerprint: what a calibration was made for, kept beside ``quant_info.json``.

A ``quant_info.json`` holds fix positions only (docs/quantizer.md#the-quant_info-format); nothing in it
says which target, model, input shape or quantizer produced it, and the real quantizer's own ``graph_md5``
check is internal to it. The calib step therefore writes ``calib_fingerprint.json`` next to it; the test
and export steps rebuild the fingerprint from what they are about to use and call ``check_fingerprint``,
which names every field that differs. Used by every backend.
"""
import hashlib
import os
import re
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from ..errors import FingerprintMismatchError
from ..fileio import parse_json, sha256_file, write_json
from ..fx.float_trace import fx_trace
from .base import BACKENDS, backend_class

FILE_NAME = "calib_fingerprint.json"


def quantizer_version(backend: str) -> Optional[str]:
    """The ``version()`` of the backend registered under ``backend`` (``quantizers/base.py``), or None when
    that quantizer is not installed or the name is not registered. Nothing heavy is imported."""
    if backend not in BACKENDS:
        return None
    return backend_class(backend).version()


def _file_sha256(path: Optional[str]) -> Optional[str]:
    return None if path is None else sha256_file(path)


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    return "%s.%s" % (getattr(target, "__module__", "?"), getattr(target, "__qualname__", repr(target)))


def _fx_graph_lines(model: torch.nn.Module, traced: Any = None) -> List[str]:
    """One line per node of the torch.fx graph: op, target, arguments and, for modules, their repr.
    ``traced``: a ``pipeline.fx.float_trace.FloatTrace`` of ``model`` (the same lines, no new trace)."""
    import torch.fx
    if traced is not None:
        if traced.graph is None:
            raise traced.error
        graph, modules = traced.graph, dict(traced.module.named_modules())
    else:
        root, graph = fx_trace(lambda: model)  # the trace FloatTrace makes: the same lines
        modules = dict(root.named_modules())
    lines = []
    for node in graph.nodes:
        line = "%s %s %s %s %r" % (node.op, node.name, _target_name(node.target), node.args, node.kwargs)
        if node.op == "call_module":
            sub = modules[node.target]
            line += " %s(%s)" % (type(sub).__name__, sub.extra_repr())
        lines.append(line)
    return lines


def _parameter_lines(model: torch.nn.Module) -> List[str]:
    lines = ["%s %s(%s)" % (name, type(m).__name__, m.extra_repr()) for name, m in model.named_modules()]
    lines += ["%s %s %s" % (name, tuple(t.shape), t.dtype) for name, t in model.state_dict().items()]
    return lines


def graph_hash(model: torch.nn.Module, traced: Any = None) -> Dict[str, str]:
    """Hash of the model's structure: ``{"graph_hash": sha256 hex, "graph_hash_method": "fx"|"parameters"}``.

    ``fx``: the capture's torch.fx trace of the model (``fx.float_trace.fx_trace``) (nodes, call targets, arguments, module hyper
    parameters). When fx cannot trace the model (a Python branch on a traced value: one on sizes, which
    the capture follows on the example, or one on the data), ``parameters``: module names and hyper
    parameters plus state_dict names, shapes and dtypes (no example is at hand here, and the example's
    shape is a field of the fingerprint of its own). The model is not modified.
    ``traced``: the step's ``FloatTrace`` of ``model`` (an eval-mode model), used instead of a new trace.
    """
    try:
        lines, method = _fx_graph_lines(model, traced), "fx"
    except Exception:  # fx raises many kinds of errors on untraceable code; fall back by design
        lines, method = _parameter_lines(model), "parameters"
    digest = hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
    return {"graph_hash": digest, "graph_hash_method": method}


def weights_hash(model: torch.nn.Module) -> str:
    """sha256 (hex) of the state_dict: every tensor's name, shape, dtype and bytes (copied to CPU)."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        h.update(("%s %s %s\n" % (name, tuple(t.shape), t.dtype)).encode("utf-8"))
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.float().numpy().tobytes())
    return h.hexdigest()


def make_fingerprint(model: torch.nn.Module, example: torch.Tensor, settings: Any,
                     config_hash: str, backend: str, traced: Any = None) -> Dict[str, Any]:
    """Build the fingerprint dict of a calibration (all values JSON-serialisable).

    Args:
        model: the float model (not modified).
        example: an input batch, NCHW; only its sample shape ``example.shape[1:]`` and dtype are
            recorded, because calib, test and export legitimately use different batch sizes.
        settings: a ``QuantSettings`` (target, bitwidth, quant_config_file, device).
        config_hash: hash of the config sections that shape the calibration (``LoadedConfig.calib_hash``).
        backend: a name registered in ``quantizers/base.py`` (``BACKENDS``).
        traced: the step's ``pipeline.fx.float_trace.FloatTrace`` of ``model`` (no new trace), or None.

    Returns fields: backend, quantizer_version, torch_version, target, bitwidth,
    quant_config_file_sha256, input_shape (list, no batch dimension), input_dtype, config_hash,
    graph_hash, graph_hash_method, weights_hash. The device is not part of it: a calibration made on
    GPU is valid on CPU.
    """
    fp = {
        "backend": backend,
        "quantizer_version": quantizer_version(backend),
        "torch_version": torch.__version__,
        "target": settings.target,
        "bitwidth": settings.bitwidth,
        "quant_config_file_sha256": _file_sha256(settings.quant_config_file),
        "input_shape": [int(d) for d in example.shape[1:]],
        "input_dtype": str(example.dtype),
        "config_hash": config_hash,
    }
    fp.update(graph_hash(model, traced))
    fp["weights_hash"] = weights_hash(model)
    return fp


def write_fingerprint(out_dir: str, fp: Dict[str, Any]) -> str:
    """Write ``fp`` to ``<out_dir>/calib_fingerprint.json`` (temporary name, then os.replace); return the path."""
    return write_json(os.path.join(out_dir, FILE_NAME), fp)


def read_fingerprint(out_dir: str) -> Dict[str, Any]:
    """Read ``<out_dir>/calib_fingerprint.json``.

    Raises:
        FingerprintMismatchError: the file is missing or unreadable (the calibration was not made by
            this pipeline, or was interrupted).
    """
    path = os.path.join(out_dir, FILE_NAME)
    if not os.path.isfile(path):
        raise FingerprintMismatchError("no %s beside quant_info.json in %s: the calibration there was not "
                                       "made by this pipeline's calib step; run the calib step again"
                                       % (FILE_NAME, out_dir))
    try:
        with open(path, "r", encoding="utf-8") as f:
            return parse_json(f.read())
    except ValueError as exc:  # not JSON, not UTF-8, or nested too deep (fileio.parse_json)
        raise FingerprintMismatchError("%s is not valid JSON (%s); run the calib step again" % (path, exc))


# what a field records, where the message says it (the config.* fields name themselves)
MEANING = {
    "graph_hash": "the model's structure", "weights_hash": "the weights", "config_hash": "the calibration's config",
    "quant_config_file_sha256": "the quant_config_file's content", "calib_rows_sha256": "the calibration images",
}
# fields this environment decides: setting nothing back restores them
ENVIRONMENT = ("torch_version", "quantizer_version")
# a field the runner also records as the config key that sets it: named once, as that key
SAME_AS = {"target": "config.quantizer.target", "bitwidth": "config.quantizer.bitwidth",
           "backend": "config.quantizer.backend"}
# where no config key sets a field (the drop-in API), the argument that does
ARGUMENTS = {"target": "target", "bitwidth": "bitwidth"}
_HEX = re.compile(r"^[0-9a-f]{32,}$")


def _short(value: Any) -> str:
    """A value for the message: a hex digest cut to 12 digits, anything else as its repr cut to 60 characters."""
    if isinstance(value, str) and _HEX.match(value):
        return value[:12] + "..."
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _first_difference(a: Any, b: Any, path: str = "") -> Optional[Tuple[str, Any, Any]]:
    """Where two JSON-like values first differ: ``(path such as "[1].height", value in a, value in b)``,
    a key one side lacks as ``"(not set)"``; None when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            where = "%s.%s" % (path, key)
            if key not in a or key not in b:
                return where, a.get(key, "(not set)"), b.get(key, "(not set)")
            found = _first_difference(a[key], b[key], where)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, "%s[%d]" % (path, i))
            if found is not None:
                return found
        return None
    return None if a == b else (path, a, b)


def _change(was: Any, now: Any) -> str:
    """``calibrated X, now Y``; for lists and dicts too long to show whole (a list of stages), the first
    field that differs, so the change is not cut off: ``calibrated and now differ first at [0].height:
    calibrated 16, now 20``."""
    whole = "calibrated %s, now %s" % (_short(was), _short(now))
    if not (isinstance(was, (list, dict)) and isinstance(now, (list, dict))) or "..." not in whole:
        return whole
    found = _first_difference(was, now)
    if found is None or not found[0]:
        return whole
    return "calibrated and now differ first at %s: calibrated %s, now %s" % (found[0].lstrip("."), _short(found[1]),
                                                                             _short(found[2]))


def mismatch_message(out_dir: str, stored: Dict[str, Any], expected: Dict[str, Any], ignore: Iterable[str] = (),
                     redo: str = "run the calib step again") -> Optional[str]:
    """The message of a fingerprint that differs from ``expected``, or None when it does not.

    It names only the fields whose values differ, each with the calibrated and the current value (hex
    digests shortened to 12 digits, long values cut), a field the runner records twice once (``target``
    as ``config.quantizer.target``); the fields ``expected`` has and the stored one lacks (a calibration
    made by another tool or version) as one count. Then what to do: ``redo``, and, unless the environment
    (torch, the quantizer), the weights or the writer differ, the exact settings to set back to their
    calibrated values (a ``config.*`` field as its config key, ``target``/``bitwidth`` as the drop-in's
    argument).
    """
    skip = set(ignore)
    differ = {k: (stored[k], expected.get(k)) for k in sorted(set(stored) | set(expected))
              if k not in skip and k in stored and stored[k] != expected.get(k)}
    missing = sorted(k for k in expected if k not in skip and k not in stored)
    if not differ and not missing:
        return None
    for field, key in SAME_AS.items():  # the config key says it
        if field in differ and key in differ and differ[field] == differ[key]:
            del differ[field]
    parts = ["%s%s: %s" % (k, " (%s)" % MEANING[k] if k in MEANING else "", _change(was, now))
             for k, (was, now) in differ.items()]
    if missing:
        shown = ", ".join(missing[:3]) + (" and %d more" % (len(missing) - 3) if len(missing) > 3 else "")
        parts.append("it records none of %d %s this check compares (%s): it was made by another tool or version"
                     % (len(missing), "field" if len(missing) == 1 else "fields", shown))
    settable = []  # type: List[str]
    for k, (was, _) in differ.items():
        if k.startswith("config."):
            found = _first_difference(was, differ[k][1]) if _short(was).endswith("...") else None
            where, value = (found[0], found[1]) if found and found[0] else ("", was)
            settable.append("set %s%s back to %s" % (k[len("config."):], where, _short(value)))
        elif k in ARGUMENTS and SAME_AS.get(k) not in expected:
            settable.append("pass %s=%s again" % (ARGUMENTS[k], _short(was)))
    # another environment, other weights or another writer: only a new calibration fits
    blocked = missing or any(k in ENVIRONMENT or k == "weights_hash" for k in differ)
    todo = redo + (", or " + "; ".join(settable) if settable and not blocked else "")
    return "the calibration in %s was made for something else: %s. %s" % (out_dir, "; ".join(parts),
                                                                          todo[:1].upper() + todo[1:])


def check_fingerprint(out_dir: str, expected: Dict[str, Any], ignore: Iterable[str] = (),
                      redo: str = "run the calib step again") -> None:
    """Compare the stored fingerprint of ``out_dir`` with ``expected`` (from ``make_fingerprint``).

    Args:
        ignore: field names not compared, e.g. ``("backend", "quantizer_version")`` to test a
            calibration of one backend with the other.
        redo: what to do, for the message.

    Raises:
        FingerprintMismatchError: :func:`mismatch_message`: only the fields that differ, with the
            calibrated and the current value, and what to do (calibrate again, or the settings to set back).
    """
    message = mismatch_message(out_dir, read_fingerprint(out_dir), expected, ignore, redo)
    if message is not None:
        raise FingerprintMismatchError(message)
