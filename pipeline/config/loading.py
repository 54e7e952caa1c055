"""Loading a config: read the YAML (bounded, ``pipeline.config.yamlsafe``), apply the ``--set``
overrides, validate the sections (``sections``), ``data.source`` and ``preprocess.stages``
(``spec_models``), then the checks that need more than types (files exist, names are registered,
the DPU target is known and resolved once)."""
import os
from typing import Any, Dict, List, Optional

import yaml
from pydantic import ValidationError

from .. import fileio
from ..errors import ConfigError
from ..runmark import lies_inside
from .loaded import INPUT_PATHS, SOURCE_PATH_KEYS, LoadedConfig
from .messages import format_validation_error
from .overrides import apply_overrides
from .sections import Config
from .spec_models import check_specs
from .yamlsafe import MAX_BYTES, YAMLBoundError, load_bounded


def read_yaml(path: str) -> Dict[str, Any]:
    """Read a YAML mapping with ``pipeline.config.yamlsafe.load_bounded`` (``yaml.safe_load`` with alias
    expansion, nesting and size bounded); ConfigError for a missing file, bad YAML or a document past
    the bounds (an alias bomb), before anything walks the document."""
    if not os.path.isfile(path):
        raise ConfigError("config file %s %s" % (path, fileio.not_a_file(path)))
    if os.path.getsize(path) > MAX_BYTES:
        raise ConfigError("config file %s is %d bytes, more than the %d a config may have; is it the right file?"
                          % (path, os.path.getsize(path), MAX_BYTES))
    with open(path, "r", encoding="utf-8") as f:
        try:
            raw = load_bounded(f.read())
        except UnicodeDecodeError as exc:
            raise ConfigError("config file %s is not UTF-8 text (%s)" % (path, exc))
        except YAMLBoundError as exc:
            raise ConfigError("config file %s was refused: %s" % (path, exc))
        except yaml.YAMLError as exc:
            raise ConfigError("config file %s is not valid YAML: %s" % (path, exc))
    if not isinstance(raw, dict):
        raise ConfigError("config file %s: expected a mapping at the top level, got %s" % (path, type(raw).__name__))
    return raw


def expand_home(raw: Any) -> Any:
    """``raw`` (the config dict, changed in place and returned) with a leading ``~`` or ``~user`` of every
    path it names (``run.work_dir``, ``data.source``'s files, ``model.weights``, ``quantizer.quant_config_file``,
    ``compile.arch_json``) expanded to the home folder, as a shell would: ``--set run.work_dir=~/x`` writes
    to ``$HOME/x``, not to a folder named ``~``. Other values, and a dict of another shape, are left as they are."""
    if not isinstance(raw, dict):
        return raw
    places = [(raw.get("run"), "work_dir")] + [((raw.get(section)), key) for section, key in INPUT_PATHS]
    data = raw.get("data")
    source = data.get("source") if isinstance(data, dict) else None
    places += [(source, key) for key in SOURCE_PATH_KEYS]
    for holder, key in places:
        if isinstance(holder, dict) and isinstance(holder.get(key), str) and holder[key].startswith("~"):
            holder[key] = os.path.expanduser(holder[key])
    return raw


def load_config(path: str, overrides: Optional[List[str]] = None) -> LoadedConfig:
    """Read, override and validate a config. Raises ConfigError with every problem listed."""
    raw = expand_home(apply_overrides(read_yaml(path), overrides or []))
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, path))
    problems = check_specs(raw)  # data.source and preprocess.stages against the registries' models
    if problems:
        raise ConfigError("invalid config %s:\n  %s" % (path, "\n  ".join(problems)))
    loaded = LoadedConfig(cfg, path, raw)
    loaded.target = _check_semantics(loaded)
    return loaded


