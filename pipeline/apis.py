"""Drop-in ``torch_quantizer`` backed by the CPU simulation (``sim`` backend).

Scripts written for ``pytorch_nndct.apis.torch_quantizer`` (Vitis AI 3.5; facts 1.1-1.3) run
unchanged with ``from pipeline.apis import torch_quantizer``::

    q = torch_quantizer("calib", model, (x,), output_dir="quantize_result")
    for batch in calib_batches:
        q.quant_model(batch)
    q.export_quant_config()            # quant_info.json (+ bias_corr.pth)

    q = torch_quantizer("test", model, (x,), output_dir="quantize_result")
    out = q.quant_model(eval_batch)     # bit-identical to the real quantizer's test mode
    q.export_onnx_model()               # <Model>_int.onnx

What behaves like the real quantizer: the quant_mode rules (anything but 'calib'/'test' warns
and calibrates), the files and their format, the fix positions and test-mode numbers (two-process
result, whatever the process layout), ``export_quant_config`` without a forward only logs an
error, CUDA falls back to the CPU with the real warning.

What differs, on purpose:

- The caller's input tensors and model are NEVER changed: the real quantizer rounds its input in
  place and swaps ReLU6 for ReLU inside the caller's model (facts 1.4, 1.5); here the model is
  deep-copied and every operation is out of place.
- Errors raise instead of ending the process: a missing ``quant_info.json`` or
  ``bias_corr.pth`` in test mode is a ``QuantizationError`` (nndct calls ``exit(2)``), a bad
  ``quant_config_file`` a ``ConfigError``.
- The simulation always runs on the CPU; ``target`` is recorded (no hardware-aware partitioning);
  only single-input models are supported; ``export_xmodel`` is not provided (it needs ``xir``).
"""
import copy
import logging
import os
import warnings
from typing import Any, Optional

import torch
from torch import nn

from .errors import QuantizationError
from .models.loading import load_state_dict_file
from .quantizers.quant_config import load_quant_config
from .quantizers.sim.session import SimSession

LOG = logging.getLogger(__name__)

# Keyword arguments of the real torch_quantizer (3.5) that the simulation accepts and ignores,
# with their defaults (facts 1.1).
IGNORED_KWARGS = {"input_kwargs": None, "mix_bit": False, "lstm": False, "app_deploy": "CV",
                  "qat_proc": False, "custom_quant_ops": None, "dynamo": False}
QUANT_MODES = {"calib": "calib", "test": "test", 1: "calib", 2: "test"}


def _mode(quant_mode: Any) -> str:
    if quant_mode in QUANT_MODES and not isinstance(quant_mode, bool):
        if isinstance(quant_mode, int):
            warnings.warn("integer quant_mode is deprecated; use 'calib' or 'test'")
        return QUANT_MODES[quant_mode]
    warnings.warn("quant_mode supported values are 'calib' and 'test'. Change it to 'calib'")
    return "calib"


def _example(input_args: Any) -> torch.Tensor:
    args = input_args if isinstance(input_args, (tuple, list)) else (input_args,)
    if len(args) != 1 or not isinstance(args[0], torch.Tensor):
        raise QuantizationError("input_args: the sim quantizer supports models with one tensor input; "
                                "got %s" % ([type(a).__name__ for a in args],))
    return args[0].detach().cpu().float()


def _device(device: Any) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            warnings.warn("CUDA (HIP) is not available, change device to CPU")
        else:
            warnings.warn("the sim quantizer runs on the CPU; device %s is not used" % device)
    return torch.device("cpu")


class _CalibModel(nn.Module):
    """Calib-mode ``quant_model``: each forward is one calibration batch of the simulation."""

    def __init__(self, quantizer: "TorchQuantizer") -> None:
        super().__init__()
        self._quantizer = [quantizer]  # a list, so nn.Module does not register it

    def forward(self, x: torch.Tensor) -> Any:
        q = self._quantizer[0]
        return q._calibrator.step(x.detach().cpu())


