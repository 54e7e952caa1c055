"""Load ``.pt``/``.pth`` files without letting them run code.

``torch.load(weights_only=True)`` is the safe loader, but torch 1.13's version (the Vitis AI 3.5
image) rejects plain Python floats in a pickle ("Unsupported operand 71", opcode BINFLOAT), and the
real quantizer's ``bias_corr.pth`` is a dict of lists of floats (docs/quantizer.md#the-quant_info-format).
When the weights-only loader refuses a zip-format file (``torch.save``'s format since torch 1.6), it is
read again with an unpickler that resolves only the globals a tensor checkpoint needs (tensor rebuild
functions and OrderedDict); any other global, such as ``os.system`` in a malicious pickle, is refused
before anything executes.

The retry calls ``torch.serialization._load`` directly: torch 1.13's ``torch.load`` silently replaces
any ``pickle_module`` by the standard ``pickle`` when ``weights_only`` is off (checked on 1.13.1), so
passing a restricted module to ``torch.load`` would not protect anything there.
"""
import os
import pickle
import pickletools
import re
import zipfile
from typing import Any, Tuple

import torch

# The only globals a state_dict or bias_corr.pth refers to (storages are resolved by torch.load).
_ALLOWED_GLOBALS = {
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch", "Size"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError("global '%s.%s' is not allowed in a weights file" % (module, name))


class _RestrictedPickleModule:
    """A ``pickle_module`` for ``torch.load`` whose Unpickler refuses arbitrary globals."""
    Unpickler = _RestrictedUnpickler
    UnpicklingError = pickle.UnpicklingError

    @staticmethod
    def load(f: Any, **kwargs: Any) -> Any:
        return _RestrictedUnpickler(f, **kwargs).load()


def safe_torch_load(path: str) -> Any:
    """``torch.load(path, map_location="cpu")`` that never executes code from the file.

    Tries ``weights_only=True`` first; when that loader refuses the file, retries with a restricted
    unpickler (see the module docstring).

    Raises:
        pickle.UnpicklingError (or RuntimeError from torch): the file needs globals other than the
            tensor-rebuild ones, i.e. it would run code; or it is not a torch file.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as first:  # torch raises UnpicklingError or RuntimeError depending on version
        serialization = torch.serialization
        with open(path, "rb") as f:
            if not serialization._is_zipfile(f):
                raise first
        try:
            with serialization._open_zipfile_reader(path) as zf:
                return serialization._load(zf, "cpu", _RestrictedPickleModule, encoding="utf-8")
        except Exception:
            raise first


def explain_load_failure(path: str, exc: BaseException) -> Tuple[str, str]:
    """Why ``safe_torch_load(path)`` raised ``exc``, in words, as ``(kind, reason)``.

    ``kind`` is ``"truncated"`` (an empty file, a zip archive without its central directory or
    with a member that fails its CRC, or a pickle that ends before its STOP opcode: the file was cut
    short or damaged in a copy), ``"code"`` (the file needs a global other than the tensor-rebuild
    ones, i.e. loading it could run code; ``reason`` names the global) or ``"other"``. The reason
    never repeats torch's advice to load with ``weights_only=False``. The file is only read.
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as err:
        return "other", "cannot read it: %s" % (err.strerror or err)
    if size == 0:
        return "truncated", "the file is empty"
    if head == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as zf:
                bad = zf.testzip()
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            return "truncated", "it is cut short or damaged: an incomplete zip archive of %d bytes (%s)" % (size, err)
        if bad is not None:
            return "truncated", "it is damaged: member %s fails its CRC check" % bad
    else:
        with open(path, "rb") as f:
            try:
                for _ in pickletools.genops(f):  # reads opcodes only; nothing is resolved or run
                    pass
            except ValueError as err:
                if any(w in str(err) for w in ("exhausted", "truncated", "not enough data", "no newline found")):
                    return "truncated", "it is cut short: the pickle ends after %d bytes, before its end (%s)" % (
                        size, err)
            except Exception:  # not a pickle at all: fall through to torch's words
                pass
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    found = re.search(r"(unsupported GLOBAL [\w.]+|Unsupported global: GLOBAL [\w.]+|Unsupported class [\w.]+"
                      r"|global '[\w.]+' is not allowed)", text)
    if found:
        return "code", found.group(1)
    operand = re.search(r"Unsupported operand \d+", text)
    first = text.strip().splitlines()[0] if text.strip() else ""
    if "weights_only" in first or "Weights only" in first:  # torch's advice, not a reason
        first = ""
    return "other", operand.group(0) if operand else "%s%s" % (type(exc).__name__, ": " + first if first else "")
