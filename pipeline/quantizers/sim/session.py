"""One sim quantization session: capture + rewrites, calibration export, test-mode model.

The order of the rewrites is nndct's (``QuantOptimizer.__call__`` in
``nndct_shared/optimization/optimizer.py``): module swaps and BN folding (``pipeline.fx.capture``),
then CLE (``cle.equalize``) when ``include_cle`` is on; quantization points come last
(``plan.QuantPlan``). Calibration and test mode both rebuild this from the float model, so a
test-mode model made in the same process as the calibration equals the two-process result.
"""
import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ...errors import QuantizationError
from ...fileio import write_files
from .. import quant_info as qi
from ..quant_config import TENSOR_TYPES, QuantConfig, settings_quant_config
from .calib import Calibrator
from .cle import ClePair, equalize
from ...fx.graph import SimGraph
from ...fx.capture import capture
from .lowered import build_lowered
from .plan import QuantPlan


def check_supported(cfg: QuantConfig) -> int:
    """Return the common bit width, or raise QuantizationError for what the sim cannot simulate.

    The sim simulates the DPU path with one integer bit width for every tensor type, no
    per-layer settings and every tensor type quantized.
    """
    if cfg.target_device != "DPU":
        raise QuantizationError("the sim quantizer simulates target_device DPU only, got %r; use "
                                "the nndct backend for %s" % (cfg.target_device, cfg.target_device))
    if any(cfg.tensors[t]["datatype"] != "int" for t in TENSOR_TYPES):
        raise QuantizationError("the sim quantizer simulates int quantization only (datatype int)")
    bw = cfg.uniform_bitwidth()
    if bw is None:
        raise QuantizationError("the sim quantizer needs one bit width for input, weights, bias and "
                                "activation, got %s" % {t: cfg.bitwidth(t) for t in TENSOR_TYPES})
    if cfg.layers:
        raise QuantizationError("layer_quantize_config is not simulated by the sim quantizer; "
                                "remove it or use the nndct backend")
    if sorted(cfg.quantizable_data_type) != sorted(TENSOR_TYPES):
        raise QuantizationError("the sim quantizer quantizes every tensor type; quantizable_data_type "
                                "%s is not simulated" % cfg.quantizable_data_type)
    return bw


