"""The quantizer backend contract shared by ``sim`` (CPU simulation) and ``nndct`` (the real quantizer).

The runner drives every backend the same way, one step per process if the user wishes:

1. ``calibrate(model, example, batches, out_dir, settings)``: run the calibration forwards and write
   ``out_dir/quant_info.json`` (and ``bias_corr.pth`` when bias correction is on) in the real
   quantizer's format (docs/quantizer.md#the-quant_info-format). Raises ``QuantizationError("calibration
   saw 0 batches ...")`` before writing anything when ``batches`` is empty (public case P03).
2. ``load_test(model, example, out_dir, settings)``: build the test-mode quantized model from the
   files in ``out_dir``. Raises ``QuantizationError`` when ``quant_info.json`` is missing.
3. ``export(handle, example1, out_dir, formats)``: write the quantized model in the requested formats
   from a batch-1 example (public case P04) and return ``{format: path}``.

Every batch a backend receives is an owned, contiguous float32 NCHW tensor made by the quantizer
boundary; backends never modify the caller's model (they work on a copy).
"""
import importlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Type

import torch

from ..errors import ConfigError

# Literal registry: YAML ``quantizer.backend`` -> "module:class". Imported lazily so that
# ``import pipeline`` never imports pytorch_nndct.
BACKENDS = {
    "sim": "pipeline.quantizers.sim.backend:SimBackend",
    "nndct": "pipeline.quantizers.nndct:NndctBackend",
}

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
    """

    def __init__(self, target: Optional[str] = None, bitwidth: int = 8,
                 quant_config_file: Optional[str] = None, device: str = "cpu") -> None:
        self.target = target
        self.bitwidth = bitwidth
        self.quant_config_file = quant_config_file
        self.device = device


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


class QuantizerBackend:
    """Base class of quantizer backends. Subclasses implement every method below and declare:

    - ``formats``: export format -> the file name suffix after the model class name (plus what the
      backend needs to write it), e.g. ``{"xmodel": ("export_xmodel", "_int.xmodel")}``;
    - ``default_formats``: what ``export.formats`` becomes when a config names none;
    - ``separate_processes``: calib, test and export must each run in their own process when one
      invocation runs more than one of them (docs/quantizer.md#calib-and-test-in-separate-processes);
    - ``distributed``: calib and test can split their batches over torchrun's ranks;
    - ``simulates``: the test handle is the simulation's lowered model (the sensitivity reuses it);
    - ``finetune_methods``: the fast finetune methods ``calibrate`` takes (``FinetuneRequest.method``).

    The runner and config validation read these and never name a backend.
    """

    name = "base"
    formats = {}  # type: Dict[str, Any]
    default_formats = ()  # type: Tuple[str, ...]
    separate_processes = False
    distributed = False
    simulates = False
    finetune_methods = ()  # type: Tuple[str, ...]

    @classmethod
    def artifact_name(cls, fmt: str, model_name: str) -> str:
        """The file ``export`` writes for ``fmt`` from a model of class ``model_name``, e.g. ``Net_int.xmodel``."""
        return model_name + cls.formats[fmt][-1]

    def verify(self, handle: Any, files: Dict[str, str], inputs: Callable[[], torch.Tensor],
               max_lsb: Dict[str, int]) -> Tuple[Dict[str, Any], List[str]]:
        """Check the exported ``files`` against the test handle on ``inputs()`` (the eval batches, float32
        NCHW); returns ``({format: report}, warnings)``. Default: nothing to verify."""
        return {}, []

    @classmethod
    def is_available(cls) -> bool:
        """True when this backend can run in the current environment."""
        raise NotImplementedError

    def calibrate(self, model: torch.nn.Module, example: torch.Tensor,
                  batches: Iterable[torch.Tensor], out_dir: str,
                  settings: QuantSettings, traced: Any = None,
                  finetune: Optional[FinetuneRequest] = None) -> Dict[str, Any]:
        """Calibrate on ``batches`` (float32 NCHW) and write ``quant_info.json`` into ``out_dir``.
        ``traced``: the step's ``pipeline.fx.float_trace.FloatTrace`` of ``model``, for a backend that
        traces with torch.fx (None: it traces itself). ``finetune``: run fast finetune first, then
        calibrate on ``batches`` as the real quantizer's re-calibration (``param.pth`` is written too).

        Returns a summary dict with at least ``batches`` (int) and ``files`` (list of paths written),
        and with a finetune, ``fast_finetune`` (what it did).
        """
        raise NotImplementedError

    def load_test(self, model: torch.nn.Module, example: torch.Tensor, out_dir: str,
                  settings: QuantSettings, traced: Any = None) -> Any:
        """Return a test-mode handle; ``handle(batch)`` gives the quantized outputs (float32)."""
        raise NotImplementedError

    def export(self, handle: Any, example1: torch.Tensor, out_dir: str,
               formats: List[str]) -> Dict[str, str]:
        """Export the test-mode model from a batch-1, owned, contiguous example input."""
        raise NotImplementedError


def backend_class(name: str) -> Type[QuantizerBackend]:
    """The backend class registered under ``name``; raises ConfigError listing the valid names."""
    if name not in BACKENDS:
        raise ConfigError("quantizer.backend: expected one of %s, got %r" % (sorted(BACKENDS), name))
    module_name, class_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def get_backend(name: str) -> QuantizerBackend:
    """Instantiate the backend registered under ``name``; raises ConfigError listing the valid names."""
    return backend_class(name)()


def artifact_name(fmt: str, model_name: str) -> str:
    """The file a backend that writes ``fmt`` names it (the first registered one), e.g. the xmodel the
    compile step expects when none was exported. Raises KeyError when no backend writes ``fmt``."""
    for name in BACKENDS:
        cls = backend_class(name)
        if fmt in cls.formats:
            return cls.artifact_name(fmt, model_name)
    raise KeyError(fmt)


def all_formats() -> List[str]:
    """Every export format some backend writes, in registry order."""
    out = []  # type: List[str]
    for name in BACKENDS:
        out.extend(f for f in backend_class(name).formats if f not in out)
    return out
