"""The working copy of a float model that ``capture`` traces and rewrites, without copying its weights.

``copy.deepcopy`` of a model copies every parameter and buffer and walks every attribute in Python:
about 1 ms for the 24k-parameter digits CNN, as much as a float forward of a calibration batch.
The rewrites never write a tensor in place: module swaps and BatchNorm conversion put new modules
into the copy, BN folding assigns new ``nn.Parameter`` objects, CLE assigns ``param.data``
(``pipeline.fx.rewrites``, ``pipeline.quantizers.sim.cle``), and calibration and test mode read
the weights or copy them. So the copy gets new module objects and new ``nn.Parameter`` / buffer
tensor objects, but their tensors share storage with the caller's: assigning ``.data`` or a new
parameter on the copy leaves the caller's model as it was.
"""
import copy
from collections import OrderedDict
from typing import Any, Dict

import torch
from torch import nn

# attribute values shared as they are: immutable, so the copy cannot change them
_IMMUTABLE = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size)
# empty containers of these exact types are copied as new empty ones (the common case, cheaply)
_EMPTY_TYPES = (dict, OrderedDict, set, list)


def _immutable(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    return isinstance(value, _IMMUTABLE)


def work_copy(model: nn.Module) -> nn.Module:
    """An eval-mode CPU copy of ``model`` whose weights share storage with it.

    Every module of the tree is a new object of the same class (``training`` False), with its own
    tables of submodules, parameters and buffers. Parameters are new ``nn.Parameter`` objects
    without grad, buffers new tensors (detached, moved to the CPU: a copy only for a tensor
    elsewhere); both share storage with ``model``'s and must never be written in place (assign
    new tensors instead). Tied parameters stay tied. Every other attribute is shared when immutable
    (numbers, strings, tuples of them), else deep-copied with the modules and tensors above mapped
    to their copies (hook tables, a plain list of submodules, a tensor attribute), as
    ``copy.deepcopy`` would. ``model`` is never modified.

    Args:
        model: the float model (any device).

    Returns:
        The copy (an ``nn.Module`` of ``type(model)``).
    """
    memo = {}  # type: Dict[int, Any]   # id(original) -> copy, as copy.deepcopy's memo
    modules = []
    for m in model.modules():  # each module once, also when it appears under two names
        new = m.__class__.__new__(m.__class__)
        memo[id(m)] = new
        modules.append((m, new))
        for table in ("_parameters", "_buffers"):
            for t in m.__dict__.get(table, {}).values():
                if t is not None and id(t) not in memo:
                    memo[id(t)] = _tensor_copy(t, table == "_parameters")
    for m, new in modules:
        state = new.__dict__
        for key, value in m.__dict__.items():
            if key in ("_parameters", "_buffers", "_modules"):
                state[key] = value.__class__((k, None if v is None else memo[id(v)]) for k, v in value.items())
            elif _immutable(value):
                state[key] = value
            elif type(value) in _EMPTY_TYPES and not value:  # most hook tables
                state[key] = type(value)()
            else:
                state[key] = copy.deepcopy(value, memo)
        state["training"] = False
    return memo[id(model)]


def _tensor_copy(t: torch.Tensor, parameter: bool) -> torch.Tensor:
    data = t.detach().cpu()
    return nn.Parameter(data, requires_grad=False) if parameter else data
