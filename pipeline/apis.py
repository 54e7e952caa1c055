"""Drop-in ``torch_quantizer`` backed by the CPU simulation (``sim`` backend).

Scripts written for ``pytorch_nndct.apis.torch_quantizer`` (Vitis AI 3.5; docs/quantizer.md#torch_quantizer-arguments, docs/quantizer.md#methods-and-exports) run
unchanged with ``from pipeline.apis import torch_quantizer``::

    q = torch_quantizer("calib", model, (x,), output_dir="quantize_result")
    for batch in calib_batches:
        q.quant_model(batch)
    q.export_quant_config()            # quant_info.json (+ bias_corr.pth)

    q = torch_quantizer("test", model, (x,), output_dir="quantize_result")
    out = q.quant_model(eval_batch)     # bit-identical to the real quantizer's test mode
    q.export_onnx_model()               # <Model>_int.onnx
    q.export_torch_script()             # <Model>_int.pt, bit-identical to quant_model

What behaves like the real quantizer: the quant_mode rules (anything but 'calib'/'test' warns
and calibrates), the files and their format, the fix positions and test-mode numbers (two-process
result, whatever the process layout), ``export_quant_config`` without a forward only logs an
error, CUDA falls back to the CPU with the real warning.

What differs, on purpose:

- The caller's input tensors and model are NEVER changed: the real quantizer rounds its input in
  place and swaps ReLU6 for ReLU inside the caller's model (docs/quantizer.md#input-rounded-in-place, docs/quantizer.md#the-callers-model-is-rewritten); here the model is
  copied (its weights shared, never written: ``pipeline.fx.work_copy``) and every operation is out
  of place.
- A calibration batch holding NaN/Inf warns with the forward index and the count; nndct skips
  it silently, and the statistics here skip it the same way.
- ``export_quant_config`` also writes ``calib_fingerprint.json`` and commits the files as one unit
  (``calib_manifest.json``, ``pipeline.quantizers.calib_commit``); test mode refuses an
  interrupted or mixed calibration and one made for another input shape, target, model or
  quant_config_file, naming the field, as the pipeline's test step does; other weights warn. A folder written by the
  real quantizer (no manifest) is used as it is.
- Errors raise instead of ending the process: a missing ``quant_info.json`` or
  ``bias_corr.pth`` in test mode is a ``QuantizationError`` (nndct calls ``exit(2)``), a bad
  ``quant_config_file`` a ``ConfigError``.
- The simulation always runs on the CPU.
- Under ``torch.distributed`` (the script has called ``init_process_group``), calib-mode forwards
  on several ranks combine into one calibration, bit-identical to one process that runs rank
  ``r``'s ``k``-th batch as batch ``k * world + r`` (shard the batches round-robin:
  ``batches[rank::world]``); every forward and ``export_quant_config`` are collectives (every rank
  calls them; ranks may run different numbers of forwards), and ``export_quant_config`` writes on
  rank 0 only (the other ranks return the path once it is written). Each collective waits at most
  ``PIPELINE_COLLECTIVE_TIMEOUT_S`` seconds (default 300) for every rank, then raises a
  ``DistributedError`` naming the missing rank and what every rank must call (a script with
  ``if rank == 0: quantizer.export_quant_config()`` fails there instead of waiting for gloo's 30
  minutes). The real quantizer has nothing like it.
- ``target`` is checked against the DPU target registry (an unknown name is a ``ConfigError``,
  nndct exits), then only recorded, with a warning: no hardware-aware quantization here.
- ``fast_finetune``/``load_ft_param`` run the real quantizer's AdaQuant on the simulation (docs/finetune.md):
  the same ``param.pth`` and files; the kept batches spill to temporary files beyond 512 MiB instead
  of filling memory; bad input (test mode, one batch, other shapes, ``load_ft_param`` without a
  finetuned calibration) raises instead of exiting. ``Inspector`` runs the CPU inspection of
  ``pipeline.inspect``.
- ``export_xmodel``/``dump_xmodel`` write ``<Model>_int.xmodel`` without pytorch_nndct or ``xir``
  (``pipeline.quantizers.sim.xmodel``): the file the real quantizer writes, checked and run against
  the simulation before it is written. The real quantizer records shapes on the FIRST test-mode
  forward and, when that was not batch 1, logs "Batch size must be 1" and writes a wrong-batch
  file; here that raises and nothing is written. Calib mode and no forward raise too (the real
  one logs them).
- ``export_torch_script`` traces the lowered test-mode model (plain aten operators, no
  ``torch.ops.vai``), so the file loads with ``torch.jit.load`` alone.
- ``export_onnx_model`` and ``export_torch_script`` raise instead of logging when called in calib
  mode or before a forward.
- Calibration data that cannot calibrate warns (a single sample, inputs that are all zeros, an
  empty batch); all-empty calibration raises before anything is written.
"""
import copy
import io
import logging
import os
import warnings
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from .apis_checks import _check_input, _check_target, _device, _examples, _mode
from .apis_inspector import Inspector  # noqa: F401  (the rest of the drop-in surface)
from .errors import ExportError, QuantizationError
from .fileio import json_bytes, write_bytes
from .models.loading import load_state_dict_file
from .quantizers import calib_commit
from .quantizers.base import QuantSettings
from .quantizers.calib_commit import check_committed
from .quantizers.fingerprint import FILE_NAME as FINGERPRINT_FILE
from .quantizers.fingerprint import make_fingerprint
from .quantizers.quant_config import load_quant_config
from .quantizers.quant_info import QUANT_INFO_FILE
from .quantizers.sim.session import SimSession

