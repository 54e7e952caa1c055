"""Read and write ``quant_info.json`` and ``bias_corr.pth`` in the real quantizer's format.

``quant_info.json`` (docs/quantizer.md#the-quant_info-format; written by ``TORCHQuantizer.export_quant_config`` with
``nndct_shared/utils/io.py`` ``to_jsonstr``) is a JSON object with, in this order:

- ``"param"``: ``"<Class>::<module path>.weight|bias"`` (or another state-dict path) ->
  ``[[bit_width, fix_pos]]``; fix_pos is null for a parameter nndct registers but never quantizes
- ``"output"``: ``"<Class>::<node name>"`` (e.g. ``"Net::nndct_relu_2"``) -> ``[[bit_width, fix_pos]]``
- ``"input"``: node name -> list of ``[bit_width, fix_pos]`` (empty with the default strategy)
- ``"fast_finetuned"``, ``"bias_corrected"``: booleans
- ``"version"``: the quantizer's version string; ``"graph_md5"``: md5 of the graph description
  the real quantizer checks in test mode.

The writer reproduces the real file byte for byte (two-space indentation, ``[[8,5]]`` without
spaces, no trailing newline) and writes atomically (temporary file + ``os.replace``).

``bias_corr.pth`` is a ``torch.save`` of a dict: conv/linear node name
(``"<Class>::nndct_conv2d_1"``) -> Python list of floats (float32 values), the amount subtracted
from the bias in test mode (docs/arithmetic.md#bias-and-bias-correction).
"""
import os
from typing import Any, Dict, List, Optional

import torch

from ..errors import QuantizationError
from ..fileio import parse_json, torch_bytes, write_bytes
from ..safeload import explain_load_failure, safe_torch_load

QUANT_INFO_FILE = "quant_info.json"
BIAS_CORR_FILE = "bias_corr.pth"
TOP_LEVEL_KEYS = ("param", "output", "input", "fast_finetuned", "bias_corrected", "version",
                  "graph_md5")
# The "version" field the simulation writes into quant_info.json, as the real quantizer writes its own there (the
# golden files say "3.5.0+local+torch2.13.0+cpu"); the sim quantizer's version is SimBackend.version().
SIM_VERSION = "3.5.0+pipeline-sim"


def _list_str(lst: List[Any]) -> str:
    parts = []
    for item in lst:
        if isinstance(item, str):
            parts.append('"%s"' % item)
        elif isinstance(item, list):
            parts.append("[%s]" % _list_str(item))
        elif item is None:
            parts.append("null")
        else:
            parts.append(str(item))
    return ",".join(parts)


def to_jsonstr(obj: Dict[str, Any], indent: int = 2) -> str:
    """Serialize ``obj`` in nndct's layout (``to_jsonstr`` in ``nndct_shared/utils/io.py``).

    Only dict, list, str, bool, int and None values are expected (what quant_info.json holds).
    """
    lines = []
    for k, v in obj.items():
        head = '%s"%s":' % (" " * indent, k)
        if isinstance(v, list):
            lines.append(head + "[%s]" % _list_str(v))
        elif isinstance(v, str):
            lines.append(head + '"%s"' % v)
        elif isinstance(v, dict):
            lines.append(head + "\n" + to_jsonstr(v, indent + 2))
        elif isinstance(v, bool):
            lines.append(head + ("true" if v else "false"))
        else:
            lines.append(head + str(v))
    pad = " " * (indent - 2)
    return "%s{\n%s\n%s}" % (pad, ",\n".join(lines), pad)