class SimSession:
    """The simulated quantizer for one float model.

    Args:
        model: float ``nn.Module``; never modified (capture works on ``pipeline.fx.work_copy``).
        example: float32 NCHW example input (trace shape); not modified.
        cfg: resolved QuantConfig.
        traced: the step's ``pipeline.fx.float_trace.FloatTrace`` of ``model`` (no new trace), or None.
        quant_off: nndct's quantization-off flow (``--nndct_quant_off``, ``SimGraph.quant_off``): every fix
            position null, everything in float, the xmodel ``<Model>_float.xmodel``; the caller gives the
            config it implies (CLE and bias correction off).

    Attributes:
        model: the float model (the caller's; read, never modified).
        graph, plan: the SimGraph and QuantPlan; ``cle_pairs``: the pairs CLE scaled, with their scales
        (``cle.ClePair``); bitwidth: the bit width; ``cfg``: the config.

    Raises:
        QuantizationError: unsupported model or config (see ``pipeline.fx.capture``, check_supported).
    """

    def __init__(self, model: torch.nn.Module, example: torch.Tensor, cfg: QuantConfig, traced: Any = None,
                 quant_off: bool = False) -> None:
        self.model = model  # read only: the xmodel writer traces a copy of it for nndct's node names
        self.cfg = cfg
        self.bitwidth = check_supported(cfg)
        self.graph = capture(model, example, cfg.rewrites(), traced=traced)  # type: SimGraph
        self.graph.quant_off = quant_off
        self.cle_pairs = equalize(self.graph) if cfg.include_cle else []  # type: List[ClePair]
        self.plan = QuantPlan(self.graph)

    def calibrator(self, comm: Any = None) -> Calibrator:
        """A fresh Calibrator; call ``step(batch)`` per calibration batch. With ``comm`` (a
        ``pipeline.distributed.Comm``) a DistributedCalibrator: each rank steps through its shard,
        then calls ``finish()``."""
        if comm is not None:
            from .dist_calib import DistributedCalibrator
            return DistributedCalibrator(self.graph, self.plan, self.bitwidth, self.cfg.include_bias_corr, comm)
        return Calibrator(self.graph, self.plan, self.bitwidth, self.cfg.include_bias_corr)

    def quant_info(self, calibrator: Calibrator) -> Tuple[Dict[str, Any], List[str]]:
        """The quant_info dict of a calibration and the fix_pos adjustment messages.

        Raises:
            QuantizationError: no batch was calibrated, or a tensor got no fix_pos.
        """
        param_fp, output_fp, notes = calibrator.fix_positions(self.cfg.change_concat_input_fix,
                                                              self.cfg.change_pool_input_fix)
        prefix = self.graph.class_name + "::"
        info = qi.make_quant_info(param_fp, {prefix + k: v for k, v in output_fp.items()}, self.bitwidth,
                                  self.cfg.include_bias_corr, self.graph.graph_md5(),
                                  entries={prefix + k: n for k, n in self.plan.output_entries.items()})
        if getattr(calibrator, "finetuned", None) is not None:
            info["fast_finetuned"] = True
        return info, notes

    def export_quant_config(self, calibrator: Calibrator, out_dir: str, info: Any = None,
                            extra: Sequence[Tuple[str, bytes]] = (),
                            sha256: Optional[Dict[str, str]] = None) -> List[str]:
        """Write ``quant_info.json`` (and, first, ``param.pth`` after a fast finetune and
        ``bias_corr.pth`` with bias correction) into ``out_dir`` (created), each atomically
        (``pipeline.fileio.write_files``). ``calibrator``: a Calibrator, or after a fast finetune
        its ``adaquant_calib.KeepFpCalibrator``.

        Nothing is written when the calibration is incomplete (QuantizationError first).
        ``info``: this calibration's ``quant_info(calibrator)[0]`` when the caller has it (not
        computed again).
        ``extra``: more ``(path, bytes)`` written in the same batch, after quant_info.json (the
        drop-in's calib_fingerprint.json). ``sha256``: when given, filled with ``{path: sha256}`` of
        the bytes written (``calib_commit.commit`` records those, not what is on disk later).

        Returns:
            The paths written.
        """
        if info is None:
            info, _ = self.quant_info(calibrator)
        items = []  # type: List[Tuple[str, bytes]]
        finetuned = getattr(calibrator, "finetuned", None)
        if finetuned is not None:
            from .finetune import PARAM_FILE, param_bytes
            raw = getattr(calibrator, "raw", None)
            items.append((os.path.join(out_dir, PARAM_FILE),
                          param_bytes(self.graph, finetuned, getattr(raw, "norm_params", None))))
        if self.cfg.include_bias_corr:
            items.append((os.path.join(out_dir, qi.BIAS_CORR_FILE), qi.bias_corr_bytes(calibrator.bias_corrections())))
        items.append((os.path.join(out_dir, qi.QUANT_INFO_FILE), qi.quant_info_bytes(info)))
        items.extend(extra)
        paths = write_files(items)  # each atomic, fsynced together, renamed in this order
        if sha256 is not None:
            from ..calib_commit import sha256_bytes
            sha256.update((path, sha256_bytes(data)) for path, data in items)
        return paths

    def load_test(self, out_dir: str, finetuned: bool = True) -> torch.fx.GraphModule:
        """The lowered test-mode model from ``out_dir``'s files (sim- or nndct-made).

        ``finetuned``: when ``quant_info.json`` says ``fast_finetuned``, use ``param.pth``'s
        parameters (the runner); False keeps the float model's, as nndct's test mode does until
        ``load_ft_param()`` (the drop-in).

        Raises:
            QuantizationError: quant_info.json (or bias_corr.pth with bias correction on, or
                param.pth after a fast finetune) is missing or does not match the model.
        """
        info = qi.read_quant_info(out_dir)
        corr = qi.read_bias_corr(out_dir) if self.cfg.include_bias_corr else None
        self.graph.example_shapes  # the float model on the example: a failing node is named here
        params = self.finetuned_params(out_dir) if finetuned and info.get("fast_finetuned") is True else None
        return build_lowered(self.graph, self.plan, info, self.bitwidth, corr, params)

    def finetuned_params(self, out_dir: str) -> Any:
        """node name -> (weight, bias) from ``out_dir/param.pth`` (read without running code).

        Raises:
            QuantizationError: the file is missing, not a plain state_dict, or made for another model.
        """
        from ...models.loading import load_state_dict_file
        from ...errors import PipelineError
        from .param_file import params_from_state_dict
        from .finetune import PARAM_FILE
        path = os.path.join(out_dir, PARAM_FILE)
        if not os.path.isfile(path):
            raise QuantizationError("%s is missing: quant_info.json says the calibration was fast-finetuned, and its "
                                    "parameters are in that file; run the calibration with fast_finetune again"
                                    % path)
        try:
            state = load_state_dict_file(path)
        except PipelineError as exc:
            raise QuantizationError(str(exc)) from exc
        return params_from_state_dict(self.graph, state, path)


def session_for(model: torch.nn.Module, example: torch.Tensor, settings: Any, traced: Any = None) -> SimSession:
    """The session of ``model`` under the backend contract's ``QuantSettings`` (``settings``: with
    ``qat``, the config QAT trained with; a ``cuda`` device is warned about and not used)."""
    if str(settings.device).startswith("cuda"):
        warnings.warn("the sim quantizer runs on the CPU; device %r is not used" % settings.device)
    cfg = settings_quant_config(settings)  # with settings.qat: the one QAT trained with (CLE, bias correction off)
    # the session's own copy: shape propagation runs the float model on it, and a model whose first
    # op writes in place would otherwise change the caller's example
    return SimSession(model, example.detach().cpu().clone(), cfg, traced)


def load_test_model(model: torch.nn.Module, example: torch.Tensor, out_dir: str, settings: Any,
                    traced: Any = None) -> torch.fx.GraphModule:
    """The lowered test-mode model (``lowered.py``'s contract) of the calibration files in ``out_dir``,
    whichever quantizer wrote them (the sim's or the real one's ``quant_info.json``, ``bias_corr.pth``,
    ``param.pth``), under ``settings`` (``session_for``). It carries its session as ``sim_session``:
    the sensitivity of the same model and settings reuses its capture.

    ``handle(batch)`` takes float32 NCHW of any batch size and returns float32 outputs on the output's
    fix_pos grid; it never writes its input.

    Raises:
        QuantizationError: ``quant_info.json`` (or, with bias correction, ``bias_corr.pth``) missing or
            made for another model.
        pipeline.fx.refusals.NotSimulated: a call of the model the simulation has no form for.
    """
    session = session_for(model, example, settings, traced)
    handle = session.load_test(out_dir)
    handle.sim_session = session
    return handle
