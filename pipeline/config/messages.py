"""The config's validation errors as one message: every problem with its dotted path and what to do
(the allowed keys and the closest match for an unknown key, public case P12; how to write a number
YAML read as text)."""
import re
from typing import Any, List, Tuple

import yaml
from pydantic import BaseModel, ValidationError

from .sections import Config
from ..specs import closest_match


def _allowed_keys(loc: Tuple[Any, ...]) -> List[str]:
    """The keys the model at ``loc`` (a pydantic error location, minus the bad key) accepts."""
    model = Config
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        ann = getattr(field, "annotation", None)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            return []
    return list(model.model_fields)


def _dotted(loc: Tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += "[%d]" % part if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One message listing every problem, each with its dotted path and what to do."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _dotted(loc)
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1])
            close = closest_match(str(loc[-1]), allowed)
            hint = "; did you mean %r?" % close if close else ""
            lines.append("%s: unknown key; allowed keys: %s%s" % (path, ", ".join(allowed), hint))
        elif err["type"] == "missing":
            lines.append("%s: required key is missing" % path)
        else:
            line = "%s: %s (got %r)" % (path or "<top>", err["msg"], err.get("input"))
            if err["type"] in ("float_type", "float_parsing") and isinstance(err.get("input"), str):
                line += _float_text_hint(err["input"])
            lines.append(line)
    return "invalid config %s:\n  " % source + "\n  ".join(lines)


_EXPONENT_FORM = re.compile(r"^([-+]?)([0-9]+)(?:\.([0-9]*))?([eE])([-+]?)([0-9]+)$")


def _float_text_hint(text: str) -> str:
    """For a string given where a float is expected and Python reads it as a number: why YAML did
    not, and how to write it so that YAML does ("" when Python does not read it either). PyYAML (YAML 1.1) reads a number in
    exponent form only with a dot in the mantissa and a sign on the exponent: ``1e-45`` and
    ``1.0e5`` are text, ``1.0e-45`` and ``1.0e+5`` are floats."""
    try:
        float(text)
    except ValueError:
        return ""
    m = _EXPONENT_FORM.match(text.strip())
    if m:
        sign, whole, frac, e, exp_sign, exp = m.groups()
        fixed = "%s%s.%s%s%s%s" % (sign, whole, frac or "0", e, exp_sign or "+", exp)
        try:
            ok = isinstance(yaml.safe_load(fixed), float)
        except yaml.YAMLError:
            ok = False
        if ok:
            return "; YAML reads %s as text: write %s" % (text, fixed)
    if text.strip().lstrip("+-").lower() in ("inf", "infinity", "nan"):
        return "; YAML reads %s as text: its spellings are .inf, -.inf and .nan" % text
    return "; a number in quotes is text: remove the quotes"
