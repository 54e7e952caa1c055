"""The run configuration: one YAML file, validated strictly before any work starts.

Loading: ``yaml.safe_load`` (no Python objects; alias expansion bounded, ``pipeline.yamlsafe``), then ``--set a.b=c`` overrides (dotted paths,
values parsed as YAML scalars), then validation by the pydantic models below. Unknown keys are
errors that name the dotted path, the allowed keys and the closest match (public case P12).
Relative input paths (data files, weights, quant_config_file, arch_json) resolve against the folder
of the YAML file; ``run.work_dir`` resolves against the current directory.
"""
import copy
import hashlib
import json
import os
import re
from typing import Any, Dict, List, Literal, Optional, Tuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import fileio
from .errors import ConfigError
from .quantizers.base import BACKENDS, DEFAULT_BACKEND
from .specs import MEMORY_LAYOUTS, check_mean_std, closest_match
from .yamlsafe import MAX_BYTES, YAMLBoundError, load_bounded

# Keys of data.source and (section, key) pairs that name input files: resolved against the YAML's folder.
SOURCE_PATH_KEYS = ("path", "labels", "root")
INPUT_PATHS = (("model", "weights"), ("quantizer", "quant_config_file"), ("compile", "arch_json"))



class _Strict(BaseModel):
    # strict: no silent coercion (``batch_size: true`` or ``"8"`` is an error, not 1 or 8)
    model_config = ConfigDict(extra="forbid", strict=True)


class RunSection(_Strict):
    """Where the run folder is and how the run behaves."""
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Run name, used for the default work_dir.")
    work_dir: Optional[str] = Field(None, description="Run folder (default runs/<name>), relative to the current directory.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed for training and any random choice "
                      "(0 to 2**32 - 1, numpy's range).")
    num_threads: Optional[int] = Field(None, ge=1, le=1024, description="torch CPU threads (default: torch's choice; "
                                       "at most 1024, torch's thread pools crash far beyond the cores). "
                                       "1 is often fastest for small models on a busy machine.")
    verify_source_unchanged: bool = Field(True, description="Hash the caller's source before and after the run.")
    distributed_timeout_s: int = Field(1800, ge=1, description="Under torchrun: how long a rank waits for the "
                                       "others (collectives, the train step on rank 0) before it fails.")


SPLIT_PARTS = ("train", "calib", "eval")  # the order the source is cut in


