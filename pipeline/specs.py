"""Checks shared by the literal registries (stages, sources): known names, allowed keys, closest match.

A spec is a plain dict from YAML, e.g. ``{"type": "crop", "top": 0, "left": 0, "height": 8, "width": 8}``.
Every error says where (``where``, e.g. ``preprocess.stages[2]``), what was expected, what came in and
the closest valid name (``difflib``), so a misspelt key or type is fixed from the message alone.
"""
import difflib
from typing import Any, Dict, Iterable, Optional

from .errors import ConfigError


def closest_match(name: str, choices: Iterable[str]) -> Optional[str]:
    """The most similar string in ``choices`` (difflib ratio >= 0.6), or None."""
    close = difflib.get_close_matches(str(name), sorted(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def _hint(name: str, choices: Iterable[str]) -> str:
    close = closest_match(name, choices)
    return "; did you mean %r?" % close if close else ""


def lookup(registry: Dict[str, Any], name: Any, where: str) -> Any:
    """``registry[name]``, or ConfigError naming ``where``, the valid names and the closest match."""
    if not isinstance(name, str) or name not in registry:
        raise ConfigError("%s: unknown type %r; valid types: %s%s"
                          % (where, name, ", ".join(sorted(registry)), _hint(str(name), registry)))
    return registry[name]


def check_keys(spec: Dict[str, Any], allowed: Iterable[str], required: Iterable[str], where: str) -> None:
    """Raise ConfigError when ``spec`` has a key outside ``allowed`` or lacks one in ``required``.

    The message names ``where``, the bad key, the allowed keys and the closest match (public case P12).
    ``type`` is always allowed (it selects the registry entry).
    """
    allowed = sorted(set(allowed) | {"type"})
    if not isinstance(spec, dict):
        raise ConfigError("%s: expected a mapping such as {type: ..., ...}, got %s" % (where, type(spec).__name__))
    for key in spec:
        if key not in allowed:
            raise ConfigError("%s.%s: unknown key; allowed keys: %s%s"
                              % (where, key, ", ".join(allowed), _hint(str(key), allowed)))
    missing = [k for k in required if k not in spec]
    if missing:
        raise ConfigError("%s: missing required key(s) %s; allowed keys: %s"
                          % (where, ", ".join(missing), ", ".join(allowed)))
