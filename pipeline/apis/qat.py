"""The drop-in ``QatProcessor`` (``pytorch_nndct.QatProcessor`` of Vitis AI 3.5) on the simulation
(docs/qat.md).

A script written for the real one runs with its import line changed::

    from pipeline.apis import QatProcessor
    qat = QatProcessor(model, inputs, bitwidth=8)
    qmodel = qat.trainable_model()
    optimizer = torch.optim.Adam([{"params": qmodel.quantizer_parameters(), "lr": 1e-2},
                                  {"params": qmodel.non_quantizer_parameters(), "lr": 1e-5}])
    ...                                           # ordinary training of qmodel
    qat.to_deployable(qmodel, output_dir)         # test/quant_info.json, quant_info.json, deployable.pth
    # later, in another process:
    dmodel = qat.deployable_model(output_dir, used_for_xmodel=True)
    dmodel(x[:1])
    qat.export_xmodel(output_dir)                 # <Model>_int.xmodel

The same numbers as the real one: the same quantization points, the TQT quantizer and its
gradients, the warm-up, BN simulated folding and ``to_deployable``'s files
(``pipeline.quantizers.sim.qat``; compared with the real quantizer in ``tests/data/qat_real``).

What differs, on purpose:

- ``exact_deploy=True`` trains at the fix positions that ship (the DPU constraint pass inside
  training, the deploy-time BN fold in eval mode, every call of a reused module as it deploys):
  the deployable model's outputs equal the trainable model's eval-mode outputs bit for bit. The
  default, False, keeps the real quantizer's behaviour, whose deployed model differs from the
  trained one (docs/qat.md#trained-and-deployed).
- Nothing is written to a fixed ``.vai_qat`` folder in the working directory: parallel jobs in one
  folder never collide.
- Under torch.distributed every quantizer's warm-up threshold is rank 0's (broadcast), so the
  ranks start, and with DDP stay, identical.
- ``x + y``, ``torch.cat``, functional ReLU and the other forms the real one makes users rewrite as
  modules (``functional.Add``, ...) are taken as written, as PTQ takes them; the input needs no
  ``QuantStub``.
- Errors raise (``QuantizationError``) instead of ending the process, and nothing is half-written.
- ``torch_quantizer(..., qat_proc=True)`` works end to end (``QatQuantizer``): ``quant_model`` is the
  trainable model, ``export_quant_config()`` writes ``to_deployable``'s files, ``deploy_model`` is the
  deployable model, and the exports follow. The real one is half-wired: its ``deploy_model`` and
  ``export_quant_config`` call methods its ``QatProcessor`` does not have (AttributeError).
"""
import copy
import os
import warnings
from typing import Any, List, Optional, Tuple

import torch
from torch import nn

from ..errors import QuantizationError
from ..quantizers.sim.qat.deploy import DEPLOYABLE_FILE, check_manifest, moved_positions, write_deployable
from ..quantizers.sim.qat.trainable import QatModel, build_trainable, import_calibration, qat_session
from .checks import example_inputs, output_folder
from .notes import note
from .quantizer import TorchQuantizer


def _shape_signature(model: nn.Module) -> List[Tuple[str, Tuple[int, ...]]]:
    return [(k, tuple(v.shape)) for k, v in model.state_dict().items()]


