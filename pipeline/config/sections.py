"""The run configuration's sections: the pydantic models one YAML config validates against.

Every section is strict: unknown keys are errors (``pipeline.config.messages`` names the dotted path,
the allowed keys and the closest match, public case P12) and values are not coerced. ``data.source``
and ``preprocess.stages`` stay plain dicts here; ``pipeline.config.spec_models`` checks them against
the registries' models.
"""
from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ConfigError
from ..quantizers.base import BACKENDS, DEFAULT_BACKEND
from ..specs import MEMORY_LAYOUTS, NAME_RULE, check_mean_std, closest_match, is_plain_name


class _Strict(BaseModel):
    # strict: no silent coercion (``batch_size: true`` or ``"8"`` is an error, not 1 or 8)
    model_config = ConfigDict(extra="forbid", strict=True)


class RunSection(_Strict):
    """Where the run folder is and how the run behaves."""
    name: str = Field(description="Run name: the default work_dir runs/<name> and the compiled network's default "
                                  "name (vai_c_xir -n); %s." % NAME_RULE)
    work_dir: Optional[str] = Field(None, description="Run folder (default runs/<name>), relative to the current directory.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed for training and any random choice "
                      "(0 to 2**32 - 1, numpy's range).")
    num_threads: Optional[int] = Field(None, ge=1, le=1024, description="torch CPU threads (default: torch's choice; "
                                       "at most 1024, torch's thread pools crash far beyond the cores). "
                                       "1 is often fastest for small models on a busy machine.")
    verify_source_unchanged: bool = Field(True, description="Hash the caller's source before and after the run.")
    distributed_timeout_s: int = Field(1800, ge=1, description="Under torchrun: how long a rank waits for the "
                                       "others (collectives, the train step on rank 0) before it fails.")

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return _plain_name(v)


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


class QatSection(_Strict):
    """Quantization-aware training, the qat step after calib (docs/quant_config.md#quantizerqat)."""
    enabled: bool = Field(False, description="Run the qat step; the test, export and deploy steps then use its result "
                                             "(its quant_info.json and trained weights) instead of the calibration's.")
    epochs: int = Field(1, ge=1, le=10000, description="Passes over the train split.")
    lr: float = Field(1e-5, gt=0, le=1, allow_inf_nan=False, description="Adam learning rate of the weights, "
                                                                          "biases and BN parameters.")
    threshold_lr: float = Field(1e-2, gt=0, le=10, allow_inf_nan=False,
                                description="Adam learning rate of the quantizers' log2 thresholds.")
    batch_size: Optional[int] = Field(None, ge=1, description="Training batch size (default: data.batch_size, the "
                                                              "calibration's).")
    init: str = Field("calib", pattern="^(calib|warmup)$",
                      description="calib: the thresholds start at the calib step's fix positions; warmup: each "
                                  "quantizer sets its own from the first training batch (3-sigma for weights, KL-J "
                                  "for activations).")
    freeze_bn_after: Optional[int] = Field(None, ge=0, description="Freeze the BN statistics after this many epochs "
                                                                   "(0: from the start; null: never).")
    exact_deploy: bool = Field(True, description="Train at the fix positions that ship, so the deployed model equals "
                                                 "the trained one bit for bit; false: the real quantizer's behaviour "
                                                 "(the deployed model differs).")
    weight_decay: float = Field(1e-4, ge=0, le=1, allow_inf_nan=False, description="Adam weight decay of the weights "
                                                                                  "(not of the thresholds).")
    quantizer_norm: float = Field(1e-4, ge=0, le=1, allow_inf_nan=False,
                                  description="Loss term quantizer_norm * sqrt(sum of log_threshold^2) (the Vitis AI "
                                              "QAT example's); 0: none.")
    seed: Optional[int] = Field(None, ge=0, le=2**32 - 1, description="Seed of the training (default: run.seed).")
    max_steps: Optional[int] = Field(None, ge=1, description="Stop after this many optimizer steps in all "
                                                             "(null: every batch of every epoch).")

    @model_validator(mode="after")
    def _check_freeze(self) -> "QatSection":
        if self.freeze_bn_after is not None and self.freeze_bn_after > self.epochs:
            raise ValueError("freeze_bn_after is %d but training runs %d epoch%s, so the BN statistics would never be "
                             "frozen; give at most %d (0: from the start), or null for never"
                             % (self.freeze_bn_after, self.epochs, "" if self.epochs == 1 else "s", self.epochs))
        return self


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
    qat: QatSection = Field(default_factory=QatSection)


class ExportSection(_Strict):
    """What the export step writes."""
    formats: Optional[List[str]] = Field(None, description="Default: the backend's default_formats (pipeline/quantizers/base.py registry).")
    verify_max_lsb: Dict[str, int] = Field(
        default_factory=lambda: {"onnx_exact": 0},
        description="Fail the export when a flavour differs from the simulation by more LSB than this. "
                    "onnx_qdq rounds ties half-to-even (ONNX QuantizeLinear), 1 LSB per quantization point, "
                    "compounding through deep graphs: it is measured and reported, and checked only if listed here.")
    deploy_check: bool = Field(False, description="Also write the real quantizer's deploy-check dumps next to the "
                                                  "xmodel (export_xmodel(deploy_check=True): export/"
                                                  "deploy_check_data_int/<Model>/, each tensor as float32 and "
                                                  "fixed-point codes, docs/xmodel.md#deploy-check-dumps); the deploy "
                                                  "bundle carries them. Needs xmodel in export.formats.")

    @field_validator("formats")
    @classmethod
    def _check_formats(cls, v: Optional[List[str]]) -> Optional[List[str]]:
        from ..quantizers.base import all_formats
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
    net_name: Optional[str] = Field(None, description="Compiled network name (default: run.name): vai_c_xir -n "
                                                    "<net_name>, deploy/<net_name>/; %s." % NAME_RULE)
    options: Dict[str, Any] = Field(default_factory=dict, description="vai_c_xir --options JSON.")

    @field_validator("net_name")
    @classmethod
    def _check_net_name(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else _plain_name(v)

    @field_validator("options")
    @classmethod
    def _check_options(cls, v: Dict[str, Any]) -> Dict[str, Any]:
        problem = _non_json(v, "compile.options")
        if problem:
            raise ValueError(problem)
        return v


def _plain_name(value: str) -> str:
    """``value`` when it keeps ``pipeline.specs.NAME_RULE`` (a file, folder and command-argument name); else
    ValueError giving the rule (the config's message adds the dotted path)."""
    if not is_plain_name(value):
        raise ValueError("not a plain name: it becomes a folder name and a command argument, so give %s" % NAME_RULE)
    return value


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
