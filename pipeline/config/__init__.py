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
- ``yamlsafe``: YAML loading with alias expansion, nesting and size bounded.

The checks the config shares with the registries, the boundary and the drop-in API (names, keys, layouts,
mean/std) are one floor lower, in ``pipeline.specs``, so that those import no pydantic.
"""
from .loaded import LoadedConfig
from .loading import load_config, read_yaml
from .messages import format_validation_error
from .overrides import apply_overrides, parse_override
from .schema import config_schema
from .sections import Config

__all__ = ["Config", "LoadedConfig", "apply_overrides", "config_schema", "format_validation_error", "load_config",
           "parse_override", "read_yaml"]