LOG = logging.getLogger(__name__)

# Keyword arguments of the real torch_quantizer (3.5) that the simulation accepts and ignores,
# with their defaults (docs/quantizer.md#torch_quantizer-arguments).
IGNORED_KWARGS = {"input_kwargs": None, "mix_bit": False, "lstm": False, "app_deploy": "CV",
                  "qat_proc": False, "custom_quant_ops": None, "dynamo": False}


class _CalibModel(nn.Module):
    """Calib-mode ``quant_model``: each forward is one calibration batch of the simulation."""

    def __init__(self, quantizer: "TorchQuantizer") -> None:
        super().__init__()
        self._quantizer = [quantizer]  # a list, so nn.Module does not register it

    def forward(self, *xs: torch.Tensor) -> Any:
        q = self._quantizer[0]
        index = q._calibrator.batches + 1
        xs = q._check_inputs(xs, "quant_model input (calibration forward %d)" % index)
        xs = tuple(x.detach().cpu() for x in xs)
        samples = int(xs[0].shape[0]) if xs[0].dim() else 1
        if samples == 0 or any(x.numel() == 0 for x in xs):
            shapes = [tuple(x.shape) for x in xs]
            warnings.warn("calibration forward %d: the batch is empty (%s): it adds nothing to the "
                          "fix_pos statistics; check the data loader (a last batch of 0 samples, an empty "
                          "split or filter)" % (index, "shape %s" % (shapes[0],) if len(xs) == 1 else "shapes %s" % shapes))
            q._empty_forwards += 1
        elif any(bool(x.any()) for x in xs):
            q._nonzero_forwards += 1
        total = sum(x.numel() for x in xs)
        bad = total - sum(int(torch.isfinite(x).sum()) for x in xs)
        if bad:
            warnings.warn(
                "calibration forward %d: the input holds %d non-finite values (NaN/Inf) of %d. As in "
                "pytorch_nndct, a tensor holding NaN/Inf is passed through unquantized and adds "
                "nothing to the fix_pos statistics, so this batch calibrates next to nothing (with "
                "bias correction on it also ends the correction of every layer it reaches). Clean "
                "the data (e.g. torch.nan_to_num) or leave the batch out" % (index, bad, total))
        q._calibrator_samples += samples
        q._own_forwards += 1
        q._collective("this rank's quant_model forward %d (calibration)" % q._own_forwards, FORWARD_HINT)
        return q._calibrator.step(*xs)


# what every rank must call, for the error of a drop-in collective a rank did not join (distributed.dropin_comm)
FORWARD_HINT = ("Under torch.distributed the calib-mode forwards of quant_model are collectives: every rank must create "
                "torch_quantizer('calib', ...), run the forwards of its own shard (batches[rank::world]; the counts may "
                "differ) and then call export_quant_config(); nothing was written")
EXPORT_HINT = ("export_quant_config() is a collective: every rank must call it, after the calibration forwards of its "
               "own shard (rank 0 writes the files, the others return the path); a script that calls it only on rank 0 "
               "(if rank == 0: quantizer.export_quant_config()) leaves rank 0 waiting. Nothing was written: call it on "
               "every rank")


class _FinetunePhase:
    """Stands in for the calibrator while fast_finetune runs ``run_fn``: each calib-mode forward
    goes to ``fn`` (keep the batch, or calibrate on it) after the per-sample shape check."""

    def __init__(self, fn: Any, sample_shapes: Tuple[Tuple[int, ...], ...]) -> None:
        self.fn = fn
        self.sample_shapes = sample_shapes
        self.batches = 0

    def step(self, *xs: torch.Tensor) -> Any:
        shapes = tuple(tuple(int(d) for d in x.shape[1:]) for x in xs)
        if shapes != self.sample_shapes:
            raise QuantizationError(
                "fast_finetune: batch %d of run_fn's data has per-sample shape %s, input_args has %s: the finetune "
                "data must have the calibration's input shape" % (self.batches + 1, list(shapes[0]) if len(shapes) == 1
                                                                 else [list(s) for s in shapes],
                                                                 list(self.sample_shapes[0]) if len(shapes) == 1
                                                                 else [list(s) for s in self.sample_shapes]))
        self.batches += 1
        return self.fn(*xs)


