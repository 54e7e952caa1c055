"""The run configuration: one YAML file, validated strictly before any work starts.

Loading: ``yaml.safe_load`` (no Python objects; alias expansion bounded, ``yamlsafe``), then ``--set a.b=c``
overrides (dotted paths, values parsed as YAML scalars, ``overrides``), then validation by the pydantic
models of ``sections`` and the generated models of ``data.source`` and each stage (``spec_models``).
Unknown keys are errors that name the dotted path, the allowed keys and the closest match (public
case P12, ``messages``). Relative input paths (data files, weights, quant_config_file, arch_json)
resolve against the folder of the YAML file; ``run.work_dir`` resolves against the current
directory. The DPU target is resolved once, here: ``LoadedConfig.target``.

Modules, one job each:

- ``sections``: the pydantic models of the sections (``Config``).
- ``loading``: ``read_yaml``, ``load_config`` and the checks that need more than types.
- ``loaded``: ``LoadedConfig``, the validated config plus its paths, target and hashes.
- ``overrides``: ``parse_override``, ``apply_overrides``.
- ``messages``: a pydantic ValidationError as one message with dotted paths.
- ``schema``: ``config_schema``, the JSON Schema.
- ``spec_models``: the models of ``data.source`` and ``preprocess.stages``, generated from the registries.
- ``specs``: checks shared with the registries, the boundary and the deploy bundle (names, keys,
  layouts, mean/std); imported by low layers, so it imports nothing of the package.
- ``yamlsafe``: YAML loading with alias expansion, nesting and size bounded.

The names below are imported on first use (PEP 562), so that ``pipeline.config.specs``, which the
stages, the boundary and the drop-in API import, does not load pydantic.
"""
import importlib
from typing import Any

# public name -> the module of this package that defines it
_EXPORTS = {
    "Config": "sections",
    "LoadedConfig": "loaded",
    "apply_overrides": "overrides",
    "config_schema": "schema",
    "format_validation_error": "messages",
    "load_config": "loading",
    "parse_override": "overrides",
    "read_yaml": "loading",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module("." + module, __name__), name)
