"""``SimBackend``: the quantizer backend contract (``pipeline.quantizers.base``) on the CPU simulation, a thin
adapter over the simulation's library (``session``, ``finetune``, ``export``, ``xmodel``, ``qat`` of
``pipeline.quantizers.sim``), which imports nothing of it; ``probes``: what check-env runs with it.

- ``calibrate`` runs the real quantizer's calibration arithmetic (``sim.calib``) and writes
  ``quant_info.json`` (+ ``bias_corr.pth``) in the real format, bit-compatible with
  ``pytorch_nndct``'s (tests/sim/test_sim_golden.py).
- ``load_test`` returns the lowered test-mode ``torch.fx.GraphModule`` (``sim.lowered``) built from
  the files in ``out_dir``, whichever backend wrote them.
- ``export`` writes ONNX through ``pipeline.quantizers.sim.export`` (formats ``onnx_exact``, ``onnx_qdq``).

The caller's model and batches are never modified; everything runs on the CPU.
"""
import itertools
import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from ....errors import ConfigError, QuantizationError
from ...base import DEPLOY_CHECK, CalibrationSummary, FinetuneRequest, QuantizerBackend, QuantSettings, Requirement
from ...quant_info import BIAS_CORR_FILE, QUANT_INFO_FILE
from . import probes
from ..session import SimSession, load_test_model, session_for

# export format -> (writer: an ONNX flavour of pipeline.quantizers.sim.export, or "xmodel"; file name suffix
# after the model class name). The xmodel comes last: a model it cannot carry keeps its ONNX files.
EXPORT_FORMATS = {
    "onnx_exact": ("exact", "_int_exact.onnx"),
    "onnx_qdq": ("qdq", "_int.onnx"),
    "xmodel": ("xmodel", "_int.xmodel"),
}


def _summary(session: SimSession, batches: int, files: List[str], info: Dict[str, Any], notes: List[str],
             written: Dict[str, str], finetune: Optional[Dict[str, Any]] = None) -> CalibrationSummary:
    return CalibrationSummary(batches=batches, files=files, quant_info=info, quantizer_version=SimBackend.version(),
                              sha256=written, fast_finetune=finetune,
                              cle_pairs=[[p.c0, p.c1] for p in session.cle_pairs], adjustments=notes)


def _calibrate_distributed(comm: Any, model: torch.nn.Module, example: torch.Tensor, batches: Iterable[torch.Tensor],
                           out_dir: str, settings: QuantSettings, traced: Any = None) -> CalibrationSummary:
    """SimBackend.calibrate on one rank of a torch.distributed run: ``batches`` is this rank's shard
    (``pipeline.distributed``); the result is one process's on every rank; rank 0 alone writes."""
    session = session_for(model, example, settings, traced)
    calibrator = session.calibrator(comm)
    for batch in batches:
        calibrator.step(batch)
    calibrator.finish()
    if calibrator.batches == 0:
        raise QuantizationError("calibration saw 0 batches on all %d ranks: the calib data is empty (check the data "
                                "source and the calibration batch limit); nothing was written" % comm.world)
    info, notes = session.quant_info(calibrator)
    if comm.is_main:
        written = {}  # type: Dict[str, str]
        files = session.export_quant_config(calibrator, out_dir, info, sha256=written)
    else:
        written = {}
        names = ([BIAS_CORR_FILE] if session.cfg.include_bias_corr else []) + [QUANT_INFO_FILE]
        files = [os.path.join(out_dir, f) for f in names]  # what rank 0 writes
    return _summary(session, calibrator.batches, files, info, notes, written)


