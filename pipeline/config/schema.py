"""The config's JSON Schema, for editor completion (``python -m pipeline schema``)."""
from typing import Any, Dict

from .sections import Config
from .spec_models import schemas


def config_schema() -> Dict[str, Any]:
    """The JSON Schema of the config (for editor completion), ``data.source`` and each stage of
    ``preprocess.stages`` included (``spec_models``: generated from the registries)."""
    schema = Config.model_json_schema()
    source, stage = schemas()
    defs = schema.setdefault("$defs", {})
    defs.update(source.pop("$defs"))
    defs.update(stage.pop("$defs"))
    data = defs["DataSection"]["properties"]
    data["source"] = dict(source, description=data["source"].get("description", ""))
    defs["PreprocessSection"]["properties"]["stages"]["items"] = stage
    return schema
