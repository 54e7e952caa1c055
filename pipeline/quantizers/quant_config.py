"""Parse and validate the real quantizer's ``quant_config_file`` JSON (docs/quant_config.md).

The rules are those of ``nndct_shared/quantization/quant_config.py`` (``_keywords_legel``,
``_generate_config_from_export``, ``_handle_dpu_tensor_conflict``), with errors raised as
:class:`~pipeline.errors.ConfigError` instead of ``exit(2)``:

- Top-level keys: ``convert_relu6_to_relu``, ``convert_silu_to_hswish``, ``include_cle``,
  ``keep_first_last_layer_accuracy``, ``keep_add_layer_accuracy``, ``include_bias_corr``,
  ``target_device``, ``onnx_opset_version``, ``change_concat_input_fix``,
  ``change_pool_input_fix``, ``quantizable_data_type``, ``overall_quantize_config``,
  ``tensor_quantize_config``, ``layer_quantize_config``. Anything else is an error naming the key.
- ``target_device`` is required: nndct 3.5 reads it without a default and crashes with
  ``KeyError`` (docs/quantizer.md#a-config-file-needs-target_device); here it is a ConfigError.
- Quantization parameters (``datatype``, ``bit_width``, ``method``, ``round_mode``, ``symmetry``,
  ``per_channel``, ``signed``, ``narrow_range``, ``scale_type``, ``calib_statistic_method``,
  ``percentage``) are checked against the legal values; for ``target_device: "DPU"`` the DPU
  rules apply (symmetric, diffs/maxmin, per-tensor, power-of-two, no narrow range, modal
  statistic, half_up for activations, std_round elsewhere, activation bit width = bias bit width).

Stricter than nndct, on purpose: a switch that is not a boolean is an error (nndct ignores it).

Defaults without a file (docs/quant_config.md#defaults): CLE and bias correction on, every tensor int8; the
``bitwidth`` argument of ``torch_quantizer`` sets all four bit widths.
"""
import copy
import os
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..errors import ConfigError
from ..fileio import not_a_file, parse_json
from ..specs import closest_match

if TYPE_CHECKING:
    from ..fx.rewrites import Rewrites

TOP_LEVEL_KEYS = ["convert_relu6_to_relu", "convert_silu_to_hswish", "include_cle",
                  "keep_first_last_layer_accuracy", "keep_add_layer_accuracy", "include_bias_corr",
                  "target_device", "onnx_opset_version", "change_concat_input_fix",
                  "change_pool_input_fix", "quantizable_data_type", "overall_quantize_config",
                  "tensor_quantize_config", "layer_quantize_config"]
BOOL_SWITCHES = ["convert_relu6_to_relu", "convert_silu_to_hswish", "include_cle",
                 "keep_first_last_layer_accuracy", "keep_add_layer_accuracy", "include_bias_corr",
                 "change_concat_input_fix", "change_pool_input_fix"]
PARAM_KEYS = ["datatype", "bit_width", "method", "round_mode", "symmetry", "per_channel", "signed",
              "narrow_range", "scale_type", "calib_statistic_method", "percentage"]
TENSOR_TYPES = ["input", "weights", "bias", "activation"]
LAYER_KEYS = ["layer_type", "layer_name", "quantizable_data_type", "overall_quantize_config",
              "tensor_quantize_config"]
TARGET_DEVICES = ["DPU", "CPU", "GPU", "FLEXML"]
LEGAL_VALUES = {
    "datatype": ["int", "bfloat16", "float16", "float32"],
    "method": ["maxmin", "entropy", "mse", "percentile", "diffs"],
    "round_mode": ["half_even", "half_up", "half_down", "std_round"],
    "scale_type": ["poweroftwo", "float"],
    "calib_statistic_method": ["modal", "mean", "median", "max"],
}
BOOL_PARAMS = ["symmetry", "per_channel", "signed", "narrow_range"]
BITWIDTH_RANGE = (2, 16)  # torch_quantizer's bitwidth argument; quant_info.BIT_WIDTHS, the widths it may hold

_DEFAULT_TENSOR = {"datatype": "int", "bit_width": 8, "method": "diffs", "round_mode": "std_round",
                   "symmetry": True, "per_channel": False, "signed": True, "narrow_range": False,
                   "scale_type": "poweroftwo"}


def _default_tensor_configs() -> Dict[str, Dict[str, Any]]:
    configs = {t: dict(_DEFAULT_TENSOR) for t in TENSOR_TYPES}
    configs["activation"]["round_mode"] = "half_up"
    configs["activation"]["calib_statistic_method"] = "modal"
    configs["input"]["calib_statistic_method"] = "modal"
    return configs


