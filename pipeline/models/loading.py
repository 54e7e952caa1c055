"""Build a model from a config (zoo name or import path) and load checkpoints safely.

Checkpoints are plain ``state_dict`` files loaded with ``torch.load(weights_only=True)``: a pickle
that carries code is refused and nothing in it executes (torch >= 1.13).
"""
import importlib
import os
from typing import Any, Dict, Optional

import torch
from torch import nn

from ..errors import ConfigError, PipelineError
from ..fileio import not_a_file
from ..safeload import explain_load_failure, safe_torch_load
from .zoo import ZOO


def resolve_factory(zoo: Optional[str], factory: Optional[str]):
    """Return the callable that builds the model.

    Args:
        zoo: a name in ``pipeline.models.zoo.ZOO`` (``digits_cnn``, ``resnet18``, ``mobilenet_v2``).
        factory: an import path ``"package.module:function"`` (any callable returning an nn.Module).
    Exactly one of the two is given.

    Raises:
        ConfigError: unknown zoo name, malformed or unimportable import path.
    """
    if zoo is not None:
        if zoo not in ZOO:
            raise ConfigError("model.zoo: expected one of %s, got %r" % (sorted(ZOO), zoo))
        return ZOO[zoo]
    if factory is None or ":" not in factory:
        raise ConfigError("model.factory: expected an import path 'package.module:function', got %r" % (factory,))
    module_name, _, attr = factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("model.factory: cannot import module %r (%s); is it installed or on PYTHONPATH?"
                          % (module_name, exc))
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ConfigError("model.factory: module %r has no attribute %r" % (module_name, attr))
        fn = getattr(fn, part)
    if not callable(fn):
        raise ConfigError("model.factory: %r is not callable" % factory)
    return fn


def build_model(zoo: Optional[str], factory: Optional[str], kwargs: Dict[str, Any]) -> nn.Module:
    """Instantiate the configured model (random init, eval mode). Raises ConfigError as above, when
    the factory fails on its kwargs' values (a RuntimeError, ValueError, OverflowError or MemoryError:
    a negative or huge size), or when it does not return an ``nn.Module``."""
    fn = resolve_factory(zoo, factory)
    try:
        model = fn(**kwargs)
    except TypeError as exc:  # a misspelt or missing keyword
        raise ConfigError("model.kwargs %s do not fit %s: %s" % (kwargs, zoo or factory, exc))
    except (RuntimeError, ValueError, OverflowError, MemoryError) as exc:  # e.g. a negative size inside torch
        raise ConfigError("model: building %s with model.kwargs %s failed: %s; check the kwargs' values"
                          % (zoo or factory, kwargs, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
    if not isinstance(model, nn.Module):
        raise ConfigError("model: the factory returned %s, expected a torch.nn.Module" % type(model).__name__)
    return model.eval()


def load_state_dict_file(path: str) -> Dict[str, torch.Tensor]:
    """Load a state_dict with ``torch.load(path, map_location='cpu', weights_only=True)``
    (``pipeline.safeload.safe_torch_load``: code in the file never runs, on torch 1.13 too).

    Raises:
        PipelineError: the file is missing, is not a dict of tensors, holds NaN or Inf (the tensors
            named), or is a pickle that needs arbitrary code to load (refused; nothing executes).
    """
    if not os.path.isfile(path):
        raise PipelineError("checkpoint %s %s; run the 'train' step or set model.weights" % (path, not_a_file(path)))
    try:
        state = safe_torch_load(path)
    except Exception as exc:  # UnpicklingError and friends
        kind, reason = explain_load_failure(path, exc)
        if kind == "truncated":
            raise PipelineError("checkpoint %s is truncated or damaged (%s); copy it again, or save it again with "
                                "torch.save(model.state_dict(), path)" % (path, reason))
        raise PipelineError("checkpoint %s was refused: it is not a plain state_dict (%s), and it was not loaded "
                            "because that could run code from the file. Save weights with "
                            "torch.save(model.state_dict(), path)." % (path, reason))
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        nested = [k for k, v in state.items() if isinstance(v, dict) and v
                  and all(isinstance(t, torch.Tensor) for t in v.values())] if isinstance(state, dict) else []
        hint = (" It looks like a training checkpoint: the weights seem to be under %r; save that entry alone "
                "with torch.save(checkpoint[%r], path)." % (nested[0], nested[0])) if nested else ""
        kinds = sorted({type(v).__name__ for v in state.values()}) if isinstance(state, dict) else []
        raise PipelineError("checkpoint %s: expected a state_dict, i.e. a dict of parameter names to tensors, got "
                            "a %s%s.%s" % (path, type(state).__name__, " holding %s" % ", ".join(kinds) if kinds else "",
                                           hint))
    bad = non_finite(state)
    if bad:
        raise PipelineError("checkpoint %s holds NaN or Inf values in %s; a quantizer cannot calibrate them. Train "
                            "again (a lower learning rate, gradient clipping) or save weights from before the "
                            "values broke" % (path, bad))
    return state


def non_finite(state: Dict[str, torch.Tensor]) -> str:
    """The tensors of ``state`` holding NaN or Inf (name and count, at most five), or "" when none."""
    bad = ["%s (%d of %d)" % (name, int((~torch.isfinite(t)).sum()), t.numel()) for name, t in state.items()
           if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    return ", ".join(bad[:5]) + (" and %d more" % (len(bad) - 5) if len(bad) > 5 else "")


def load_weights(model: nn.Module, path: str) -> nn.Module:
    """Load ``path`` into ``model`` strictly; raises PipelineError naming missing/unexpected keys or
    mismatched shapes."""
    state = load_state_dict_file(path)
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise PipelineError("checkpoint %s does not fit the model: %s" % (path, " ".join(str(exc).split())))
    if result.missing_keys or result.unexpected_keys:
        prefixed = sorted(k[len("module."):] for k in result.unexpected_keys if k.startswith("module."))
        hint = (" The keys start with 'module.' (saved from nn.DataParallel): save model.module.state_dict() "
                "instead." if prefixed and set(result.missing_keys) <= set(prefixed) else "")
        raise PipelineError("checkpoint %s does not fit the model: missing keys %s, unexpected keys %s.%s"
                            % (path, list(result.missing_keys)[:10], list(result.unexpected_keys)[:10], hint))
    return model.eval()