def _calibrate_finetuned(session: SimSession, batches: Iterable[torch.Tensor], out_dir: str,
                         request: FinetuneRequest) -> CalibrationSummary:
    """Fast finetune on ``request.batches``, then the re-calibration on ``batches``; writes the
    finetuned calibration with ``param.pth``. A plain calibration runs beside the re-calibration
    for the report: both are scored (output MSE and top-1 agreement against float) on the
    finetune data."""
    from ..finetune import FastFinetune, FinetuneOptions
    ft = FastFinetune(session, FinetuneOptions(request.method, request.passes, request.memory_mb, request.spill_dir))
    try:
        for batch in request.batches:
            ft.record(batch)
            ft.calibrate(batch)
        ft.finetune(request.progress)
        candidates = [(request.method, ft.recalibrator()), ("plain", session.calibrator())]
        count = 0
        for batch in batches:
            for _, calibrator in candidates:
                calibrator.step(batch)
            count += 1
        if count == 0:
            raise QuantizationError("calibration saw 0 batches: the calib data is empty (check the data source and "
                                    "the calibration batch limit); nothing was written")
        scores = ft.output_scores({
            name: (session.quant_info(calibrator)[0],
                   calibrator.bias_corrections() if session.cfg.include_bias_corr else None,
                   getattr(calibrator, "finetuned", None)) for name, calibrator in candidates})
        calibrator = candidates[0][1]
        info, notes = session.quant_info(calibrator)
        written = {}  # type: Dict[str, str]
        files = session.export_quant_config(calibrator, out_dir, info, sha256=written)
        record = dict(ft.trace(), candidates=scores)
    finally:
        ft.close()
    return _summary(session, count, files, info, notes, written, record)