def make_quant_info(param: Dict[str, Optional[int]], output: Dict[str, Optional[int]], bitwidth: int,
                    bias_corrected: bool, graph_md5: str,
                    version: str = SIM_VERSION, entries: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """Build the quant_info dict from ``{name: fix_pos}`` maps (bit width the same everywhere).

    Returns a dict with the keys of ``TOP_LEVEL_KEYS`` in order; entries are
    ``[[bitwidth, fix_pos]]`` (a param or output whose fix_pos is None, one nndct registers but
    never quantizes, is ``[[bitwidth, None]]``, written ``[[8,null]]``); ``"input"`` is empty and
    ``"fast_finetuned"`` false. ``entries``: output name -> its number of pairs where that is more
    than one (a quantizable node with several outputs, ``x.max(dim)``: nndct enters each of its
    ``out_tensors``); ``fix_pos`` is the first's, the others have none (``[[8,6],[8,null]]``).
    """
    entries = entries or {}
    return {
        "param": {k: [[bitwidth, None if p is None else int(p)]] for k, p in param.items()},
        "output": {k: [[bitwidth, None if p is None else int(p)]] + [[bitwidth, None]] * (entries.get(k, 1) - 1)
                   for k, p in output.items()},
        "input": {},
        "fast_finetuned": False,
        "bias_corrected": bool(bias_corrected),
        "version": version,
        "graph_md5": graph_md5,
    }


def write_quant_info(out_dir: str, info: Dict[str, Any]) -> str:
    """Write ``out_dir/quant_info.json`` atomically in nndct's layout; returns the path.

    Raises:
        QuantizationError: ``info`` lacks one of the top-level keys.
    """
    path = os.path.join(out_dir, QUANT_INFO_FILE)
    return write_bytes(path, quant_info_bytes(info))


def quant_info_bytes(info: Dict[str, Any]) -> bytes:
    """The bytes of ``quant_info.json`` for ``info`` (nndct's layout, UTF-8, no trailing newline).

    Raises:
        QuantizationError: ``info`` lacks one of the top-level keys.
    """
    missing = [k for k in TOP_LEVEL_KEYS if k not in info]
    if missing:
        raise QuantizationError("quant_info: expected keys %s, missing %s" % (list(TOP_LEVEL_KEYS), missing))
    return to_jsonstr({k: info[k] for k in TOP_LEVEL_KEYS}).encode("utf-8")


def read_quant_info(out_dir: str) -> Dict[str, Any]:
    """Read and check ``out_dir/quant_info.json`` (written by the real quantizer or by the sim).

    Returns the parsed dict. Every ``param``/``output``/``input`` entry is checked to be a
    non-empty list of ``[bit_width, fix_pos]`` integer pairs within what a quantizer produces
    (``BIT_WIDTHS``, ``FIX_POS_RANGE``; booleans are not integers here).

    Raises:
        QuantizationError: the file is missing (run calibration first), is not JSON, or an entry
            is malformed (the message names the key).
    """
    path = os.path.join(out_dir, QUANT_INFO_FILE)
    if not os.path.isfile(path):
        raise QuantizationError(
            "test mode needs %s, which does not exist: run the calibration step (quant_mode "
            "'calib' and export_quant_config()) with output_dir=%r first" % (path, out_dir))
    try:
        with open(path, "r", encoding="utf-8") as f:
            info = parse_json(f.read())
    except ValueError as e:  # not JSON, not UTF-8, or nested too deep (fileio.parse_json)
        raise QuantizationError("%s is not valid JSON (%s); re-run calibration" % (path, e))
    if not isinstance(info, dict):
        raise QuantizationError("%s: expected a JSON object with param, output and input, got a %s; re-run "
                                "calibration" % (path, type(info).__name__))
    for section in ("param", "output", "input"):
        entries = info.get(section)
        if not isinstance(entries, dict):
            raise QuantizationError("%s: expected an object under %r, got %r" % (path, section, entries))
        for name, value in entries.items():
            if not (isinstance(value, list) and value and all(_is_pair(e, section != "input") for e in value)):
                raise QuantizationError("%s: %s entry %r should be [[bit_width, fix_pos]] with bit_width %d..%d and "
                                        "fix_pos %d..%d (what a quantizer produces), got %r; re-run calibration"
                                        % (path, section, name, BIT_WIDTHS[0], BIT_WIDTHS[1], FIX_POS_RANGE[0],
                                           FIX_POS_RANGE[1], str(value)[:80]))
    return info


BIT_WIDTHS = (2, 16)  # the bit widths the quantizers take (quantizer.bitwidth)
# fix positions a quantizer can produce: a float32 range (below 2**128) gives at least -128, the cap
# (max_fix_position, 12 by default) at most 12; 64 leaves room for a raised cap
FIX_POS_RANGE = (-128, 64)


def _is_pair(entry: Any, unquantized_ok: bool = False) -> bool:
    """``[bit_width, fix_pos]``: two ints (not bools) within BIT_WIDTHS and FIX_POS_RANGE; with
    ``unquantized_ok`` (param and output entries) fix_pos may also be None: a tensor nndct registers
    and never quantizes (a state-dict tensor a quantizable node takes directly, e.g. a layer scale;
    an int64 size a quantizable node computes, e.g. Swin's ``B * num_windows``)."""
    if not (isinstance(entry, list) and len(entry) == 2
            and all(isinstance(i, int) and not isinstance(i, bool) for i in entry[:1])):
        return False
    if entry[1] is None and unquantized_ok:
        return BIT_WIDTHS[0] <= entry[0] <= BIT_WIDTHS[1]
    if not isinstance(entry[1], int) or isinstance(entry[1], bool):
        return False
    return BIT_WIDTHS[0] <= entry[0] <= BIT_WIDTHS[1] and FIX_POS_RANGE[0] <= entry[1] <= FIX_POS_RANGE[1]


def write_bias_corr(out_dir: str, corr: Dict[str, Optional[torch.Tensor]]) -> str:
    """Write ``out_dir/bias_corr.pth`` atomically: node name -> Python list of floats (real format).

    Args:
        corr: node name -> 1-D float32 tensor (the correction subtracted from the bias), or None
            for a conv/linear without bias (nndct keeps such entries as None).
    """
    return write_bytes(os.path.join(out_dir, BIAS_CORR_FILE), bias_corr_bytes(corr))


def bias_corr_bytes(corr: Dict[str, Optional[torch.Tensor]]) -> bytes:
    """The bytes of ``bias_corr.pth`` for ``corr`` (see ``write_bias_corr``): a ``torch.save`` of
    node name -> Python list of floats, stable (equal tables give equal bytes)."""
    payload = {k: None if v is None else v.detach().cpu().numpy().tolist() for k, v in corr.items()}
    return torch_bytes(payload)


def read_bias_corr(out_dir: str) -> Dict[str, Optional[torch.Tensor]]:
    """Read ``out_dir/bias_corr.pth``: node name -> float32 1-D tensor (None kept as None).

    Accepts the real format (lists of floats) and dicts of tensors.

    Raises:
        QuantizationError: the file is missing (bias correction is on, so calibration must have
            written it), truncated, refused (it would run code), does not hold a dict, or an entry is
            not a list of finite numbers (or None).
    """
    path = os.path.join(out_dir, BIAS_CORR_FILE)
    if not os.path.isfile(path):
        raise QuantizationError(
            "bias correction is on but %s does not exist: re-run calibration with the same "
            "quant_config_file, or switch include_bias_corr off for both steps" % path)
    try:
        data = safe_torch_load(path)  # never runs code from the file (torch 1.13 included)
    except Exception as exc:  # UnpicklingError, RuntimeError: torch's kinds vary by version
        kind, reason = explain_load_failure(path, exc)
        what = {"truncated": "is truncated or damaged",
                "code": "was refused: loading it could run code from the file"}.get(kind, "cannot be read")
        raise QuantizationError("%s %s (%s); it was not loaded. Run the calibration again (quant_mode 'calib' "
                                "and export_quant_config(), or the calib step) to write it anew" % (path, what, reason))
    if not isinstance(data, dict):
        raise QuantizationError("%s: expected a dict node name -> list of floats, got %s"
                                % (path, type(data).__name__))
    out = {}  # type: Dict[str, Optional[torch.Tensor]]
    for k, v in data.items():
        if v is None:
            out[k] = None
            continue
        numbers = isinstance(v, torch.Tensor) or (isinstance(v, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))
        value = torch.as_tensor(v, dtype=torch.float32).reshape(-1) if numbers else None
        if value is None or not bool(torch.isfinite(value).all()):
            raise QuantizationError("%s: the entry %r should be a list of finite numbers (or None), got %s; run the "
                                    "calibration again to write it anew" % (path, k, str(v)[:80]))
        out[k] = value
    return out