def _log_layer(index: int, count: int, trace: Any) -> None:
    LOG.info("fast finetune: layer %d/%d %s: %d passes, %d weight and %d bias codes changed, net loss %s -> %s (%.1f s)",
             index, count, trace.node, len(trace.evals), trace.weight_changed, trace.bias_changed,
             ", ".join("%.6g" % v for v in trace.loss_in), ", ".join("%.6g" % v for v in trace.loss_out),
             trace.seconds)


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
        self.target = _check_target(target, quant_config_file)
        if state_dict_file is not None:
            module = copy.deepcopy(module)
            module.load_state_dict(load_state_dict_file(state_dict_file))
        self.config = load_quant_config(quant_config_file, bitwidth)
        examples = _examples(input_args)
        os.makedirs(output_dir, exist_ok=True)
        # the session's own copies (shape propagation runs the model on them): see _examples
        self._session = SimSession(module, tuple(e.clone() for e in examples), self.config)
        self._examples = examples
        self._fingerprint = self._make_fingerprint(module, examples, quant_config_file)
        self._forwards = 0
        self._first_inputs = None  # type: Optional[Tuple[torch.Tensor, ...]]  # the first test-mode forward's
        self._first_batch = None  # type: Optional[int]
        self._empty_forwards = 0  # calibration forwards on an empty batch
        self._nonzero_forwards = 0  # calibration forwards whose input is not all zeros
        self._calibrator_samples = 0  # samples over all calibration forwards
        self._own_forwards = 0  # calibration forwards of this process (under torch.distributed: this rank's)
        self._finetune = None  # type: Optional[Dict[str, Any]]  # fast_finetune's record
        self._ft_loaded = False  # load_ft_param ran
        if self.quant_mode == "calib":
            from .distributed import dropin_comm
            # combined over the ranks when a group is up; each collective's wait is bounded (dropin_comm)
            self._calibrator = self._session.calibrator(dropin_comm())
            self._model = _CalibModel(self)  # type: nn.Module
        else:
            # an interrupted or mixed calibration, or one made for another input shape, target,
            # model or quant_config_file, is refused, naming the field (as the runner does)
            redo = "run torch_quantizer('calib', ...) and export_quant_config() again"
            with calib_commit.exclusive(output_dir, shared=True):  # no export into it meanwhile
                check_committed(output_dir, require=False, redo=redo)  # not interrupted, not mixed
                # the float model's parameters until load_ft_param(), as nndct's test mode
                self._model = self._session.load_test(output_dir, finetuned=False)
                # then what it was made for: other weights warn (the real quantizer tests any weights)
                check_committed(output_dir, self._fingerprint, ignore=("config_hash",), require=False, redo=redo,
                                warn_only=("weights_hash",))
            self._model.register_forward_pre_hook(self._check_forward)
            self._model.register_forward_hook(self._count_forward)

    def _make_fingerprint(self, module: nn.Module, examples: Tuple[torch.Tensor, ...],
                          quant_config_file: Optional[str]) -> Dict[str, Any]:
        """The runner's calibration fingerprint (``pipeline.quantizers.fingerprint``) of this
        quantizer; with several inputs, ``input_shape`` and ``input_dtype`` list each input's."""
        settings = QuantSettings(target=self.target, bitwidth=self._session.bitwidth,
                                 quant_config_file=quant_config_file, device="cpu")
        # no config file: config_hash names the API (the field is informative and not compared)
        fp = make_fingerprint(module, examples[0], settings, "pipeline.apis.torch_quantizer", "sim")
        if len(examples) > 1:
            fp["input_shape"] = [[int(d) for d in e.shape[1:]] for e in examples]
            fp["input_dtype"] = [str(e.dtype) for e in examples]
        return fp

    def _collective(self, call: str, hint: str) -> None:
        """Under torch.distributed: name what the user called and what every rank must call, for the
        error of a collective a rank does not join (``distributed.dropin_comm``)."""
        comm = getattr(self._calibrator, "comm", None)
        if comm is not None:
            comm.call, comm.hint = call, hint

    def _check_inputs(self, xs: Tuple[Any, ...], what: str) -> Tuple[torch.Tensor, ...]:
        """``xs`` checked against the example inputs: as many, each float32 of the same rank."""
        if len(xs) != len(self._examples):
            raise QuantizationError("%s: the model takes %d input tensors (as input_args), got %d"
                                    % (what, len(self._examples), len(xs)))
        return tuple(_check_input(x, what if len(xs) == 1 else "%s %d" % (what, i), e.dim())
                     for i, (x, e) in enumerate(zip(xs, self._examples)))

    def _check_forward(self, module: nn.Module, inputs: Any) -> None:
        if self._forwards == 0 and not self._ft_loaded and getattr(module, "quant_info", {}).get("fast_finetuned"):
            warnings.warn("quant_info.json in %s is from a fast-finetuned calibration, but load_ft_param() was not "
                          "called: this forward uses the float model's parameters, not the finetuned ones (as the "
                          "real quantizer does); call quantizer.load_ft_param() before the first forward"
                          % self.output_dir)
        if inputs:  # a keyword-only call is left to the model's forward
            self._check_inputs(tuple(inputs), "quant_model input")

    def _count_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._forwards == 0 and inputs:  # the real quantizer records shapes on this forward only
            self._first_inputs = tuple(x.detach()[:1].clone() if x.dim() else x.detach().clone() for x in inputs)
            self._first_batch = int(inputs[0].shape[0]) if inputs[0].dim() else 1
        self._forwards += 1
        global _CURRENT
        _CURRENT = self  # dump_xmodel() exports the quantizer that ran last, as nndct's global one

    def _example1(self) -> Tuple[torch.Tensor, ...]:
        """The batch-1 example inputs (first sample of each ``input_args`` tensor), contiguous copies."""
        return tuple(e[:1].clone().contiguous() for e in self._examples)

    def _check_exportable(self, method: str, output_dir: Any) -> None:
        if not isinstance(output_dir, (str, os.PathLike)) or not str(output_dir):
            raise ExportError("%s: output_dir must be a folder path (a str), got %r; nothing was written"
                              % (method, output_dir))
        if self.quant_mode != "test":
            raise QuantizationError(
                "%s needs test mode: this quantizer was created in calib mode. Call "
                "export_quant_config() here, then create torch_quantizer('test', ...) and run a "
                "forward of its quant_model before exporting" % method)
        if self._forwards == 0:
            raise QuantizationError(
                "%s: run at least one forward of quant_model in test mode before exporting (the "
                "real quantizer logs 'FORWARD function must be called' and writes nothing)" % method)

    @property
    def quant_model(self) -> nn.Module:
        """The quantized model to run forwards on.

        calib: each forward calibrates on the batch (one float32 tensor per input, not modified) and returns the
        calibration output; a batch holding NaN/Inf warns (forward index and count) and is
        skipped by the statistics, as in nndct. test: the lowered ``torch.fx.GraphModule`` (``sim/lowered.py``).
        Either raises QuantizationError on inputs that are not float32 torch.Tensors of the
        example inputs' number and ranks.
        """
        LOG.info("=>Get module with quantization.")
        return self._model

    def export_quant_config(self) -> Optional[str]:
        """Calib mode: write ``quant_info.json`` (and ``bias_corr.pth``) into ``output_dir``.

        The files and ``calib_fingerprint.json`` are written and committed (``calib_manifest.json``)
        under an exclusive lock on ``output_dir`` (``calib_commit.exclusive``): a second process
        exporting into the same folder waits, so the folder holds wholly one calibration or wholly
        the other; the manifest records the sha256 of the bytes written here.

        Under torch.distributed a collective: every rank calls it; rank 0 writes, the others return
        the path once rank 0 has committed. Each rank waits at most ``PIPELINE_COLLECTIVE_TIMEOUT_S``
        (default 300 s) for the others at each collective (``distributed.dropin_comm``).

        Returns the quant_info.json path, or None (with an error logged, as the real quantizer
        does) when no calibration forward has run, and in test mode.

        Raises:
            QuantizationError: the calibration cannot be written (an incomplete calibration; on the
                other ranks: rank 0 failed to write, with its error).
            DistributedError: under torch.distributed, a rank failed, exited or did not call this
                within the bounded wait (the message says what every rank must call).
        """
        if self.quant_mode != "calib":
            LOG.warning("export_quant_config is for calib mode; nothing written in test mode")
            return None
        comm = getattr(self._calibrator, "comm", None)
        if comm is not None:
            self._collective("export_quant_config()", EXPORT_HINT)
            self._calibrator.finish()  # rounds without a batch until every rank is done
        if self._calibrator.batches == 0:
            if hasattr(self._calibrator, "finetuned"):  # fast_finetune ran; its re-calibration did not
                LOG.error("Quantization is not performed completely: after fast_finetune(), run the calibration "
                          "forwards again (the re-calibration, e.g. evaluate(quant_model, calib_loader, loss_fn)) "
                          "before export_quant_config(); nothing was written.")
                return None
            LOG.error("Quantization is not performed completely, check if module FORWARD function "
                      "is called! FORWARD function of torch_quantizer.quant_model needs to be called "
                      "in user code explicitly.")
            return None
        if comm is None:  # the counts are this process's; under torch.distributed each rank has its own
            self._check_calibration_data()
        if comm is not None and not comm.is_main:
            failed = comm.broadcast(None, 0)  # rank 0 writes; return once its files are committed
            if failed:
                raise QuantizationError("export_quant_config(): rank 0 could not write the calibration (%s); nothing "
                                        "was written" % failed)
            return os.path.join(self.output_dir, QUANT_INFO_FILE)
        try:
            path = self._write_calibration()
        except Exception as exc:
            if comm is not None:
                comm.broadcast("%s: %s" % (type(exc).__name__, exc), 0)
            raise
        if comm is not None:
            comm.broadcast(None, 0)
        return path

    def _write_calibration(self) -> str:
        """Write and commit the calibration files (the one process, or rank 0); returns quant_info.json's path."""
        info, _ = self._session.quant_info(self._calibrator)  # raises before anything is written
        fp_item = (os.path.join(self.output_dir, FINGERPRINT_FILE), json_bytes(self._fingerprint))
        written = {}  # type: Dict[str, str]
        # the files below are one unit, written under the folder's lock and committed with the sha256 of
        # the bytes written here: another process's export into this folder never mixes in (calib_commit)
        with calib_commit.exclusive(self.output_dir):
            calib_commit.begin(self.output_dir)
            files = self._session.export_quant_config(self._calibrator, self.output_dir, info, extra=[fp_item],
                                                      sha256=written)
            calib_commit.commit(self.output_dir, files, written)
        return files[-2]  # quant_info.json; the fingerprint follows it

    def _check_calibration_data(self) -> None:
        """Raise when every calibration forward was empty; warn when the calibration rests on a
        single sample or on inputs that were all zeros (the fix positions then describe no real data)."""
        forwards = self._calibrator.batches
        if self._empty_forwards == forwards:
            raise QuantizationError("all %d calibration forwards had an empty batch (0 samples): nothing was "
                                    "calibrated and nothing was written; feed quant_model real batches"
                                    % forwards)
        samples = self._calibrator_samples
        if samples == 1:
            warnings.warn("the calibration saw a single sample: every fix_pos (and bias correction) comes from "
                          "one image, so test-mode accuracy on other images can be far from float; calibrate on "
                          "a few hundred representative samples")
        if self._nonzero_forwards == 0:
            warnings.warn("every calibration input was all zeros (%d forwards): the fix positions describe no "
                          "real data (blank images, a normalization that zeroes everything, or a data loader "
                          "that never filled its buffer?); calibrate on real samples" % forwards)

    def export_onnx_model(self, output_dir: str = "quantize_result", verbose: bool = False,
                          dynamic_batch: bool = False, opset_version: Optional[int] = None,
                          native_onnx: bool = True, dump_layers: bool = False,
                          check_model: bool = False, opt_graph: bool = False) -> Optional[str]:
        """Test mode: write ``<output_dir>/<Model>_int.onnx`` (docs/quantizer.md#methods-and-exports).

        ``native_onnx=True`` gives QuantizeLinear/DequantizeLinear (``qdq`` flavour, half-even on
        ties); ``False`` gives the bit-exact ``exact`` flavour (nndct writes ``vai::`` custom ops
        there). The batch dimension is always dynamic; ``verbose``, ``dump_layers``,
        ``check_model`` and ``opt_graph`` are accepted and ignored, ``opset_version`` must be None
        or 13.

        Returns the file path.

        Raises:
            QuantizationError: calib mode, or no test-mode forward yet (the real quantizer only logs
                these and returns None; here they raise, like the other exports).
            ExportError: the exporter cannot write the model (see ``pipeline.quantizers.sim.export``).
        """
        self._check_exportable("export_onnx_model", output_dir)
        if opset_version not in (None, 13):
            raise QuantizationError("export_onnx_model: the exporter writes opset 13, got opset_version=%r"
                                    % opset_version)
        from .quantizers.sim.export import export_onnx
        path = os.path.join(output_dir, "%s_int.onnx" % self._session.graph.class_name)
        example1 = self._example1()
        return export_onnx(self._model, example1[0] if len(example1) == 1 else example1, path,
                           "qdq" if native_onnx else "exact")


    def fast_finetune(self, run_fn: Any, run_args: Any) -> None:
        """Calib mode: fast finetune (AdaQuant) as the real quantizer runs it (docs/finetune.md).

        Calls ``run_fn(*run_args)`` twice, as nndct does: first ``quant_model`` returns the float
        model's outputs while the batches are kept (in memory up to 512 MiB, then in temporary
        files; nndct keeps them all in memory), then it runs the finetune's own calibration (bias
        correction off). Then every conv/linear layer is finetuned in graph order. The user's
        calibration forwards that follow keep those fix positions (no search) and re-run bias
        correction; ``export_quant_config()`` then writes ``param.pth`` (the finetuned parameters,
        on their grids, keyed ``module_<i>.weight``/``.bias`` as nndct's) beside ``quant_info.json``
        (``"fast_finetuned": true``) and ``bias_corr.pth``. The global RNG is not touched (nndct
        draws from it when it builds its quantizer and once per finetuned layer).

        Args:
            run_fn: the user's evaluation function, e.g. ``evaluate(model, loader, loss_fn)``; it must
                feed the same batches (same order, same shapes) each time.
            run_args: its arguments (a tuple), normally ``(quant_model, ft_loader, loss_fn)``.

        Raises:
            QuantizationError: test mode (nndct warns and does nothing), a finetune set of fewer than
                two batches, batches of another per-sample shape than ``input_args``, run_fn feeding a
                different number of batches the second time, or under torch.distributed (not
                simulated).
        """
        from .quantizers.sim.finetune import FastFinetune, FinetuneOptions
        if self.quant_mode != "calib":
            raise QuantizationError(
                "fast_finetune needs calib mode: this quantizer was created in test mode (the real quantizer "
                "warns 'Finetune function will be ignored in test mode' and does nothing). Call fast_finetune "
                "on torch_quantizer('calib', ...), then in test mode call load_ft_param()")
        if getattr(self._calibrator, "comm", None) is not None:
            raise QuantizationError("fast_finetune is not simulated under torch.distributed: run it in one process")
        if self._calibrator.batches:
            warnings.warn("fast_finetune: the %d calibration forwards run before it are discarded; the finetune "
                          "calibrates on its own data, and the forwards after it give the bias correction"
                          % self._calibrator.batches)
        ft = FastFinetune(self._session, FinetuneOptions(memory_mb=1024))
        expect = tuple(tuple(int(d) for d in e.shape[1:]) for e in self._examples)
        try:
            self._calibrator = _FinetunePhase(ft.record, expect)
            LOG.info("=>Preparing data for fast finetuning module parameters ...")
            run_fn(*run_args)
            self._calibrator = _FinetunePhase(ft.calibrate, expect)
            LOG.info("=>Find initial quantization steps for fast finetuning...")
            run_fn(*run_args)
            LOG.info("=>Fast finetuning module parameters for better quantization accuracy...")
            ft.finetune(_log_layer)
            self._calibrator = ft.recalibrator()
        finally:
            ft.close()
            if not hasattr(self._calibrator, "finetuned"):  # failed: an empty calibration again
                self._calibrator = self._session.calibrator()
        self._empty_forwards = self._nonzero_forwards = self._calibrator_samples = 0
        self._finetune = ft.trace()

    def load_ft_param(self) -> None:
        """Test mode: use the fast-finetuned parameters (``param.pth``) of the calibration in
        ``output_dir``, as nndct's ``load_ft_param``. Call it before the first forward (the real
        quantizer applies the bias correction and rounding on that forward; here the model is
        rebuilt either way, and a warning says the real one would not).

        Raises:
            QuantizationError: calib mode, a ``quant_info.json`` without ``"fast_finetuned": true``
                (nndct logs an error and exits), or a ``param.pth`` that is missing or made for another
                model.
        """
        from .quantizers.quant_info import read_quant_info
        if self.quant_mode != "test":
            raise QuantizationError("load_ft_param is for test mode (the real quantizer exits with an error in "
                                    "calib mode): create torch_quantizer('test', ...) and call it there")
        info = read_quant_info(self.output_dir)
        if info.get("fast_finetuned") is not True:
            raise QuantizationError(
                "load_ft_param: %s/%s is not from a fast-finetuned calibration (\"fast_finetuned\": false); call "
                "quantizer.fast_finetune(...) in calib mode before export_quant_config(), or leave load_ft_param out"
                % (self.output_dir, QUANT_INFO_FILE))
        if self._forwards:
            warnings.warn("load_ft_param after %d test-mode forwards: the real quantizer needs it before the first "
                          "forward (its first forward applies bias correction and rounding to the parameters it "
                          "has then); the simulation uses the finetuned parameters from here on" % self._forwards)
        fresh = self._session.load_test(self.output_dir, finetuned=True)
        for name, module in fresh.named_children():
            if hasattr(module, "weight_fix_pos"):
                target = self._model.get_submodule(name)
                target.weight, target.bias = module.weight, module.bias
        self._model.fast_finetuned = True
        self._ft_loaded = True

    def export_xmodel(self, output_dir: str = "quantize_result", deploy_check: bool = False,
                      dynamic_batch: bool = False) -> str:
        """Test mode: write ``<output_dir>/<Model>_int.xmodel``, the file ``vai_c_xir`` compiles.

        The real quantizer's file for the same model and calibration (``pipeline.quantizers.sim.xmodel``,
        docs/xmodel.md): the shapes are those of the FIRST test-mode forward, which must be batch 1
        (``qproc/base.py`` ``dump_xmodel``; later forwards do not matter). The file is read back,
        checked and run by the interpreter against this simulation on that batch-1 input before
        it is written (atomically). ``deploy_check`` dumps (the real quantizer's per-layer data for
        checking on the board) are not written: a warning says so. ``dynamic_batch`` is ignored, as
        the real quantizer ignores it for xmodels.

        Returns:
            The file's path (the real quantizer returns None).

        Raises:
            QuantizationError: calib mode, or no test-mode forward yet (the real quantizer only logs
                these and writes nothing).
            ExportError: ``output_dir`` is not a path; the first test-mode forward was not batch 1 (the
                real one would log "Batch size must be 1" and write a batch-N file; nothing is written
                here) or passed its inputs by keyword; a node the xmodel cannot carry (named), or a
                file that fails its own check.
            StorageError: ``output_dir`` (or a folder above it) is a file, or cannot take the file.
        """
        self._check_exportable("export_xmodel", output_dir)
        if self._first_inputs is None:
            raise ExportError(
                "export_xmodel: the first forward of quant_model in test mode passed its inputs by keyword, so "
                "their shapes were not recorded; create the test-mode quantizer again and run "
                "quant_model(x[:1]) (inputs by position) as its first forward; nothing was written")
        if self._first_batch != 1:
            raise ExportError(
                "export_xmodel: the first forward of quant_model in test mode had batch size %d; the real "
                "quantizer records the xmodel's shapes on that first forward and would write a batch-%d file "
                "(it logs 'Batch size must be 1 when exporting xmodel.'). Create the test-mode quantizer again "
                "and run quant_model(x[:1]) as its first forward, then evaluate; nothing was written"
                % (self._first_batch, self._first_batch))
        if deploy_check:
            warnings.warn("export_xmodel: deploy_check=True: the per-layer check data the real quantizer dumps "
                          "is not written by the simulation; the xmodel is")
        from .quantizers.sim.xmodel import write_xmodel
        report = write_xmodel(self._session, self._model, self._first_inputs, output_dir)
        LOG.info("=>Successfully convert '%s' to xmodel.(%s)", self._session.graph.class_name, report["path"])
        return report["path"]

    def export_torch_script(self, output_dir: str = "quantize_result",
                            verbose: bool = False) -> torch.jit.ScriptModule:
        """Test mode: write ``<output_dir>/<Model>_int.pt``, a TorchScript of the test-mode model.

        The lowered model (``sim/lowered.py``) is traced with ``torch.jit.trace`` in eval mode
        on the batch-1 example (the first sample of ``input_args``), as the real
        ``export_traced_torch_script`` traces its quantized module (docs/quantizer.md#methods-and-exports). The trace holds
        only aten operators (``fake_quant`` becomes mul/sub/add/floor/clamp/mul), so
        ``torch.jit.load`` needs neither this package nor pytorch_nndct, and its outputs are
        bit-identical to ``quant_model``'s for any batch size (checked on the example before
        writing). The file is written atomically. ``verbose`` prints the inlined graph.

        Returns:
            The traced ``torch.jit.ScriptModule`` (float32 NCHW in, the model's outputs out).

        Raises:
            QuantizationError: calib mode, or no test-mode forward yet (the real quantizer only
                logs these and returns None).
            ExportError: the trace does not reproduce the simulation on the example.
        """
        self._check_exportable("export_torch_script", output_dir)
        gm = self._model
        # a hook-free GraphModule on the same submodules (a copy of the graph): the forward
        # counter stays the user's
        plain = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=gm.__class__.__name__).eval()
        example1 = self._example1()
        with torch.no_grad(), warnings.catch_warnings():
            # torch 2.x calls TorchScript deprecated; it is the format the real quantizer writes
            warnings.filterwarnings("ignore", message=r".*torch\.jit", category=DeprecationWarning)
            try:
                script = torch.jit.trace(plain, example1, check_trace=False)
            except Exception as e:  # the tracer raises RuntimeError, TypeError, ...
                raise ExportError("export_torch_script: torch.jit.trace failed on the test-mode "
                                  "model: %s; nothing was written" % e) from e
            expect, got = plain(*example1), script(*example1)
            buf = io.BytesIO()
            torch.jit.save(script, buf)
        if not _bit_equal(expect, got):
            raise ExportError("export_torch_script: the traced model does not reproduce the "
                              "simulation on the example input; nothing was written")
        if verbose:
            print(script.inlined_graph)
        path = os.path.join(output_dir, "%s_int.pt" % self._session.graph.class_name)
        write_bytes(path, buf.getvalue())
        LOG.info("%s is generated.", path)
        return script