class QatProcessor:
    """Quantization-aware training with the real ``QatProcessor``'s methods and files (module docstring).

    Args:
        model: the float ``nn.Module`` (eval-mode BN statistics; trained weights). Never modified:
            training works on the trainable model's own copies.
        inputs: example input(s): a float32 tensor, or one per ``forward`` argument (the trace
            shapes). Not modified.
        bitwidth: bit width of every tensor (2..16; 8 is what the DPU runs).
        mix_bit: must be False (the real one's mixed 4/8-bit strategy is not simulated).
        device: ignored, as in the real one (a warning); training runs where the model's
            parameters are (CPU or CUDA).
        exact_deploy: train at the positions that ship (module docstring). False: the real behaviour.

    Raises:
        QuantizationError: a DataParallel/DistributedDataParallel wrapper (wrap the trainable model
            instead), ``mix_bit=True``, inputs that are not float32 tensors, what the capture refuses.
    """

    def __init__(self, model: nn.Module, inputs: Any, bitwidth: int = 8, mix_bit: bool = False,
                 device: Any = None, exact_deploy: bool = False) -> None:
        if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            raise QuantizationError("QatProcessor: got a %s; pass the bare model and wrap the trainable model "
                                    "(qat.trainable_model()) in it instead" % type(model).__name__)
        if mix_bit:
            raise QuantizationError("QatProcessor: mix_bit=True (the real quantizer's mixed 4/8-bit strategy) is not "
                                    "simulated; use one bitwidth")
        if device is not None:
            warnings.warn('The argument "device" is no longer used and will be ignored.')
        self._model = model
        self._inputs = example_inputs(inputs)
        self._bitwidth = bitwidth
        self._exact = bool(exact_deploy)
        params = list(model.parameters())
        self._device = params[0].device if params else torch.device("cpu")
        self._session = qat_session(model, self._inputs, bitwidth)
        self._signature = _shape_signature(model)
        self._trainable = None  # type: Optional[QatModel]
        self._quantizer = None  # type: Optional[TorchQuantizer]

    # ---- training ----------------------------------------------------------------------------
    def trainable_model(self, calib_dir: str = "", allow_reused_module: bool = False) -> QatModel:
        """The model to train: the float model with a learnable quantizer at each quantization point
        (``pipeline.quantizers.sim.qat.trainable.QatModel``), on the float model's device, in
        training mode. Its helpers: ``enable_quant``, ``disable_quant``, ``enable_warmup``,
        ``disable_warmup``, ``freeze_quant``, ``freeze_bn_stats``, ``fuse_conv_bn``,
        ``quantizer_parameters``, ``non_quantizer_parameters``.

        Args:
            calib_dir: a folder holding a PTQ calibration's ``quant_info.json`` (this project's or the
                real quantizer's, for this model): the thresholds start at its fix positions
                (``log_threshold = b - 1 - fix_pos``, no warm-up). Empty: each quantizer warms up on
                the first batch it sees.
            allow_reused_module: train a module called several times with one shared quantizer (the
                real quantizer's only option). Without it such a module is refused, unless
                ``exact_deploy`` (each call then trains its own, as it deploys).

        Raises:
            QuantizationError: what QAT cannot train (named, with the rewrite), a reused module as
                above, ``calib_dir`` without a quant_info.json that matches this model.
        """
        if calib_dir:
            _check_calib_dir(calib_dir)  # before any work
        model = build_trainable(self._model, self._inputs, self._bitwidth, self._exact, allow_reused_module,
                                session=self._session)
        if calib_dir:
            import_calibration(model, calib_dir, "calibrate this model (torch_quantizer('calib', ...)) or pass "
                                                 "calib_dir=''")
        self._trainable = model
        return model.to(self._device)

    # ---- deployable --------------------------------------------------------------------------
    def to_deployable(self, trained_model: QatModel, output_dir: str) -> nn.Module:
        """Write ``output_dir/test/quant_info.json`` (raw fix positions), ``output_dir/quant_info.json``
        (after the DPU constraint pass: what ships) and ``output_dir/deployable.pth`` (the float
        model's state_dict with the trained values), then return the deployable test-mode model
        (as ``deployable_model(output_dir)``, on the CPU). A quantizer that never ran warns
        "Exported scale values are not trained", as in the real one.

        Raises:
            QuantizationError: ``trainable_model`` not called, a model that is not this processor's
                trainable model, one after ``fuse_conv_bn()``, NaN/Inf in a weight or threshold (named),
                a float model whose parameters changed shape since ``trainable_model``. Nothing is
                written then.
        """
        self._check_trained(trained_model, "to_deployable")
        folder = output_folder(output_dir, "to_deployable", create=True, writes=True)
        untrained = trained_model.untrained()
        if untrained:
            warnings.warn("Exported scale values are not trained: %s. (%d quantizer(s) never ran a forward with "
                          "quantization on: their fix positions are the initial ones)" % (", ".join(untrained), len(untrained)))
        raw, adjusted = write_deployable(trained_model, self._model, folder)
        for line in moved_positions(raw, adjusted):
            note("QAT: the DPU constraint pass moved %s (quant_info.json; test/quant_info.json keeps the trained "
                 "position)", line)
        note("Saving deployable model to %s", os.path.join(folder, DEPLOYABLE_FILE))
        return self.deployable_model(folder)

    def _check_trained(self, model: Any, method: str) -> None:
        if self._trainable is None:
            raise QuantizationError("%s: call trainable_model() first" % method)
        if not isinstance(model, QatModel):
            raise QuantizationError("%s: expected the model trainable_model() returned (trained), got a %s"
                                    % (method, type(model).__name__))
        mine, theirs = self._session.graph, model._shared.session.graph
        if (theirs.class_name, theirs.graph_md5()) != (mine.class_name, mine.graph_md5()):
            raise QuantizationError("%s: the model is the trainable model of another float model (%s, graph %s; this "
                                    "QatProcessor's is %s, graph %s): pass the one made by this QatProcessor, or a copy of "
                                    "it" % (method, theirs.class_name, theirs.graph_md5(), mine.class_name,
                                            mine.graph_md5()))
        if _shape_signature(self._model) != self._signature:
            raise QuantizationError("%s: the float model's parameters changed since QatProcessor was made; make a new "
                                    "QatProcessor for the changed model" % method)

    def deployable_model(self, src_dir: str, used_for_xmodel: bool = False) -> nn.Module:
        """The deployable model: a copy of the float model with ``src_dir/deployable.pth`` in the
        real quantizer's test mode (this project's drop-in ``torch_quantizer('test', ...)``) with
        ``src_dir/quant_info.json``. It runs on the CPU (the simulation does; ``used_for_xmodel``
        is accepted). Run one batch-1 forward before ``export_xmodel``.

        Raises:
            QuantizationError: a missing file, files made for another model, or files of different
                ``to_deployable`` runs mixed in one folder (``deployable_manifest.json``).
        """
        path = os.path.join(src_dir, DEPLOYABLE_FILE)
        if not os.path.isfile(path) or not os.path.isfile(os.path.join(src_dir, "quant_info.json")):
            raise QuantizationError("deployable_model: %s needs %s and quant_info.json, which to_deployable(model, %r) "
                                    "writes; run it first" % (src_dir, DEPLOYABLE_FILE, src_dir))
        from ..models.loading import load_state_dict_file
        check_manifest(src_dir)
        state = load_state_dict_file(path)
        model = copy.deepcopy(self._model).cpu()
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            raise QuantizationError("deployable_model: %s was made for another model (%s); run to_deployable for this "
                                    "one" % (path, str(e).splitlines()[0]))
        self._quantizer = TorchQuantizer("test", model, self._inputs, output_dir=src_dir, device="cpu",
                                         quant_config_file=self._session.cfg)
        return self._quantizer.quant_model

    def _deployed(self, method: str) -> TorchQuantizer:
        if self._quantizer is None:
            raise QuantizationError('%s: call deployable_model(output_dir, used_for_xmodel=True) (or to_deployable) '
                                    'first, then run one batch-1 forward of the model it returns' % method)
        return self._quantizer

    def export_xmodel(self, output_dir: str = "quantize_result", deploy_check: bool = False,
                      dynamic_batch: bool = False) -> str:
        """``<output_dir>/<Model>_int.xmodel`` of the deployable model (the drop-in's
        ``export_xmodel``: its first forward must have been batch 1). Returns the path.

        Raises:
            QuantizationError: no ``deployable_model`` yet, no forward, a first forward of batch > 1.
        """
        return self._deployed("export_xmodel").export_xmodel(output_dir, deploy_check, dynamic_batch)

    def export_onnx_model(self, output_dir: str = "quantize_result", verbose: bool = False,
                          dynamic_batch: bool = False, opset_version: Optional[int] = None,
                          native_onnx: bool = True, dump_layers: bool = False, check_model: bool = False,
                          opt_graph: bool = False) -> Optional[str]:
        """``<output_dir>/<Model>_int.onnx`` of the deployable model (the drop-in's ``export_onnx_model``)."""
        return self._deployed("export_onnx_model").export_onnx_model(
            output_dir, verbose, dynamic_batch, opset_version, native_onnx, dump_layers, check_model, opt_graph)

    def export_torch_script(self, output_dir: str = "quantize_result", verbose: bool = False) -> Any:
        """``<output_dir>/<Model>_int.pt`` of the deployable model (the drop-in's ``export_torch_script``)."""
        return self._deployed("export_torch_script").export_torch_script(output_dir, verbose)

    def convert_to_deployable(self, trained_model: QatModel, output_dir: str) -> nn.Module:
        """Deprecated in the real one: ``to_deployable``, returning the float model with the trained
        weights (a copy)."""
        warnings.warn('"convert_to_deployable" is deprecated and will be removed in the future. Use "to_deployable" '
                      'instead.')
        self.to_deployable(trained_model, output_dir)
        model = copy.deepcopy(self._model)
        model.load_state_dict(trained_model.float_state_dict(self._model))
        return model.eval()