class DataSection(_Strict):
    """The source and how it is split and batched."""
    source: Dict[str, Any] = Field(description="Source spec: {type: digits} | {type: npy, path, labels} | ...")
    split: Dict[str, float] = Field(default_factory=lambda: {"train": 0.6, "calib": 0.1, "eval": 0.3},
                                    description="Fractions of the source for train, calib and eval, cut in that "
                                                "order whatever the order of the keys.")
    split_order: str = Field("shuffled", pattern="^(shuffled|contiguous)$",
                             description="shuffled: seeded with run.seed and stratified by label when there are "
                                         "labels, whatever the file's order (the boundary gathers each batch's "
                                         "rows); contiguous: consecutive slices of the file, for a file that is "
                                         "already shuffled.")
    batch_size: int = Field(32, ge=1)
    calib_batches: Optional[int] = Field(None, description="At most this many calibration batches (null: all).")
    eval_batches: Optional[int] = Field(None, description="At most this many evaluation batches (null: all).")

    @field_validator("calib_batches", "eval_batches")
    @classmethod
    def _check_limit(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v < 1:
            raise ValueError("%d batches: the step would see 0 batches (for calibration: \"calibration saw 0 "
                             "batches\"); give at least 1, or null for the whole split" % v)
        return v

    @field_validator("split")
    @classmethod
    def _check_split(cls, v: Dict[str, float]) -> Dict[str, float]:
        unknown = sorted(set(v) - set(SPLIT_PARTS))
        if unknown:
            raise ValueError("unknown split names %s; allowed: train, calib, eval" % unknown)
        if any(f < 0 for f in v.values()) or sum(v.values()) > 1.0 + 1e-9:
            raise ValueError("fractions must be >= 0 and sum to at most 1, got %s" % v)
        # the parts are cut in this order whatever the order of the keys (a config written back with
        # sorted keys, as config.resolved.yaml is, must give every process the same rows)
        return {name: v[name] for name in SPLIT_PARTS if name in v}


class PreprocessSection(_Strict):
    """Zero-copy stages, then the quantizer boundary's fused normalization."""
    stages: List[Dict[str, Any]] = Field(default_factory=list, description="Views applied in order: {type: permute, ...}.")
    mean: List[float] = Field(description="Per-channel mean, in source pixel units (0..255 for uint8).")
    std: List[float] = Field(description="Per-channel std, in source pixel units; (x - mean) / std.")
    layout: Literal[MEMORY_LAYOUTS] = Field("NCHW", description="Memory layout of the boundary buffer.")  # type: ignore

    @model_validator(mode="after")
    def _check_norm(self) -> "PreprocessSection":
        try:
            check_mean_std(self.mean, self.std)
        except ConfigError as exc:
            raise ValueError(str(exc))
        return self


class TrainSection(_Strict):
    """The train step (zoo models only)."""
    epochs: int = Field(20, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(0.003, gt=0, allow_inf_nan=False)
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False)


class ModelSection(_Strict):
    """The float model: a zoo name, or any factory by import path, plus weights."""
    zoo: Optional[str] = Field(None, description="digits_cnn | resnet18 | mobilenet_v2")
    factory: Optional[str] = Field(None, description="Import path 'package.module:function'.")
    kwargs: Dict[str, Any] = Field(default_factory=dict)
    weights: Optional[str] = Field(None, description="state_dict file; default: <work_dir>/model/float.pt from the train step.")
    train: TrainSection = Field(default_factory=TrainSection)

    @model_validator(mode="after")
    def _one_of(self) -> "ModelSection":
        if (self.zoo is None) == (self.factory is None):
            raise ValueError("give exactly one of 'zoo' or 'factory'")
        return self


class FastFinetuneSection(_Strict):
    """Fast finetune (AdaQuant) in the calib step (docs/finetune.md)."""
    enabled: bool = False
    data: str = Field("calib", pattern="^(calib|train)$",
                      description="Split the finetune batches come from (through the same stages and boundary as "
                                  "calibration): calib or train; never eval, which measures the result.")
    batches: Optional[int] = Field(None, ge=2, description="Use at most this many finetune batches (default: the "
                                                           "whole split).")
    method: str = Field("adaquant", pattern="^(adaquant|adaquant_plus)$",
                        description="adaquant: the real quantizer's algorithm (nndct runs its own); adaquant_plus "
                                    "(sim only): continuous parameters through the rounding, so small steps add up "
                                    "over passes, and the bias correction kept (docs/finetune.md#methods).")
    passes: int = Field(100, ge=1, le=100, description="The most passes over the data per layer (the real quantizer: "
                                                      "100; sim only).")
    memory_mb: int = Field(1024, ge=16, description="Memory for the kept batches and each layer's cache, MiB; "
                                                    "beyond it they go to files in <work_dir>/.finetune-spill, "
                                                    "removed after the step (sim only; the result does not "
                                                    "depend on it).")


class QuantizerSection(_Strict):
    """The quantizer backend and torch_quantizer's own arguments (docs/quantizer.md#torch_quantizer-arguments)."""
    backend: str = Field(DEFAULT_BACKEND, pattern="^(%s)$" % "|".join(BACKENDS))
    target: Optional[str] = Field(None, description="torch_quantizer target= (hardware-aware mode, nndct only).")
    bitwidth: int = Field(8, ge=2, le=16)
    quant_config_file: Optional[str] = None
    device: str = Field("cpu", pattern="^(cpu|cuda)$")
    max_accuracy_drop: float = Field(0.01, ge=0, le=1, description="Fail the test step when float - quant accuracy exceeds this.")
    require_float_above_chance: bool = Field(True, description="Fail the test step when the float model's accuracy is "
                                             "at chance (it does not work on this data); false for smoke tests with "
                                             "an untrained model.")
    fast_finetune: FastFinetuneSection = Field(default_factory=FastFinetuneSection)


class ExportSection(_Strict):
    """What the export step writes."""
    formats: Optional[List[str]] = Field(None, description="Default: the backend's default_formats (pipeline/quantizers/base.py registry).")
    verify_max_lsb: Dict[str, int] = Field(
        default_factory=lambda: {"onnx_exact": 0},
        description="Fail the export when a flavour differs from the simulation by more LSB than this. "
                    "onnx_qdq rounds ties half-to-even (ONNX QuantizeLinear), 1 LSB per quantization point, "
                    "compounding through deep graphs: it is measured and reported, and checked only if listed here.")

    @field_validator("formats")
    @classmethod
    def _check_formats(cls, v: Optional[List[str]]) -> Optional[List[str]]:
        from .quantizers.base import all_formats
        allowed = all_formats()
        bad = [f for f in v or [] if f not in allowed]
        if bad:
            raise ValueError("unknown formats %s; allowed: %s" % (bad, allowed))
        return v

    @field_validator("verify_max_lsb")
    @classmethod
    def _check_verified(cls, v: Dict[str, int]) -> Dict[str, int]:
        bad = [f for f in v if f not in ("onnx_exact", "onnx_qdq")]
        if bad or any(n < 0 for n in v.values()):
            raise ValueError("keys must be onnx_exact or onnx_qdq (the ONNX flavours verified in ONNX Runtime) and "
                             "values >= 0, got %s%s" % (v, "; did you mean %r?" % closest_match(bad[0], ["onnx_exact", "onnx_qdq"])
                                                        if bad and closest_match(bad[0], ["onnx_exact", "onnx_qdq"]) else ""))
        return v


class CompileSection(_Strict):
    """The compiler hand-off (vai_c_xir inside the Vitis AI image)."""
    target: str = Field("DPUCZDX8G_ISA1_B4096", description="DPU target name; see `python -m pipeline targets`.")
    board: Optional[str] = Field(None, description="Board (ZCU102, ZCU104, KV260, VCK190, VEK280, ...): picks the "
                                                   "target's arch.json inside the image; default: the first listed.")
    arch_json: Optional[str] = Field(None, description="arch.json file; overrides board. Default: the target's "
                                                       "(and board's) path inside the Vitis AI image.")
    net_name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$",
                                    description="Compiled network name (default: run.name); a plain file name.")
    options: Dict[str, Any] = Field(default_factory=dict, description="vai_c_xir --options JSON.")

    @field_validator("options")
    @classmethod
    def _check_options(cls, v: Dict[str, Any]) -> Dict[str, Any]:
        problem = _non_json(v, "compile.options")
        if problem:
            raise ValueError(problem)
        return v