class QuantConfig:
    """The resolved quantization strategy (a file's content merged over the defaults).

    Attributes:
        include_cle, include_bias_corr, convert_relu6_to_relu, convert_silu_to_hswish,
        change_concat_input_fix, change_pool_input_fix: bool switches
            (docs/arithmetic.md#optional-conversions, docs/arithmetic.md#export-time-adjustments).
        target_device: "DPU", "CPU", "GPU" or "FLEXML".
        onnx_opset_version: int or None.
        quantizable_data_type: list of tensor types that are quantized.
        tensors: tensor type ("input", "weights", "bias", "activation") -> resolved parameters.
        layers: the raw ``layer_quantize_config`` list (empty when absent).
        source: the file path, or None for the defaults.
    """

    def __init__(self) -> None:
        self.include_cle = True
        self.include_bias_corr = True
        self.convert_relu6_to_relu = False
        self.convert_silu_to_hswish = False
        self.change_concat_input_fix = False
        self.change_pool_input_fix = False
        self.target_device = "DPU"
        self.onnx_opset_version = None  # type: Optional[int]
        self.quantizable_data_type = list(TENSOR_TYPES)
        self.tensors = _default_tensor_configs()
        self.layers = []  # type: List[Dict[str, Any]]
        self.source = None  # type: Optional[str]

    def bitwidth(self, tensor_type: str) -> int:
        """Bit width of ``tensor_type`` ("input", "weights", "bias" or "activation")."""
        return int(self.tensors[tensor_type]["bit_width"])

    def uniform_bitwidth(self) -> Optional[int]:
        """The common bit width when all four tensor types agree, else None."""
        widths = {self.bitwidth(t) for t in TENSOR_TYPES}
        return widths.pop() if len(widths) == 1 else None

    def rewrites(self) -> "Rewrites":
        """The module swaps this config asks of the graph capture (``pipeline.fx.rewrites.Rewrites``):
        ReLU6 -> ReLU when CLE is on or with ``convert_relu6_to_relu`` (nndct's ``relu6_replace``),
        SiLU -> HardSwish with ``convert_silu_to_hswish``."""
        from ..fx.rewrites import Rewrites
        return Rewrites(relu6_to_relu=self.include_cle or self.convert_relu6_to_relu,
                        silu_to_hswish=self.convert_silu_to_hswish)


def _where(source: Optional[str]) -> str:
    return "quant_config_file %s" % source if source else "quant config"


def _unknown(source: Optional[str], path: str, key: str, allowed: List[str]) -> ConfigError:
    close = closest_match(key, allowed)
    hint = " (did you mean %r?)" % close if close else ""
    return ConfigError("%s: unknown key %r at %s%s; allowed keys: %s"
                       % (_where(source), key, path, hint, ", ".join(allowed)))


def _check_params(source: Optional[str], path: str, tensor_type: Optional[str],
                  params: Any) -> Dict[str, Any]:
    if not isinstance(params, dict):
        raise ConfigError("%s: %s should be an object of quantization parameters, got %r"
                          % (_where(source), path, params))
    for key, value in params.items():
        if key not in PARAM_KEYS:
            raise _unknown(source, path, key, PARAM_KEYS)
        if key in LEGAL_VALUES and value not in LEGAL_VALUES[key]:
            raise ConfigError("%s: %s.%s should be one of %s, got %r"
                              % (_where(source), path, key, LEGAL_VALUES[key], value))
        if key in BOOL_PARAMS and not isinstance(value, bool):
            raise ConfigError("%s: %s.%s should be true or false, got %r" % (_where(source), path, key, value))
        if key == "bit_width" and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise ConfigError("%s: %s.bit_width should be an integer >= 2, got %r" % (_where(source), path, value))
        if key == "percentage" and (not isinstance(value, float) or not 0.0 < value <= 100.0):
            raise ConfigError("%s: %s.percentage should be a float in (0, 100], got %r"
                              % (_where(source), path, value))
        if key == "calib_statistic_method" and tensor_type in ("weights", "bias"):
            raise ConfigError("%s: %s.calib_statistic_method applies to input and activation only"
                              % (_where(source), path))
    return params


def _check_tensor_block(source: Optional[str], path: str, block: Any) -> Dict[str, Dict[str, Any]]:
    if not isinstance(block, dict):
        raise ConfigError("%s: %s should be an object keyed by tensor type %s, got %r"
                          % (_where(source), path, TENSOR_TYPES, block))
    for tensor_type, params in block.items():
        if tensor_type not in TENSOR_TYPES:
            raise _unknown(source, path, tensor_type, TENSOR_TYPES)
        _check_params(source, "%s.%s" % (path, tensor_type), tensor_type, params)
    return block