class QatQuantizer:
    """What ``torch_quantizer(quant_mode, model, inputs, qat_proc=True, output_dir=..., bitwidth=...)`` returns:
    the real API's QAT path, wired end to end (``quant_mode`` is not used, as in the real one).

    - ``quant_model``: the trainable model (``QatProcessor.trainable_model()``; the same object every time);
    - ``export_quant_config()``: ``to_deployable(quant_model, output_dir)``; returns the path of
      ``output_dir/quant_info.json``;
    - ``deploy_model``: the deployable model of ``output_dir`` (``deployable_model``), on the CPU;
    - ``export_xmodel``, ``export_onnx_model``, ``export_torch_script``: of the deployable model (run one
      batch-1 forward of ``deploy_model`` before ``export_xmodel``).

    Args: the float model, its example inputs, ``output_dir``, ``bitwidth`` (None: 8) and ``mix_bit`` (must
    be False), as ``torch_quantizer`` takes them.

    Raises:
        QuantizationError: as ``QatProcessor``; ``deploy_model`` before ``export_quant_config()`` (and no
            files in ``output_dir``); ``fast_finetune``/``load_ft_param`` (post-training only).
    """

    def __init__(self, module: nn.Module, input_args: Any, output_dir: str = "quantize_result",
                 bitwidth: Optional[int] = None, mix_bit: bool = False) -> None:
        self.processor = QatProcessor(module, input_args, 8 if bitwidth is None else bitwidth, mix_bit)
        self.output_dir = output_dir
        self._trainable = None  # type: Optional[QatModel]
        self._deployable = None  # type: Optional[nn.Module]

    @property
    def quant_model(self) -> QatModel:
        """The trainable model (made on first use)."""
        if self._trainable is None:
            self._trainable = self.processor.trainable_model()
        return self._trainable

    def export_quant_config(self) -> str:
        """Write ``to_deployable``'s files of the trained ``quant_model`` into ``output_dir``; returns the
        path of its ``quant_info.json``."""
        self._deployable = self.processor.to_deployable(self.quant_model, self.output_dir)
        return os.path.join(self.output_dir, "quant_info.json")

    @property
    def deploy_model(self) -> nn.Module:
        """The deployable model of ``output_dir`` (``export_quant_config()`` wrote it, in this process or
        another)."""
        if self._deployable is None:
            self._deployable = self.processor.deployable_model(self.output_dir, used_for_xmodel=True)
        return self._deployable

    def export_xmodel(self, output_dir: str = "quantize_result", deploy_check: bool = False,
                      dynamic_batch: bool = False) -> str:
        """``QatProcessor.export_xmodel`` of the deployable model."""
        return self.processor.export_xmodel(output_dir, deploy_check, dynamic_batch)

    def export_onnx_model(self, output_dir: str = "quantize_result", *args: Any, **kwargs: Any) -> Optional[str]:
        """``QatProcessor.export_onnx_model`` of the deployable model."""
        return self.processor.export_onnx_model(output_dir, *args, **kwargs)

    def export_torch_script(self, output_dir: str = "quantize_result", verbose: bool = False) -> Any:
        """``QatProcessor.export_torch_script`` of the deployable model."""
        return self.processor.export_torch_script(output_dir, verbose)

    def fast_finetune(self, run_fn: Any, run_args: Any) -> None:
        """Refused: fast finetune is post-training; QAT trains the weights itself."""
        raise QuantizationError("fast_finetune: this quantizer was made with qat_proc=True (quantization-aware "
                                "training); fast finetune is for post-training quantization: drop qat_proc")

    def load_ft_param(self) -> None:
        """Refused, as ``fast_finetune``."""
        self.fast_finetune(None, None)


def _check_calib_dir(calib_dir: Any) -> None:
    """QuantizationError unless ``calib_dir`` (``trainable_model``'s argument) is a folder holding a
    quant_info.json: what came, and what to do."""
    from ..quantizers.quant_info import QUANT_INFO_FILE
    if not isinstance(calib_dir, (str, os.PathLike)):
        raise QuantizationError("trainable_model(calib_dir=%r): expected the path of a folder holding a PTQ "
                                "calibration's %s, or '' for none" % (calib_dir, QUANT_INFO_FILE))
    if os.path.isfile(os.path.join(calib_dir, QUANT_INFO_FILE)):
        return
    got = ("the folder does not exist" if not os.path.exists(calib_dir) else "it is not a folder"
           if not os.path.isdir(calib_dir) else "the folder holds no %s" % QUANT_INFO_FILE)
    raise QuantizationError("trainable_model(calib_dir=%r): %s. calib_dir must be a folder holding a PTQ "
                            "calibration's %s (torch_quantizer('calib', ..., output_dir=that folder), then "
                            "export_quant_config()): calibrate this model there, or pass calib_dir='' to start "
                            "each quantizer by a warm-up on its first batch" % (calib_dir, got, QUANT_INFO_FILE))