class TorchQuantizer:
    """The object ``torch_quantizer`` returns. See :func:`torch_quantizer`."""

    def __init__(self, quant_mode: Any, module: nn.Module, input_args: Any = None,
                 state_dict_file: Optional[str] = None, output_dir: str = "quantize_result",
                 bitwidth: Optional[int] = None, device: Any = torch.device("cuda"),
                 quant_config_file: Optional[str] = None, target: Optional[str] = None,
                 **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(IGNORED_KWARGS))
        if unknown:
            raise TypeError("torch_quantizer() got unexpected keyword arguments %s" % unknown)
        for key, value in kwargs.items():
            if value != IGNORED_KWARGS[key]:
                warnings.warn("torch_quantizer: %s=%r is ignored by the sim quantizer" % (key, value))
        if input_args is None:
            raise QuantizationError("input_args is required: an example input of the model's input shape")
        if isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            warnings.warn("DataParallel is not supported; its module is quantized instead")
            module = module.module
        self.quant_mode = _mode(quant_mode)
        self.device = _device(device)
        self.output_dir = output_dir
        self.target = target
        if target is not None and quant_config_file is not None:
            warnings.warn("target and quant_config_file are both given: hardware-aware mode is off")
        if state_dict_file is not None:
            module = copy.deepcopy(module)
            module.load_state_dict(load_state_dict_file(state_dict_file))
        self.config = load_quant_config(quant_config_file, bitwidth)
        example = _example(input_args)
        os.makedirs(output_dir, exist_ok=True)
        self._session = SimSession(module, example, self.config)
        self._example = example
        self._forwards = 0
        if self.quant_mode == "calib":
            self._calibrator = self._session.calibrator()
            self._model = _CalibModel(self)  # type: nn.Module
        else:
            self._model = self._session.load_test(output_dir)
            self._model.register_forward_hook(self._count_forward)

    def _count_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        self._forwards += 1

    @property
    def quant_model(self) -> nn.Module:
        """The quantized model to run forwards on.

        calib: each forward calibrates on the batch (float32 NCHW, not modified) and returns the
        calibration output. test: the lowered ``torch.fx.GraphModule`` (``sim/lowered.py``).
        """
        LOG.info("=>Get module with quantization.")
        return self._model

    def export_quant_config(self) -> Optional[str]:
        """Calib mode: write ``quant_info.json`` (and ``bias_corr.pth``) into ``output_dir``.

        Returns the quant_info.json path, or None (with an error logged, as the real quantizer
        does) when no calibration forward has run, and in test mode.
        """
        if self.quant_mode != "calib":
            LOG.warning("export_quant_config is for calib mode; nothing written in test mode")
            return None
        if self._calibrator.batches == 0:
            LOG.error("Quantization is not performed completely, check if module FORWARD function "
                      "is called! FORWARD function of torch_quantizer.quant_model needs to be called "
                      "in user code explicitly.")
            return None
        files = self._session.export_quant_config(self._calibrator, self.output_dir)
        return files[-1]

    def export_onnx_model(self, output_dir: str = "quantize_result", verbose: bool = False,
                          dynamic_batch: bool = False, opset_version: Optional[int] = None,
                          native_onnx: bool = True, dump_layers: bool = False,
                          check_model: bool = False, opt_graph: bool = False) -> Optional[str]:
        """Test mode: write ``<output_dir>/<Model>_int.onnx`` (facts 1.2).

        ``native_onnx=True`` gives QuantizeLinear/DequantizeLinear (``qdq`` flavour, half-even on
        ties); ``False`` gives the bit-exact ``exact`` flavour (nndct writes ``vai::`` custom ops
        there). The batch dimension is always dynamic; ``verbose``, ``dump_layers``,
        ``check_model`` and ``opt_graph`` are accepted and ignored, ``opset_version`` must be None
        or 13.

        Returns the file path, or None (error logged, like the real quantizer) in calib mode or
        before any test-mode forward.

        Raises:
            ExportError: the exporter cannot write the model (see ``pipeline.export``).
        """
        if self.quant_mode != "test" or self._forwards == 0:
            LOG.error("export_onnx_model needs test mode and at least one forward of quant_model")
            return None
        if opset_version not in (None, 13):
            raise QuantizationError("export_onnx_model: the exporter writes opset 13, got opset_version=%r"
                                    % opset_version)
        from .export import export_onnx
        path = os.path.join(output_dir, "%s_int.onnx" % self._session.graph.class_name)
        return export_onnx(self._model, self._example[:1].contiguous(), path,
                           "qdq" if native_onnx else "exact")


def torch_quantizer(quant_mode: Any, module: nn.Module, input_args: Any = None,
                    state_dict_file: Optional[str] = None, output_dir: str = "quantize_result",
                    bitwidth: Optional[int] = None, device: Any = torch.device("cuda"),
                    quant_config_file: Optional[str] = None, target: Optional[str] = None,
                    **ignored_known_kwargs: Any) -> TorchQuantizer:
    """Create a quantizer with the signature of ``pytorch_nndct.apis.torch_quantizer`` (facts 1.1).

    Args:
        quant_mode: ``"calib"`` or ``"test"`` (1 or 2 accepted, deprecated); anything else warns
            and calibrates, as the real one does.
        module: float ``nn.Module`` (a DataParallel wrapper is stripped). Never modified.
        input_args: example input (a tensor or a 1-tuple): float32 NCHW, the trace shape. Not
            modified.
        state_dict_file: optional float weights, loaded into a copy of ``module``.
        output_dir: folder of ``quant_info.json``, ``bias_corr.pth`` and exports (created).
        bitwidth: bit width of every tensor without a config file (None means 8).
        device: requested device; the simulation runs on the CPU (warning for CUDA).
        quant_config_file: quant_config_file JSON (facts 2.7) or None for the defaults
            (CLE and bias correction on).
        target: DPU target name; recorded only.
        **ignored_known_kwargs: the real API's other keyword arguments (``input_kwargs``,
            ``mix_bit``, ``lstm``, ``app_deploy``, ``qat_proc``, ``custom_quant_ops``,
            ``dynamo``); a non-default value warns. Unknown names raise TypeError.

    Returns:
        TorchQuantizer with ``quant_model``, ``export_quant_config()`` and
        ``export_onnx_model()``.

    Raises:
        ConfigError: bad quant_config_file. QuantizationError: unsupported model or config, no
        ``input_args``, or (test mode) missing/mismatching quant_info.json or bias_corr.pth.
    """
    return TorchQuantizer(quant_mode, module, input_args, state_dict_file, output_dir, bitwidth,
                          device, quant_config_file, target, **ignored_known_kwargs)


__all__ = ["torch_quantizer", "TorchQuantizer"]
