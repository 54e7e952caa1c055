"""The quantizer backend contract shared by ``sim`` (CPU simulation) and ``nndct`` (the real quantizer),
and the one registry of backends (``BACKENDS``) that config validation, check-env and the
fingerprint read.

The runner drives every backend the same way, one step per process if the user wishes:

1. ``calibrate(model, example, batches, out_dir, settings)``: run the calibration forwards and write
   ``out_dir/quant_info.json`` (and ``bias_corr.pth`` when bias correction is on) in the real
   quantizer's format (docs/quantizer.md#the-quant_info-format); returns a ``CalibrationSummary``.
   Raises ``QuantizationError("calibration saw 0 batches ...")`` before writing anything when
   ``batches`` is empty (public case P03).
2. ``load_test(model, example, out_dir, settings)``: build the test-mode quantized model from the
   files in ``out_dir``. Raises ``QuantizationError`` when ``quant_info.json`` is missing.
3. ``export(handle, example1, out_dir, formats)``: write the quantized model in the requested formats
   from a batch-1 example (public case P04) and return ``{format: path}``.

Every batch a backend receives is an owned, contiguous float32 NCHW tensor made by the quantizer
boundary; backends never modify the caller's model (they work on a copy).

This module imports neither torch nor a backend at module level (``pipeline.config`` reads the
registry at import time): the classes are imported when ``backend_class`` is first asked.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple, Type

from ..errors import ConfigError

if TYPE_CHECKING:  # annotations only
    import torch

# Literal registry: YAML ``quantizer.backend`` -> "module:class", the first one the default. Imported
# lazily so that ``import pipeline`` never imports pytorch_nndct (nor torch).
BACKENDS = {
    "sim": "pipeline.quantizers.sim.backend:SimBackend",
    "nndct": "pipeline.quantizers.nndct:NndctBackend",
}
DEFAULT_BACKEND = next(iter(BACKENDS))


@dataclass
class CalibrationSummary:
    """What ``calibrate`` did (both backends return one).

    Attributes:
        batches: calibration forwards run (this rank's under torchrun: the sim's are all ranks').
        files: paths written into ``out_dir`` (``quant_info.json`` last for nndct).
        quant_info: the ``quant_info.json`` dict written.
        quantizer_version: the backend's ``version()``.
        sha256: ``{path: sha256 hex of the bytes written}`` for the files the backend wrote itself
            (sim); empty when the files come from elsewhere (nndct) or on a rank that does not write.
        fast_finetune: what the fast finetune did (method, batches, seconds, ...), or None without one.
        cle_pairs: the ``[conv, conv]`` pairs cross-layer equalization balanced (sim; empty for nndct).
        adjustments: messages on export-time fix_pos adjustments (sim; empty for nndct).
    """
    batches: int
    files: List[str]
    quant_info: Dict[str, Any]
    quantizer_version: Optional[str]
    sha256: Dict[str, str] = field(default_factory=dict)
    fast_finetune: Optional[Dict[str, Any]] = None
    cle_pairs: List[List[str]] = field(default_factory=list)
    adjustments: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Requirement:
    """One line of ``check-env``'s steps table a backend declares: a step it runs and what that needs.

    Attributes:
        step: the step, e.g. ``"calib/test"`` or ``"export xmodel"`` (shown as ``"<step> (<backend>)"``).
        uses: what it runs, for people.
        distributions: installed distributions it needs (package metadata, nothing imported).
        modules: importable modules it needs (found with ``importlib.util.find_spec``, not imported).
        why_not: the reason shown when one of them is missing.
        probe: what ``check-env`` runs, once the above are installed, to see that the step works in
            this environment (a tiny model end to end), called with the backend class that declares
            it: returns one line saying what it did, raises when it does not work; None where nothing
            can be run here (the line then rests on the installed packages alone, and ``check-env``
            says so).
    """
    step: str
    uses: str
    distributions: Tuple[str, ...] = ()
    modules: Tuple[str, ...] = ()
    why_not: str = ""
    probe: Optional[Callable[[type], str]] = None


class QuantSettings:
    """The quantizer arguments a config maps onto, named as in ``torch_quantizer``
    (docs/quantizer.md#torch_quantizer-arguments).

    Args:
        target: DPU target name such as ``DPUCZDX8G_ISA1_B4096``, or None. For ``nndct`` a target
            switches on hardware-aware quantization (needs the Vitis AI image).
        bitwidth: int bit width for weights, activations, input and bias (8 by default).
        quant_config_file: path to a ``quant_config_file`` JSON (docs/quant_config.md), or None for the defaults
            (CLE and bias correction on).
        device: ``"cpu"`` or ``"cuda"``.
        qat: the quantizer of a QAT-trained model (``QuantizerBackend.qat_trainable``): the default
            strategy at ``bitwidth`` with CLE and bias correction off, as the real ``QatProcessor``
            sets them; ``quant_config_file`` is not read then.
    """

    def __init__(self, target: Optional[str] = None, bitwidth: int = 8,
                 quant_config_file: Optional[str] = None, device: str = "cpu", qat: bool = False) -> None:
        self.target = target
        self.bitwidth = bitwidth
        self.quant_config_file = quant_config_file
        self.device = device
        self.qat = qat


class FinetuneRequest:
    """Fast finetune in ``calibrate`` (config ``quantizer.fast_finetune``; docs/finetune.md).

    Args:
        batches: the finetune batches (owned, contiguous float32 NCHW, made by the same stages and
            boundary as calibration); iterated once.
        method: ``adaquant`` (the real quantizer's) or another of the backend's ``finetune_methods``.
        passes: the most passes per layer (nndct: 100).
        memory_mb: memory for kept batches and each layer's cache, MiB (sim).
        spill_dir: folder for files beyond it (sim), or None.
        progress: ``(index, count, trace)`` after each layer, or None.
    """

    def __init__(self, batches: Iterable[torch.Tensor], method: str = "adaquant", passes: int = 100,
                 memory_mb: int = 1024, spill_dir: Optional[str] = None, progress: Any = None) -> None:
        self.batches = batches
        self.method = method
        self.passes = passes
        self.memory_mb = memory_mb
        self.spill_dir = spill_dir
        self.progress = progress


# the key of ``QuantizerBackend.export``'s result that names the deploy-check dumps' folder (not a format)
DEPLOY_CHECK = "deploy_check"
DEPLOY_CHECK_FOLDER = "deploy_check_data_int"  # nndct's NNDCT_KEYS.DEPLOY_CHECK_DATA_FOLDER


class QuantizerBackend:
    """Base class of quantizer backends. Subclasses implement every method below and declare:

    - ``formats``: export format -> the file name suffix after the model class name (plus what the
      backend needs to write it), e.g. ``{"xmodel": ("export_xmodel", "_int.xmodel")}``;
    - ``default_formats``: what ``export.formats`` becomes when a config names none;
    - ``separate_processes``: calib, test and export must each run in their own process when one
      invocation runs more than one of them (docs/quantizer.md#calib-and-test-in-separate-processes);
    - ``distributed``: calib and test can split their batches over torchrun's ranks;
    - ``simulates``: the test handle is the simulation's lowered model (the per-layer sensitivity,
      ``pipeline.sensitivity``, runs on it; for any other, on the simulation built from the calibration files);
    - ``finetune_methods``: the fast finetune methods ``calibrate`` takes (``FinetuneRequest.method``);
    - ``qat``: it trains quantization-aware (``qat_trainable``, ``qat_files``; ``load_test`` with
      ``QuantSettings(qat=True)`` on the trained weights gives the deployed model);
    - ``requirements``: check-env's lines for it (``Requirement``: each step it runs and what that needs);
    - ``version()``: its quantizer's version string (the fingerprint's ``quantizer_version``).

    The runner, the steps, config validation and check-env read these and never name a backend.
    """

    name = "base"
    formats = {}  # type: Dict[str, Any]
    default_formats = ()  # type: Tuple[str, ...]
    separate_processes = False
    distributed = False
    simulates = False
    finetune_methods = ()  # type: Tuple[str, ...]
    qat = False
    requirements = ()  # type: Tuple[Requirement, ...]

    @classmethod
    def artifact_name(cls, fmt: str, model_name: str) -> str:
        """The file ``export`` writes for ``fmt`` from a model of class ``model_name``, e.g. ``Net_int.xmodel``."""
        return model_name + cls.formats[fmt][-1]

    @classmethod
    def version(cls) -> Optional[str]:
        """Its quantizer's version string, found without importing heavy packages; None when not installed."""
        raise NotImplementedError

    @classmethod
    def is_available(cls) -> bool:
        """True when this backend can run in the current environment."""
        raise NotImplementedError

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        """Why this backend cannot run here (for check-env), or None when it can."""
        return None if cls.is_available() else "the %s backend is not available here" % cls.name

    def verify(self, handle: Any, files: Dict[str, str], inputs: Callable[[], torch.Tensor],
               max_lsb: Dict[str, int]) -> Tuple[Dict[str, Any], List[str]]:
        """Check the exported ``files`` against the test handle on ``inputs()`` (the eval batches, float32
        NCHW); returns ``({format: report}, warnings)``. Default: nothing to verify."""
        return {}, []

    def calibrate(self, model: torch.nn.Module, example: torch.Tensor,
                  batches: Iterable[torch.Tensor], out_dir: str,
                  settings: QuantSettings, traced: Any = None,
                  finetune: Optional[FinetuneRequest] = None) -> CalibrationSummary:
        """Calibrate on ``batches`` (float32 NCHW) and write ``quant_info.json`` into ``out_dir``.
        ``traced``: the step's ``pipeline.fx.float_trace.FloatTrace`` of ``model``, for a backend that
        traces with torch.fx (None: it traces itself). ``finetune``: run fast finetune first, then
        calibrate on ``batches`` as the real quantizer's re-calibration (``param.pth`` is written too).

        Returns a ``CalibrationSummary`` (with a finetune, its ``fast_finetune`` says what it did).
        """
        raise NotImplementedError

    def load_test(self, model: torch.nn.Module, example: torch.Tensor, out_dir: str,
                  settings: QuantSettings, traced: Any = None) -> Any:
        """Return a test-mode handle; ``handle(batch)`` gives the quantized outputs (float32)."""
        raise NotImplementedError

    def export(self, handle: Any, example1: torch.Tensor, out_dir: str,
               formats: List[str], deploy_check: bool = False) -> Dict[str, str]:
        """Export the test-mode model from a batch-1, owned, contiguous example input; ``{format: path}``.
        ``deploy_check`` (with ``"xmodel"`` in ``formats``): also the real quantizer's deploy-check dumps,
        ``out_dir/deploy_check_data_int/<Model>/`` (``export_xmodel(deploy_check=True)``), returned as
        ``{DEPLOY_CHECK: that folder}`` besides the formats."""
        raise NotImplementedError

    def qat_trainable(self, model: torch.nn.Module, example: torch.Tensor, settings: QuantSettings,
                      exact_deploy: bool, calib_dir: Optional[str] = None) -> Any:
        """The trainable QAT model of ``model`` (in training mode, with ``quantizer_parameters()``,
        ``non_quantizer_parameters()``, ``freeze_bn_stats()``, ``fix_positions(adjusted)`` and
        ``quantizers()``), its thresholds taken from ``calib_dir``'s ``quant_info.json`` when given, else
        set by warm-up on the first batch. Only for a backend with ``qat``."""
        raise NotImplementedError

    def qat_files(self, trained: Any, model: torch.nn.Module,
                  out_dir: str) -> Tuple[Dict[str, Any], Dict[str, Any], List[Tuple[str, bytes]]]:
        """``(raw quant_info, shipped quant_info, [(path, bytes)])`` of the deployable files of
        ``trained`` under ``out_dir`` (``test/quant_info.json``, ``quant_info.json``,
        ``deployable.pth``: ``model``'s state_dict with the trained values); nothing is written."""
        raise NotImplementedError


def backend_class(name: str) -> Type[QuantizerBackend]:
    """The backend class registered under ``name``; raises ConfigError listing the valid names."""
    if name not in BACKENDS:
        raise ConfigError("quantizer.backend: expected one of %s, got %r" % (sorted(BACKENDS), name))
    module_name, class_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def backend_classes() -> List[Type[QuantizerBackend]]:
    """Every registered backend class, in registry order (imported; nndct's never imports pytorch_nndct)."""
    return [backend_class(name) for name in BACKENDS]


def get_backend(name: str) -> QuantizerBackend:
    """Instantiate the backend registered under ``name``; raises ConfigError listing the valid names."""
    return backend_class(name)()


def artifact_name(fmt: str, model_name: str) -> str:
    """The file a backend that writes ``fmt`` names it (the first registered one), e.g. the xmodel the
    compile step expects when none was exported. Raises KeyError when no backend writes ``fmt``."""
    for cls in backend_classes():
        if fmt in cls.formats:
            return cls.artifact_name(fmt, model_name)
    raise KeyError(fmt)


def all_formats() -> List[str]:
    """Every export format some backend writes, in registry order."""
    out = []  # type: List[str]
    for cls in backend_classes():
        out.extend(f for f in cls.formats if f not in out)
    return out