def _check_semantics(loaded: LoadedConfig) -> Any:
    """Checks that need more than types: files exist, names are registered, stages build. Returns the
    DPU target of ``compile.target`` (``pipeline.targets.DpuTarget``): the one place it is resolved."""
    cfg = loaded.cfg
    problems = _run_folder_problems(loaded)
    for section, key in INPUT_PATHS:
        dotted = "%s.%s" % (section, key)
        p = loaded.resolve(getattr(getattr(cfg, section), key))
        if p is not None and not os.path.isfile(p):
            problems.append("%s: %s %s" % (dotted, p, fileio.not_a_file(p)))
    from ..targets import arch_json_path, get_target
    from ..models.loading import resolve_factory
    from ..quantizers.base import backend_class, backend_classes
    backend = backend_class(cfg.quantizer.backend)
    if cfg.export.formats is None:
        cfg.export.formats = list(backend.default_formats)
    wrong = [f for f in cfg.export.formats if f not in backend.formats]
    if wrong:
        problems.append("export.formats: the %s backend cannot write %s; it writes %s"
                        % (backend.name, wrong, ", ".join(backend.formats)))
    if cfg.export.deploy_check and "xmodel" not in cfg.export.formats:
        problems.append("export.deploy_check: the deploy-check dumps are written with the xmodel "
                        "(export_xmodel(deploy_check=True)) but export.formats is %s; add xmodel to export.formats, "
                        "or set export.deploy_check false" % (cfg.export.formats,))
    target = None
    try:
        target = get_target(cfg.compile.target)
        if cfg.compile.board is not None and cfg.compile.arch_json is None:
            arch_json_path(target.name, cfg.compile.board)
    except ConfigError as exc:
        problems.append("compile.%s" % exc)
    ft = cfg.quantizer.fast_finetune
    if ft.enabled and ft.method not in backend.finetune_methods:
        problems.append("quantizer.fast_finetune.method: the %s backend runs %s, got %r"
                        % (backend.name, ", ".join(backend.finetune_methods) or "no fast finetune", ft.method))
    if ft.enabled and not backend.simulates and (ft.passes != 100 or ft.memory_mb != 1024):
        problems.append("quantizer.fast_finetune.passes and memory_mb apply to the sim backend only; the real "
                        "quantizer runs 100 passes and keeps every batch in memory: remove them")
    qat = cfg.quantizer.qat
    if qat.enabled and not backend.qat:
        able = [c.name for c in backend_classes() if c.qat]
        problems.append("quantizer.qat.enabled: the %s backend does not run quantization-aware training here; use "
                        "quantizer.backend %s for the qat step, or run QAT inside the Vitis AI image with "
                        "pytorch_nndct's QatProcessor yourself" % (backend.name, " or ".join(able) or "(none)"))
    if cfg.quantizer.target is not None:
        try:
            get_target(cfg.quantizer.target)
        except ConfigError as exc:
            problems.append("quantizer.%s" % exc)
        if cfg.quantizer.target != cfg.compile.target:
            problems.append("quantizer.target %s differs from compile.target %s: the model would be quantized for "
                            "one DPU and compiled for another; set both to the board's target (or leave "
                            "quantizer.target null)" % (cfg.quantizer.target, cfg.compile.target))
    try:
        resolve_factory(cfg.model.zoo, cfg.model.factory)
    except ConfigError as exc:
        problems.append(str(exc))
    if problems:
        raise ConfigError("invalid config %s:\n  %s" % (loaded.path, "\n  ".join(problems)))
    return target


def _run_folder_problems(loaded: LoadedConfig) -> List[str]:
    """The run folder and the source kept apart (sources never read inside a run folder,
    ``pipeline.runmark``): a source path (``data.source`` root, path, labels) at or below
    ``run.work_dir`` (the run writes and removes files there), and a ``run.work_dir`` at or below an
    image folder's ``root`` (the run would write its outputs, PNG plots among them, into the caller's
    data, which the pipeline never writes). Checked on the paths, whether or not they exist yet."""
    source = (loaded.raw.get("data") or {}).get("source") or {}
    problems = []
    for key in SOURCE_PATH_KEYS:
        if not isinstance(source.get(key), str) or not source[key]:
            continue
        path = loaded.resolve(source[key])
        if key == "root" and lies_inside(loaded.work_dir, path):
            elsewhere = os.path.join(os.path.dirname(path), os.path.basename(path) + "-runs", loaded.cfg.run.name)
            problems.append("run.work_dir: %s lies inside data.source.root %s: the run would write its files "
                            "(plots/*.png among them) into the image folder, whose data the pipeline never writes; choose a run "
                            "folder outside it, e.g. --set run.work_dir=%s" % (loaded.work_dir, path, elsewhere))
        elif lies_inside(path, loaded.work_dir):
            problems.append("data.source.%s: %s lies inside run.work_dir %s: the run writes and removes files there, "
                            "and sources never read inside a run folder; move the data out, or choose another run "
                            "folder with --set run.work_dir=..." % (key, path, loaded.work_dir))
    return problems