class SimBackend(QuantizerBackend):
    """CPU simulation of the Vitis AI 3.5 DPU quantizer (bit-exact; docs/arithmetic.md)."""

    name = "sim"
    formats = EXPORT_FORMATS
    default_formats = ("onnx_exact", "onnx_qdq", "xmodel")
    distributed = True
    simulates = True
    finetune_methods = ("adaquant", "adaquant_plus")
    qat = True
    requirements = (
        Requirement("calib/test", "the pipeline's CPU simulation of the DPU arithmetic", ("torch",),
                    why_not="torch is not installed", probe=probes.probe_calib_test),
        Requirement("export onnx", "onnx + onnxruntime (bit-exact and QDQ ONNX, verified against the simulation)",
                    ("onnx", "onnxruntime"),
                    why_not="onnx or onnxruntime is not installed (pip install onnx onnxruntime)",
                    probe=probes.probe_export_onnx),
        Requirement("export xmodel", "the pipeline's XIR writer (protobuf; no xir package), checked and run against "
                    "the simulation", ("protobuf",), why_not="protobuf is not installed (pip install protobuf)",
                    probe=probes.probe_export_xmodel),
    )

    @classmethod
    def version(cls) -> str:
        """``sim-`` + the pipeline's version (not the ``version`` field the simulation writes into
        quant_info.json, which imitates the real quantizer's: ``quant_info.SIM_VERSION``)."""
        from ...._version import __version__
        return "sim-" + __version__

    @classmethod
    def is_available(cls) -> bool:
        """Always True: the simulation needs only torch."""
        return True

    def calibrate(self, model: torch.nn.Module, example: torch.Tensor, batches: Iterable[torch.Tensor],
                  out_dir: str, settings: QuantSettings, traced: Any = None,
                  finetune: Optional[FinetuneRequest] = None) -> CalibrationSummary:
        """Calibrate on ``batches`` and write ``out_dir/quant_info.json`` (+ ``bias_corr.pth``).

        With ``finetune``: fast finetune first (``sim/finetune.py``, docs/finetune.md), then
        ``batches`` are the re-calibration; ``param.pth`` is written too, and the summary has
        ``fast_finetune`` (per-layer trace, memory, and the output MSE and top-1 agreement against
        float on the finetune data of the result and of plain calibration).

        Args:
            model: float model; never modified (``pipeline.fx.work_copy``).
            example: float32 NCHW example input (trace shape); not modified.
            batches: float32 NCHW calibration batches (each is one calib-mode forward of the real
                quantizer); not modified.
            out_dir: output folder (created).
            settings: QuantSettings (quant_config_file, bitwidth; target recorded only).
            traced: the step's ``FloatTrace`` of ``model`` (``pipeline.fx.float_trace``), or None.

        Returns:
            a ``CalibrationSummary`` with ``cle_pairs``, ``adjustments`` and ``sha256`` (the sha256 of
            the bytes written; under torchrun, empty on the ranks that do not write).

        Raises:
            QuantizationError: no batches (public case P03; nothing written), an unsupported model
                or config, a tensor that never got a fix position.
            ConfigError: bad quant_config_file.
        """
        from ....distributed import current
        comm = current()
        if finetune is not None:
            if comm is not None:
                raise QuantizationError("fast finetune runs in one process: run the calib step without torchrun")
            return _calibrate_finetuned(session_for(model, example, settings, traced), batches, out_dir, finetune)
        if comm is not None:
            return _calibrate_distributed(comm, model, example, batches, out_dir, settings, traced)
        iterator = iter(batches)
        first = next(iterator, None)
        if first is None:
            raise QuantizationError("calibration saw 0 batches: the calib data is empty (check the data "
                                    "source and the calibration batch limit); nothing was written")
        session = session_for(model, example, settings, traced)
        calibrator = session.calibrator()
        for batch in itertools.chain([first], iterator):
            calibrator.step(batch)
        info, notes = session.quant_info(calibrator)
        written = {}  # type: Dict[str, str]
        files = session.export_quant_config(calibrator, out_dir, info, sha256=written)
        return _summary(session, calibrator.batches, files, info, notes, written)

    def load_test(self, model: torch.nn.Module, example: torch.Tensor, out_dir: str,
                  settings: QuantSettings, traced: Any = None) -> torch.fx.GraphModule:
        """The lowered test-mode model from ``out_dir``'s files: ``session.load_test_model`` (its docstring:
        the handle, the errors)."""
        return load_test_model(model, example, out_dir, settings, traced)

    def export(self, handle: torch.fx.GraphModule, example1: torch.Tensor, out_dir: str,
               formats: List[str], deploy_check: bool = False) -> Dict[str, str]:
        """Write ``handle`` as ONNX: ``onnx_exact`` -> ``<Model>_int_exact.onnx`` (bit-exact with the
        simulation), ``onnx_qdq`` -> ``<Model>_int.onnx`` (QuantizeLinear/DequantizeLinear); and as
        ``xmodel`` -> ``<Model>_int.xmodel``, the real quantizer's file for ``vai_c_xir``
        (``pipeline.quantizers.sim.xmodel``: checked and run against the simulation before it is
        written; the report is kept for ``verify``).

        A batch larger than 1 is cut to its first sample (a contiguous copy): the DPU export
        needs batch 1 (public case P04, docs/quantizer.md#export-needs-batch-1).

        ``deploy_check`` (with ``xmodel``): the real quantizer's deploy-check dumps too, written with the
        xmodel in one ``write_files`` call by the drop-in's writer (``write_xmodel(..., deploy_check=True)``).

        Returns ``{format: path}``, and ``{DEPLOY_CHECK: the dumps' folder}`` with ``deploy_check``.

        Raises:
            ConfigError: an unknown format. ExportError: the exporters' errors, e.g. a node the
            xmodel cannot carry (named).
        """
        unknown = [f for f in formats if f not in EXPORT_FORMATS]
        if unknown:
            raise ConfigError("export.formats: the sim backend writes %s, got %s"
                              % (list(EXPORT_FORMATS), unknown))
        from ..export import export_onnx
        example1 = example1.detach().cpu()[:1].clone().contiguous()
        name = handle.__class__.__name__
        written = {}
        for fmt in formats:
            flavour, suffix = EXPORT_FORMATS[fmt]
            if flavour == "xmodel":
                from ..xmodel import write_xmodel
                # its warnings go to the report (verify)
                handle.xmodel_report = write_xmodel(handle.sim_session, handle, (example1,), out_dir, warn=False,
                                                    deploy_check=deploy_check)
                written[fmt] = handle.xmodel_report["path"]
                if deploy_check:
                    written[DEPLOY_CHECK] = os.path.dirname(handle.xmodel_report["deploy_check"][-1])
            else:
                written[fmt] = export_onnx(handle, example1, os.path.join(out_dir, name + suffix), flavour)
        return written

    def qat_trainable(self, model: torch.nn.Module, example: torch.Tensor, settings: QuantSettings,
                      exact_deploy: bool, calib_dir: Optional[str] = None) -> Any:
        """The trainable model of ``model`` (``sim/qat/trainable.py``'s ``QatModel``, training mode,
        on the CPU), as ``pipeline.apis.QatProcessor.trainable_model`` builds it: with ``calib_dir``
        every threshold starts at that folder's ``quant_info.json`` fix position (``log_threshold =
        b - 1 - fix_pos``, no warm-up); without, each quantizer warms up on the first batch it sees.

        Raises:
            QuantizationError: what QAT cannot train (named, with the rewrite), a module called twice
                without ``exact_deploy``, ``calib_dir`` without a fix position for every quantizer
                (another model's calibration).
        """
        from ..qat.trainable import build_trainable, import_calibration, qat_session
        examples = (example.detach().cpu().clone(),)
        trainable = build_trainable(model, examples, settings.bitwidth, exact_deploy, False,
                                    session=qat_session(model, examples, settings.bitwidth))
        if calib_dir:
            # the calib step's positions, whatever its quant config (docs/quant_config.md#quantizerqat says
            # what CLE's do); no warning
            import_calibration(trainable, calib_dir, "run the calib step again", warn=False)
        return trainable

    def qat_files(self, trained: Any, model: torch.nn.Module,
                  out_dir: str) -> Tuple[Dict[str, Any], Dict[str, Any], List[Tuple[str, bytes]]]:
        """``sim/qat/deploy.py``'s ``deployable_files``: the raw and the shipped quant_info and the
        ``(path, bytes)`` of ``test/quant_info.json``, ``quant_info.json`` and ``deployable.pth``.

        Raises:
            QuantizationError: NaN/Inf in a weight or threshold (named), a model after fuse_conv_bn().
        """
        from ..qat.deploy import deployable_files
        return deployable_files(trained, model, out_dir)

    def verify(self, handle: torch.fx.GraphModule, files: Dict[str, str], inputs: Callable[[], torch.Tensor],
               max_lsb: Dict[str, int]) -> Tuple[Dict[str, Any], List[str]]:
        """ONNX Runtime vs the simulation on ``inputs()``, per ONNX flavour (pipeline.quantizers.sim.export.verify).

        onnx_exact is compared with the simulation; onnx_qdq is checked bit for bit against the
        half-to-even simulation, then compared with the simulation under ONNX Runtime's default
        optimizations (reported, warned about past 1 LSB). A flavour past ``max_lsb[fmt]`` raises
        ExportError and its file is kept as ``<file>.rejected``, as does a verification that compared
        nothing finite (``finite.py``). The xmodel's report is the one ``export`` made (read back,
        checked, run against the simulation on the batch-1 example). Output elements NaN or inf alike
        in a file and the simulation are not compared, and warn. Returns the reports and the warnings.
        """
        import logging

        from ....errors import ExportError
        from ..export.verify import check_agreement, qdq_warning, verify_onnx, verify_qdq
        from ..finite import note
        log = logging.getLogger("pipeline")
        out, warnings = {}, []  # type: Dict[str, Any], List[str]
        if "xmodel" in files:  # checked and run when it was written (export): the report says so
            out["xmodel"] = getattr(handle, "xmodel_report", {})
            line = note("xmodel", out["xmodel"].get("interpreter"))
            if line:
                log.warning("export: %s", line)
                warnings.append(line)
        onnx_files = sorted((fmt, path) for fmt, path in files.items() if fmt.startswith("onnx"))
        if not onnx_files:
            return out, warnings
        batch = inputs()
        for fmt, path in onnx_files:
            try:
                verify = verify_qdq if fmt == "onnx_qdq" else verify_onnx
                report = out[fmt] = verify(handle, path, batch)
                log.info("export: %s vs simulation: max abs diff %g, %d of %d elements differ (max %s LSB)", fmt,
                         report["max_abs_diff"], report["mismatches"], report["elements"], report["max_diff_lsb"])
                if fmt in max_lsb:
                    check_agreement(report, max_lsb[fmt])
            except ExportError as exc:  # keep the evidence, but not under the final name
                os.replace(path, path + ".rejected")
                raise ExportError("%s; the file was kept as %s.rejected" % (exc, path))
            for warning in (note(fmt, report), qdq_warning(report) if fmt == "onnx_qdq" else None):
                if warning:
                    log.warning("export: %s", warning)
                    warnings.append(warning)
        return out, warnings
