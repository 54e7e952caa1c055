"""Calib mode of the drop-in ``torch_quantizer`` (``pipeline.apis``): the calibration forwards of
``quant_model`` (``CalibModel``), ``export_quant_config`` and ``fast_finetune`` (``CalibModeMethods``,
a part of ``TorchQuantizer``)."""
import logging
import os
import warnings
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from ..checks import FEW_SAMPLES
from ..errors import QuantizationError
from ..fileio import json_bytes
from ..quantizers import calib_commit
from ..quantizers.fingerprint import FILE_NAME as FINGERPRINT_FILE
from ..quantizers.quant_info import QUANT_INFO_FILE
from .checks import refuse_running_run
from .notes import note

LOG = logging.getLogger(__name__)


class CalibModel(nn.Module):
    """Calib-mode ``quant_model``: each forward is one calibration batch of the simulation."""

    def __init__(self, quantizer: Any) -> None:
        super().__init__()
        self._quantizer = [quantizer]  # a list, so nn.Module does not register it

    def forward(self, *xs: torch.Tensor) -> Any:
        q = self._quantizer[0]
        index = q._calibrator.batches + 1
        xs = q._check_inputs(xs, "quant_model input (calibration forward %d)" % index)
        q._warn_uneven_pools(xs)
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


class FinetunePhase:
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


def log_layer(index: int, count: int, trace: Any) -> None:
    """Log one finetuned layer of ``fast_finetune`` (its ``LayerTrace``: passes, codes changed, loss)."""
    note("fast finetune: layer %d/%d %s: %d passes, %d weight and %d bias codes changed, net loss %s -> %s (%.1f s)",
             index, count, trace.node, len(trace.evals), trace.weight_changed, trace.bias_changed,
             ", ".join("%.6g" % v for v in trace.loss_in), ", ".join("%.6g" % v for v in trace.loss_out),
             trace.seconds)


class CalibModeMethods:
    """The calib-mode methods of :class:`pipeline.apis.quantizer.TorchQuantizer` (a part of that class;
    its ``__init__`` sets the state they use: ``_calibrator``, ``_session``, ``_examples``, ...)."""

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
            RunFolderError: ``output_dir`` lies in a run folder that a pipeline run holds now (it would
                replace that run's calibration); nothing was written.
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
        written: Dict[str, str] = {}
        # the files below are one unit, written under the folder's lock and committed with the sha256 of
        # the bytes written here: another process's export into this folder never mixes in (calib_commit)
        with calib_commit.exclusive(self.output_dir):
            refuse_running_run(self.output_dir, "export_quant_config")  # again: a run may have started since
            calib_commit.begin(self.output_dir)
            files = self._session.export_quant_config(self._calibrator, self.output_dir, info, extra=[fp_item],
                                                      sha256=written)
            calib_commit.commit(self.output_dir, files, written)
        note("=>Exporting quant config.(%s); with it: %s", files[-2],
             ", ".join([os.path.basename(p) for p in files if p != files[-2]] + [calib_commit.MANIFEST_FILE]))
        return files[-2]  # quant_info.json; the fingerprint follows it

    def _check_calibration_data(self) -> None:
        """Raise when every calibration forward was empty; warn when the calibration rests on a
        single sample or on inputs that were all zeros (the fix positions then describe no real data), and
        when it saw fewer than ``checks.FEW_SAMPLES`` (100) samples, the lower end of the "100 to 1000
        calibration images" of the Vitis AI user guide (UG1414, "Vitis AI Quantizer Flow"), as the runner's
        statistics warn (``checks.InputStats.result``)."""
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
        elif samples < FEW_SAMPLES:
            warnings.warn("the calibration saw %d samples: the Vitis AI user guide (UG1414, \"Vitis AI Quantizer "
                          "Flow\") says the quantizer generally works well with 100 to 1000 calibration images; "
                          "calibrate on at least %d representative samples" % (samples, FEW_SAMPLES))
        if self._nonzero_forwards == 0:
            warnings.warn("every calibration input was all zeros (%d forwards): the fix positions describe no "
                          "real data (blank images, a normalization that zeroes everything, or a data loader "
                          "that never filled its buffer?); calibrate on real samples" % forwards)

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
            RunFolderError: ``output_dir`` lies in a run folder that a pipeline run holds now (checked
                before the minutes of finetuning: ``export_quant_config`` could not write param.pth).
        """
        from ..quantizers.sim.finetune import FastFinetune, FinetuneOptions
        if self.quant_mode != "calib":
            raise QuantizationError(
                "fast_finetune needs calib mode: this quantizer was created in test mode (the real quantizer "
                "warns 'Finetune function will be ignored in test mode' and does nothing). Call fast_finetune "
                "on torch_quantizer('calib', ...), then in test mode call load_ft_param()")
        if getattr(self._calibrator, "comm", None) is not None:
            raise QuantizationError("fast_finetune is not simulated under torch.distributed: run it in one process")
        refuse_running_run(self.output_dir, "fast_finetune")
        if self._calibrator.batches:
            warnings.warn("fast_finetune: the %d calibration forwards run before it are discarded; the finetune "
                          "calibrates on its own data, and the forwards after it give the bias correction"
                          % self._calibrator.batches)
        ft = FastFinetune(self._session, FinetuneOptions(memory_mb=1024))
        expect = tuple(tuple(int(d) for d in e.shape[1:]) for e in self._examples)
        try:
            self._calibrator = FinetunePhase(ft.record, expect)
            note("=>Preparing data for fast finetuning module parameters ...")
            run_fn(*run_args)
            self._calibrator = FinetunePhase(ft.calibrate, expect)
            note("=>Find initial quantization steps for fast finetuning...")
            run_fn(*run_args)
            note("=>Fast finetuning module parameters for better quantization accuracy (%d batches; a line per "
                 "layer follows) ...", len(ft.inputs))
            ft.finetune(log_layer)
            self._calibrator = ft.recalibrator()
        finally:
            ft.close()
            if not hasattr(self._calibrator, "finetuned"):  # failed: an empty calibration again
                self._calibrator = self._session.calibrator()
        self._empty_forwards = self._nonzero_forwards = self._calibrator_samples = 0
        self._finetune = ft.trace()
