"""``torch_quantizer``, the drop-in's entry point (``pytorch_nndct.apis.torch_quantizer``): a ``TorchQuantizer``
(post-training quantization, ``quantizer``) or, with ``qat_proc=True``, a ``QatQuantizer`` (``qat``)."""
from typing import Any, Optional, Union

import torch
from torch import nn

from .qat import QatQuantizer
from .quantizer import TorchQuantizer


def torch_quantizer(quant_mode: Any, module: nn.Module, input_args: Any = None,
                    state_dict_file: Optional[str] = None, output_dir: str = "quantize_result",
                    bitwidth: Optional[int] = None, device: Any = torch.device("cuda"),
                    quant_config_file: Optional[str] = None, target: Optional[str] = None,
                    **ignored_known_kwargs: Any) -> Union[TorchQuantizer, QatQuantizer]:
    """Create a quantizer with the signature of ``pytorch_nndct.apis.torch_quantizer`` (docs/quantizer.md#torch_quantizer-arguments).

    Args:
        quant_mode: ``"calib"`` or ``"test"`` (1 or 2 accepted, deprecated); anything else warns
            and calibrates, as the real one does.
        module: float ``nn.Module`` (a DataParallel wrapper is stripped). Never modified.
        input_args: example input: a float32 torch.Tensor of any rank (the trace shape), or a
            tuple/list with one per ``forward`` argument. Not modified. Every ``quant_model`` call
            takes as many float32 tensors, each of its example's rank.
        state_dict_file: optional float weights, loaded into a copy of ``module``.
        output_dir: folder of ``quant_info.json`` and ``bias_corr.pth`` (calib mode creates it; test mode
            reads it).
        bitwidth: bit width of every tensor without a config file (None means 8).
        device: requested device; the simulation runs on the CPU (warning for CUDA).
        quant_config_file: quant_config_file JSON (docs/quant_config.md) or None for the defaults
            (CLE and bias correction on); the project's own callers may pass a resolved
            ``QuantConfig`` (``pipeline.apis.qat`` does).
        target: DPU target name (or ``0x`` fingerprint) of ``pipeline.targets``;
            checked, then recorded only, with a warning (no hardware-aware quantization).
        **ignored_known_kwargs: the real API's other keyword arguments (``input_kwargs``,
            ``mix_bit``, ``lstm``, ``app_deploy``, ``custom_quant_ops``, ``dynamo``); a non-default
            value warns. Unknown names raise TypeError. ``qat_proc=True`` returns a
            ``pipeline.apis.qat.QatQuantizer`` instead (quantization-aware training, docs/qat.md): as in
            the real API, ``quant_mode`` is then not used.

    Returns:
        TorchQuantizer with ``quant_model``, ``export_quant_config()``, ``export_onnx_model()``,
        ``export_torch_script()`` and ``export_xmodel()``.

    Raises:
        ConfigError: bad quant_config_file, unknown ``target``, an ``output_dir`` that is no path.
        StorageError: ``output_dir`` is a file, or (calib mode) cannot be created.
        RunFolderError: (calib mode) ``output_dir`` lies in a run folder that a pipeline run holds now.
        QuantizationError: unsupported
        model or config, no ``input_args``, one that is not a float32 tensor (a numpy array), as
        many tensors as ``forward`` takes, or (test mode) missing/mismatching quant_info.json or
        bias_corr.pth.
    """
    if ignored_known_kwargs.get("qat_proc"):
        return QatQuantizer(module, input_args, output_dir, bitwidth, ignored_known_kwargs.get("mix_bit", False))
    return TorchQuantizer(quant_mode, module, input_args, state_dict_file, output_dir, bitwidth,
                          device, quant_config_file, target, **ignored_known_kwargs)
