"""``data.source`` and ``preprocess.stages`` as pydantic unions discriminated by ``type``, generated
from the registries: one model per stage class (its dataclass fields, ``pipeline.stages.STAGES``) and
one per source type (``pipeline.data.base.SOURCE_FIELDS``).

The config keeps both as plain dicts, which the registries build from. ``check_specs`` validates them
against these models when the config is loaded, so ``load_config`` reports every unknown, missing or
mistyped key with its dotted path; ``schemas`` gives their JSON Schema to ``config_schema``, so an
editor completes them. The registries stay the only place that defines a stage or a source.
"""
import dataclasses
import functools
from typing import Any, Dict, List, Literal, Tuple, Union, get_type_hints

from pydantic import ConfigDict, Field, ValidationError, create_model

from ..specs import closest_match

_STRICT = ConfigDict(extra="forbid", strict=True)


def _yaml_type(annotation: Any) -> Any:
    """A stage field's type as YAML gives it: a tuple of ints comes as a list."""
    return List[int] if annotation == Tuple[int, ...] else annotation


def _summary(cls: type) -> str:
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


def _model(name: str, doc: str, fields: Dict[str, Any]) -> Any:
    """A strict model (unknown keys forbidden) whose JSON Schema description is ``doc``."""
    model = create_model(name, __config__=_STRICT, **fields)
    model.__doc__ = doc  # read when the JSON Schema is generated
    return model


@functools.lru_cache(maxsize=None)
def stage_models() -> Dict[str, Any]:
    """YAML ``type`` -> the pydantic model of that stage's spec (``type`` plus its dataclass fields)."""
    from ..stages.registry import STAGES
    models = {}
    for name, cls in STAGES.items():
        hints = get_type_hints(cls)
        fields = {"type": (Literal[name], ...)}  # type: Dict[str, Any]
        for f in dataclasses.fields(cls):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            fields[f.name] = (_yaml_type(hints[f.name]), ... if required else f.default)
        models[name] = _model("stage_" + name, _summary(cls), fields)
    return models


@functools.lru_cache(maxsize=None)
def source_models() -> Dict[str, Any]:
    """Source ``type`` -> the pydantic model of its spec (``type`` plus its ``SOURCE_FIELDS`` entry)."""
    from ..data.base import SOURCE_FIELDS
    from ..data.sources import SOURCES
    models = {}
    for name, fields in SOURCE_FIELDS.items():
        spec = dict(fields, type=(Literal[name], ...))
        models[name] = _model("source_" + name, _summary(SOURCES[name]), spec)
    return models


def _union(name: str, models: Dict[str, Any]) -> Any:
    """A model whose one field ``spec`` is the union of ``models``, discriminated by ``type``."""
    spec = (Union[tuple(models.values())], Field(..., discriminator="type"))
    return create_model(name, __config__=_STRICT, spec=spec)


@functools.lru_cache(maxsize=None)
def _holders() -> Tuple[Any, Any]:
    return _union("SourceSpec", source_models()), _union("StageSpec", stage_models())


def _schema(holder: Any) -> Dict[str, Any]:
    full = holder.model_json_schema(ref_template="#/$defs/{model}")
    spec = {k: v for k, v in full["properties"]["spec"].items() if k != "title"}
    return dict(spec, **{"$defs": full["$defs"]})


def schemas() -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The JSON Schemas of one ``data.source`` and one stage, refs pointing into ``#/$defs/``."""
    source, stage = _holders()
    return _schema(source), _schema(stage)


def _problems(exc: ValidationError, where: str, models: Dict[str, Any]) -> List[str]:
    """One line per error: the dotted path, what is wrong, the allowed keys or types, the closest."""
    lines = []
    for err in exc.errors():
        kind, loc = err["type"], [str(p) for p in err["loc"][1:]]  # [0] is the holder's field
        if kind == "union_tag_invalid":
            tag = str(err.get("input", {}).get("type"))
            close = closest_match(tag, models)
            lines.append("%s: unknown type %r; valid types: %s%s" % (where, tag, ", ".join(sorted(models)),
                                                                    "; did you mean %r?" % close if close else ""))
            continue
        if kind == "union_tag_not_found":
            lines.append("%s: missing key 'type'; valid types: %s" % (where, ", ".join(sorted(models))))
            continue
        if kind == "model_attributes_type" or not loc:
            lines.append("%s: expected a mapping such as {type: ..., ...}, got %r" % (where, err.get("input")))
            continue
        tag, path = loc[0], ".".join([where] + loc[1:])
        allowed = sorted(models[tag].model_fields) if tag in models else []
        if kind == "extra_forbidden":
            close = closest_match(loc[-1], allowed)
            lines.append("%s: unknown key; allowed keys: %s%s" % (path, ", ".join(allowed),
                                                                  "; did you mean %r?" % close if close else ""))
        elif kind == "missing":
            lines.append("%s: required key is missing; allowed keys: %s" % (path, ", ".join(allowed)))
        else:
            lines.append("%s: %s (got %r)" % (path, err["msg"], err.get("input")))
    return lines


def check_specs(raw: Dict[str, Any]) -> List[str]:
    """The problems of ``raw``'s ``data.source`` and ``preprocess.stages`` (a config dict whose
    sections already validated), one line each; empty when both fit their models."""
    source, stage = _holders()
    problems = []  # type: List[str]
    spec = (raw.get("data") or {}).get("source")
    if spec is not None:
        try:
            source.model_validate({"spec": spec})
        except ValidationError as exc:
            problems += _problems(exc, "data.source", source_models())
    for i, spec in enumerate((raw.get("preprocess") or {}).get("stages") or []):
        try:
            stage.model_validate({"spec": spec})
        except ValidationError as exc:
            problems += _problems(exc, "preprocess.stages[%d]" % i, stage_models())
    return problems