def _non_json(value: Any, path: str) -> Optional[str]:
    """Where ``value`` stops being strict JSON (what ``vai_c_xir --options`` parses), or None: the
    first key path holding NaN or an infinity (``json.dumps`` would write ``NaN``/``Infinity``, which
    no JSON parser reads), or a value JSON has no type for (a YAML date, set or binary), or a key
    that is not a string."""
    if isinstance(value, float) and not (value == value and abs(value) != float("inf")):
        return "%s is %r, which JSON cannot hold (it would be written as %s); give a finite number" % (
            path, value, "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity"))
    if value is None or isinstance(value, (str, bool, int, float)):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return "%s has the key %r (a %s); JSON keys are strings: quote it" % (path, key, type(key).__name__)
            problem = _non_json(item, "%s.%s" % (path, key))
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            problem = _non_json(item, "%s[%d]" % (path, i))
            if problem:
                return problem
        return None
    return "%s is %r (a %s), which JSON has no type for; give a string, number, boolean, list or mapping" % (
        path, value, type(value).__name__)


class Config(_Strict):
    """A whole run."""
    run: RunSection
    data: DataSection
    preprocess: PreprocessSection
    model: ModelSection
    quantizer: QuantizerSection = Field(default_factory=QuantizerSection)
    export: ExportSection = Field(default_factory=ExportSection)
    compile: CompileSection = Field(default_factory=CompileSection)


# ----------------------------------------------------------------------------- loading

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


