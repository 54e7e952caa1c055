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
import pickle
from typing import Any

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
