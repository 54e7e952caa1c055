"""``--set dotted.path=value`` overrides, applied to the config's plain dict before validation."""
import copy
from typing import Any, Dict, List, Tuple

import yaml

from ..errors import ConfigError
from .yamlsafe import load_bounded


def parse_override(text: str) -> Tuple[List[str], Any]:
    """Parse ``a.b.c=value`` into (["a", "b", "c"], value), the value read as a YAML scalar/list."""
    if "=" not in text:
        raise ConfigError("--set expects dotted.path=value, got %r" % text)
    key, _, raw = text.partition("=")
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError("--set %r: empty part in the dotted path" % text)
    try:
        value = load_bounded(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError("--set %r: the value is not valid YAML (%s)" % (text, exc))
    return parts, value


def apply_overrides(raw: Dict[str, Any], overrides: List[str]) -> Dict[str, Any]:
    """Return a copy of ``raw`` with each ``dotted.path=value`` set (intermediate dicts created)."""
    out = copy.deepcopy(raw)
    for text in overrides:
        parts, value = parse_override(text)
        node = out
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError("--set %s: %s is a %s, not a section" % (text, ".".join(parts[:i + 1]), type(nxt).__name__))
            node = nxt
        node[parts[-1]] = value
    return out