def read_yaml(path: str) -> Dict[str, Any]:
    """Read a YAML mapping with ``pipeline.yamlsafe.load_bounded`` (``yaml.safe_load`` with alias
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


class LoadedConfig:
    """A validated config plus where it came from.

    Attributes:
        cfg: the validated ``Config``.
        path: absolute path of the YAML file.
        base_dir: folder that relative input paths resolve against.
        work_dir: absolute run folder.
        raw: the resolved plain dict (after overrides), as written to the run's config.resolved.yaml.
    """

    def __init__(self, cfg: Config, path: str, raw: Dict[str, Any]) -> None:
        self.cfg = cfg
        self.path = os.path.abspath(path)
        self.base_dir = os.path.dirname(self.path)
        self.raw = raw
        self.work_dir = os.path.abspath(cfg.run.work_dir or os.path.join("runs", cfg.run.name))

    def resolve(self, path: Optional[str]) -> Optional[str]:
        """An input path made absolute against the YAML file's folder (None stays None)."""
        if path is None:
            return None
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(self.base_dir, path))

    def absolute_raw(self) -> Dict[str, Any]:
        """A copy of the resolved dict with every input path made absolute (for a child process or a
        copy of the config stored in the run folder)."""
        raw = copy.deepcopy(self.raw)
        source = raw.get("data", {}).get("source", {})
        for key in SOURCE_PATH_KEYS:
            if isinstance(source.get(key), str):
                source[key] = self.resolve(source[key])
        for section, key in INPUT_PATHS:
            sec = raw.get(section) or {}
            if isinstance(sec.get(key), str):
                sec[key] = self.resolve(sec[key])
        return raw

    def hash(self) -> str:
        """sha256 of the resolved config, minus run.work_dir (moving a run folder keeps the hash)."""
        raw = copy.deepcopy(self.raw)
        raw.get("run", {}).pop("work_dir", None)
        return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()

    def calib_settings(self) -> Dict[str, Any]:
        """The settings that shape a calibration, as ``{"dotted.key": value}``: the data and its
        split, batching, the preprocessing, the model's architecture, and the quantizer's
        arguments. Changing the export formats, the accuracy budget or the compile target keeps a
        calibration valid. (The quant_config_file's content and the weights are fingerprinted
        separately, by hash.)"""
        c = self.cfg
        sections = {
            "data": c.data.model_dump(exclude={"eval_batches"}),
            "preprocess": c.preprocess.model_dump(),
            "model": c.model.model_dump(include={"zoo", "factory", "kwargs"}),
            # fast_finetune.memory_mb only moves caches between memory and files: same result
            "quantizer": c.quantizer.model_dump(exclude={"max_accuracy_drop": True, "require_float_above_chance": True,
                                                         "device": True, "quant_config_file": True,
                                                         "fast_finetune": {"memory_mb"}}),
        }
        return {"%s.%s" % (section, key): value for section, values in sections.items()
                for key, value in sorted(values.items())}

    def calib_hash(self) -> str:
        """sha256 of ``calib_settings()``."""
        return hashlib.sha256(json.dumps(self.calib_settings(), sort_keys=True, default=str).encode()).hexdigest()


def load_config(path: str, overrides: Optional[List[str]] = None) -> LoadedConfig:
    """Read, override and validate a config. Raises ConfigError with every problem listed."""
    raw = apply_overrides(read_yaml(path), overrides or [])
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, path))
    from .config_specs import check_specs
    problems = check_specs(raw)  # data.source and preprocess.stages against the registries' models
    if problems:
        raise ConfigError("invalid config %s:\n  %s" % (path, "\n  ".join(problems)))
    loaded = LoadedConfig(cfg, path, raw)
    _check_semantics(loaded)
    return loaded


def _check_semantics(loaded: LoadedConfig) -> None:
    """Checks that need more than types: files exist, names are registered, stages build."""
    cfg = loaded.cfg
    problems = []
    for section, key in INPUT_PATHS:
        dotted = "%s.%s" % (section, key)
        p = loaded.resolve(getattr(getattr(cfg, section), key))
        if p is not None and not os.path.isfile(p):
            problems.append("%s: %s %s" % (dotted, p, fileio.not_a_file(p)))
    from .targets import arch_json_path, get_target
    from .models.loading import resolve_factory
    from .quantizers.base import backend_class
    backend = backend_class(cfg.quantizer.backend)
    if cfg.export.formats is None:
        cfg.export.formats = list(backend.default_formats)
    wrong = [f for f in cfg.export.formats if f not in backend.formats]
    if wrong:
        problems.append("export.formats: the %s backend cannot write %s; it writes %s"
                        % (backend.name, wrong, ", ".join(backend.formats)))
    try:
        get_target(cfg.compile.target)
        if cfg.compile.board is not None and cfg.compile.arch_json is None:
            arch_json_path(cfg.compile.target, cfg.compile.board)
    except ConfigError as exc:
        problems.append("compile.%s" % exc)
    ft = cfg.quantizer.fast_finetune
    if ft.enabled and ft.method not in backend.finetune_methods:
        problems.append("quantizer.fast_finetune.method: the %s backend runs %s, got %r"
                        % (backend.name, ", ".join(backend.finetune_methods) or "no fast finetune", ft.method))
    if ft.enabled and not backend.simulates and (ft.passes != 100 or ft.memory_mb != 1024):
        problems.append("quantizer.fast_finetune.passes and memory_mb apply to the sim backend only; the real "
                        "quantizer runs 100 passes and keeps every batch in memory: remove them")
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


def config_schema() -> Dict[str, Any]:
    """The JSON Schema of the config (for editor completion), ``data.source`` and each stage of
    ``preprocess.stages`` included (``config_specs``: generated from the registries)."""
    from .config_specs import schemas
    schema = Config.model_json_schema()
    source, stage = schemas()
    defs = schema.setdefault("$defs", {})
    defs.update(source.pop("$defs"))
    defs.update(stage.pop("$defs"))
    data = defs["DataSection"]["properties"]
    data["source"] = dict(source, description=data["source"].get("description", ""))
    defs["PreprocessSection"]["properties"]["stages"]["items"] = stage
    return schema