def _bit_equal(a: Any, b: Any) -> bool:
    """True when two outputs (tensors, or tuples/lists of them) hold the same float32 bits."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
            a.contiguous().view(torch.int32) if a.dtype == torch.float32 else a,
            b.contiguous().view(torch.int32) if b.dtype == torch.float32 else b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_bit_equal(x, y) for x, y in zip(a, b))
    return a == b


def torch_quantizer(quant_mode: Any, module: nn.Module, input_args: Any = None,
                    state_dict_file: Optional[str] = None, output_dir: str = "quantize_result",
                    bitwidth: Optional[int] = None, device: Any = torch.device("cuda"),
                    quant_config_file: Optional[str] = None, target: Optional[str] = None,
                    **ignored_known_kwargs: Any) -> TorchQuantizer:
    """Create a quantizer with the signature of ``pytorch_nndct.apis.torch_quantizer`` (docs/quantizer.md#torch_quantizer-arguments).

    Args:
        quant_mode: ``"calib"`` or ``"test"`` (1 or 2 accepted, deprecated); anything else warns
            and calibrates, as the real one does.
        module: float ``nn.Module`` (a DataParallel wrapper is stripped). Never modified.
        input_args: example input: a float32 torch.Tensor of any rank (the trace shape), or a
            tuple/list with one per ``forward`` argument. Not modified. Every ``quant_model`` call
            takes as many float32 tensors, each of its example's rank.
        state_dict_file: optional float weights, loaded into a copy of ``module``.
        output_dir: folder of ``quant_info.json``, ``bias_corr.pth`` and exports (created).
        bitwidth: bit width of every tensor without a config file (None means 8).
        device: requested device; the simulation runs on the CPU (warning for CUDA).
        quant_config_file: quant_config_file JSON (docs/quant_config.md) or None for the defaults
            (CLE and bias correction on).
        target: DPU target name (or ``0x`` fingerprint) of ``pipeline.targets``;
            checked, then recorded only, with a warning (no hardware-aware quantization).
        **ignored_known_kwargs: the real API's other keyword arguments (``input_kwargs``,
            ``mix_bit``, ``lstm``, ``app_deploy``, ``qat_proc``, ``custom_quant_ops``,
            ``dynamo``); a non-default value warns. Unknown names raise TypeError.

    Returns:
        TorchQuantizer with ``quant_model``, ``export_quant_config()``, ``export_onnx_model()``,
        ``export_torch_script()`` and ``export_xmodel()``.

    Raises:
        ConfigError: bad quant_config_file, unknown ``target``. QuantizationError: unsupported
        model or config, no ``input_args``, one that is not a float32 tensor (a numpy array), as
        many tensors as ``forward`` takes, or (test mode) missing/mismatching quant_info.json or
        bias_corr.pth.
    """
    return TorchQuantizer(quant_mode, module, input_args, state_dict_file, output_dir, bitwidth,
                          device, quant_config_file, target, **ignored_known_kwargs)


def dump_xmodel(output_dir: str = "quantize_result", deploy_check: bool = False, app_deploy: str = "CV") -> str:
    """``pytorch_nndct.apis.dump_xmodel``: the xmodel of the quantizer that ran a test-mode forward last
    (the real one uses its process-global quantizer); see :meth:`TorchQuantizer.export_xmodel`.

    Raises:
        QuantizationError: no test-mode quantizer has run a forward in this process.
        ExportError: as ``export_xmodel``.
    """
    if _CURRENT is None:
        raise QuantizationError("dump_xmodel: no quantizer has run a forward of its quant_model in test mode in "
                                "this process; create torch_quantizer('test', ...) and run quant_model(x[:1]) first")
    return _CURRENT.export_xmodel(output_dir, deploy_check)


_CURRENT = None  # type: Optional[TorchQuantizer]

__all__ = ["torch_quantizer", "TorchQuantizer", "Inspector", "dump_xmodel"]