def _check_data_types(source: Optional[str], path: str, value: Any) -> List[str]:
    if not isinstance(value, list) or not all(v in TENSOR_TYPES for v in value):
        raise ConfigError("%s: %s should be a list drawn from %s, got %r"
                          % (_where(source), path, TENSOR_TYPES, value))
    return list(value)


def _merge(tensors: Dict[str, Dict[str, Any]], types: List[str], overall: Optional[Dict[str, Any]],
           per_tensor: Optional[Dict[str, Dict[str, Any]]]) -> None:
    for t in types:
        for key, value in (overall or {}).items():
            if key != "calib_statistic_method" or t in ("input", "activation"):
                tensors[t][key] = value
    for t, params in (per_tensor or {}).items():
        tensors[t].update(params)


def _check_dpu(source: Optional[str], path: str, tensors: Dict[str, Dict[str, Any]],
               types: List[str]) -> None:
    def fail(what: str) -> ConfigError:
        return ConfigError("%s: %s: %s on target_device DPU" % (_where(source), path, what))

    for t in types:
        p = tensors[t]
        if p["datatype"] != "int":
            continue
        if tensors["activation"]["bit_width"] != tensors["bias"]["bit_width"]:
            raise fail("activation and bias bit widths must be equal, got %s and %s"
                       % (tensors["activation"]["bit_width"], tensors["bias"]["bit_width"]))
        if not p.get("symmetry", True):
            raise fail("%s must be symmetric" % t)
        if p["method"] not in ("diffs", "maxmin"):
            raise fail("%s method must be diffs or maxmin, got %r" % (t, p["method"]))
        if p.get("per_channel", False):
            raise fail("%s must be per_tensor" % t)
        if p["scale_type"] != "poweroftwo":
            raise fail("%s scale_type must be poweroftwo, got %r" % (t, p["scale_type"]))
        if p.get("narrow_range", False):
            raise fail("%s narrow_range must be false" % t)
        if p.get("calib_statistic_method", "modal") != "modal":
            raise fail("%s calib_statistic_method must be modal, got %r" % (t, p["calib_statistic_method"]))
        want = "half_up" if t == "activation" else "std_round"
        if p["round_mode"] != want:
            raise fail("%s round_mode must be %s, got %r" % (t, want, p["round_mode"]))


def parse_quant_config(obj: Any, source: Optional[str] = None) -> QuantConfig:
    """Validate a parsed quant_config_file object and resolve it over the defaults.

    Args:
        obj: the JSON object (a dict).
        source: the file name, used in error messages.

    Returns:
        QuantConfig.

    Raises:
        ConfigError: unknown key (named, with the closest allowed key), missing ``target_device``,
            an illegal value, or a DPU rule broken.
    """
    if not isinstance(obj, dict):
        raise ConfigError("%s: expected a JSON object, got %s" % (_where(source), type(obj).__name__))
    for key in obj:
        if key not in TOP_LEVEL_KEYS:
            raise _unknown(source, "top level", key, TOP_LEVEL_KEYS)
    if "target_device" not in obj:
        raise ConfigError("%s: 'target_device' is required (nndct 3.5 crashes with KeyError "
                          "without it); add \"target_device\": \"DPU\"" % _where(source))
    cfg = QuantConfig()
    cfg.source = source
    if obj["target_device"] not in TARGET_DEVICES:
        raise ConfigError("%s: target_device should be one of %s, got %r"
                          % (_where(source), TARGET_DEVICES, obj["target_device"]))
    cfg.target_device = obj["target_device"]
    for key in BOOL_SWITCHES:
        if key in obj:
            if not isinstance(obj[key], bool):
                raise ConfigError("%s: %s should be true or false, got %r" % (_where(source), key, obj[key]))
            if not key.startswith("keep_"):  # keep_*: reserved in nndct 3.5, accepted, no effect
                setattr(cfg, key, obj[key])
    if "onnx_opset_version" in obj:
        v = obj["onnx_opset_version"]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError("%s: onnx_opset_version should be an integer, got %r" % (_where(source), v))
        cfg.onnx_opset_version = v
    if "quantizable_data_type" in obj:
        cfg.quantizable_data_type = _check_data_types(source, "quantizable_data_type", obj["quantizable_data_type"])
    overall = None
    if "overall_quantize_config" in obj:
        overall = _check_params(source, "overall_quantize_config", None, obj["overall_quantize_config"])
    per_tensor = None
    if "tensor_quantize_config" in obj:
        per_tensor = _check_tensor_block(source, "tensor_quantize_config", obj["tensor_quantize_config"])
    _merge(cfg.tensors, TENSOR_TYPES, overall, per_tensor)
    if cfg.target_device == "DPU":
        _check_dpu(source, "tensors", cfg.tensors, cfg.quantizable_data_type)
    layers = obj.get("layer_quantize_config", [])
    if not isinstance(layers, list):
        raise ConfigError("%s: layer_quantize_config should be a list, got %r" % (_where(source), layers))
    for i, layer in enumerate(layers):
        path = "layer_quantize_config[%d]" % i
        if not isinstance(layer, dict):
            raise ConfigError("%s: %s should be an object, got %r" % (_where(source), path, layer))
        for key in layer:
            if key not in LAYER_KEYS:
                raise _unknown(source, path, key, LAYER_KEYS)
        if bool(layer.get("layer_type")) == bool(layer.get("layer_name")):
            raise ConfigError("%s: %s needs exactly one of layer_type or layer_name" % (_where(source), path))
        types = _check_data_types(source, path + ".quantizable_data_type",
                                  layer.get("quantizable_data_type", list(TENSOR_TYPES)))
        layer_overall = None
        if "overall_quantize_config" in layer:
            layer_overall = _check_params(source, path + ".overall_quantize_config", None,
                                          layer["overall_quantize_config"])
        layer_tensors = None
        if "tensor_quantize_config" in layer:
            layer_tensors = _check_tensor_block(source, path + ".tensor_quantize_config",
                                                layer["tensor_quantize_config"])
        resolved = copy.deepcopy(cfg.tensors)
        _merge(resolved, types, layer_overall, layer_tensors)
        if cfg.target_device == "DPU":
            _check_dpu(source, path, resolved, types)
    cfg.layers = copy.deepcopy(layers)
    return cfg


def load_quant_config(path: Optional[str], bitwidth: Optional[int] = None) -> QuantConfig:
    """Read and validate a quant_config_file; ``None`` gives the defaults (docs/quant_config.md).

    Args:
        path: the JSON file, or None.
        bitwidth: the ``torch_quantizer`` ``bitwidth`` argument (None means 8). As in nndct it only
            applies without a file; with a file the file's bit widths win and a different
            ``bitwidth`` gives a warning.

    Raises:
        ConfigError: ``bitwidth`` is not an integer 2..16 (what quant_info.json may hold: a
            calibration at another width could never be tested); the file is missing or not JSON,
            or :func:`parse_quant_config` rejects it.
    """
    if bitwidth is not None and (isinstance(bitwidth, bool) or not isinstance(bitwidth, int)
                                 or not BITWIDTH_RANGE[0] <= bitwidth <= BITWIDTH_RANGE[1]):
        raise ConfigError("bitwidth=%r: expected an integer %d..%d (the integer bit widths the quantizers take, and "
                          "the ones quant_info.json may hold); 8 is what the DPU runs"
                          % (bitwidth, BITWIDTH_RANGE[0], BITWIDTH_RANGE[1]))
    if path is None:
        cfg = QuantConfig()
        if bitwidth is not None:
            for t in TENSOR_TYPES:
                cfg.tensors[t]["bit_width"] = int(bitwidth)
        return cfg
    if not os.path.isfile(path):
        raise ConfigError("quant_config_file %s %s; pass an existing JSON file or None "
                          "for the defaults" % (path, not_a_file(path)))
    try:
        with open(path, "r", encoding="utf-8") as f:
            obj = parse_json(f.read())
    except ValueError as e:  # not JSON, not UTF-8, or nested too deep (fileio.parse_json)
        raise ConfigError("quant_config_file %s is not valid JSON: %s" % (path, e))
    cfg = parse_quant_config(obj, source=path)
    if bitwidth is not None and any(cfg.bitwidth(t) != bitwidth for t in TENSOR_TYPES):
        warnings.warn("bitwidth=%d differs from the bit widths in %s; the file's are used (as nndct does)"
                      % (bitwidth, path))
    return cfg


def settings_quant_config(settings: Any) -> QuantConfig:
    """The QuantConfig of a ``pipeline.quantizers.base.QuantSettings``: its quant_config_file read at its
    bit width; with ``settings.qat`` (a QAT-trained model) the defaults at that bit width with CLE and
    bias correction off, as the real ``QatProcessor`` sets them (and ``sim/qat/trainable.qat_session``).

    Raises:
        ConfigError: as ``load_quant_config``.
    """
    if getattr(settings, "qat", False):
        cfg = load_quant_config(None, settings.bitwidth)
        cfg.include_cle = False
        cfg.include_bias_corr = False
        return cfg
    return load_quant_config(settings.quant_config_file, settings.bitwidth)
