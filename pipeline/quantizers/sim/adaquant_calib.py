"""The calibrations around a fast finetune (sim/adaquant.py, docs/finetune.md).

- :class:`RawCalibration`: the fix positions and on-grid parameters the finetune starts from (an
  ordinary calibration on the finetune data with bias correction off, no export-time adjustment).
- :class:`KeepFpCalibrator`: the calibration that follows (nndct's ``keep_fp``); with
  ``round_bias=False`` it keeps the bias correction nndct rounds away (method ``adaquant_plus``,
  docs/finetune.md#methods).
"""
from collections import OrderedDict
from typing import Any, Dict, Optional, Tuple

import torch

from ...errors import QuantizationError
from ... import fixpoint
from .. import fix_pos_search
from ... import ops as g
from ...fx.graph import SimGraph, SimNode
from .calib import Calibrator, bias_corr_table, bias_step, check_batch
from .frozen import OUTPUT, FrozenForward, Params
from .ops import param_forward
from .plan import QuantPlan, adjust_fix_pos

class RawCalibration:
    """The fix positions and on-grid parameters the finetune starts from.

    Attributes:
        param_fp: nndct param name -> fix_pos (first batch, std_round search).
        out_fp: node name -> activation fix_pos (mode over the batches; raw: no export-time adjustment).
        params: node name -> (weight, bias) rounded at their fix positions (the calibration's tensors:
            read only, the finetune works on copies).
        norm_params: layer norm node name -> (weight, bias) rounded at their fix positions (nndct
            finetunes conv/linear layers only: these stay as calibrated).
    """

    def __init__(self, calibrator: Calibrator) -> None:
        if calibrator.batches == 0:
            raise QuantizationError("fast finetune: its calibration saw 0 batches; the finetune data is empty")
        missing = [n for n in calibrator.plan.output_order if not calibrator.history[n]]
        if missing:
            raise QuantizationError("fast finetune: the finetune data gave no fix_pos to %s (non-finite values "
                                    "in every batch?)" % ", ".join(missing))
        self.param_fp = dict(calibrator.param_fp)
        self.out_fp = {n: fix_pos_search.modal_fix_pos(calibrator.history[n]) for n in calibrator.plan.output_order}
        self.params = OrderedDict()  # type: Params   # the calibrator's tensors (never written)
        for name, state in calibrator.params.items():
            self.params[name] = (state.weight, state.bias)
        self.norm_params = dict(calibrator.norm_params)  # type: Params   # layer norms, rounded (never tuned)

class KeepFpCalibrator:
    """The calibration forwards after a fast finetune (nndct's ``keep_fp``): no fix_pos search.

    Activations are rounded at the finetune's raw fix positions; the finetuned parameters are
    used, rounded again at every batch. With bias correction on, nndct's per-batch rule
    (``eval_qnoise``) runs against ``op(x, W_ft, b_ft)``; as nndct re-rounds the bias before each
    batch, a correction smaller than half a bias LSB vanishes (docs/finetune.md#re-calibration).

    Args:
        graph, plan, bitwidth: the session's.
        raw: the finetune's :class:`RawCalibration` (its fix positions).
        params: node name -> finetuned (weight, bias), on their grids.
        bias_correction: the config's ``include_bias_corr``.
        round_bias: re-round the bias before each batch (nndct); False keeps the corrected bias
            (method ``adaquant_plus``).
    """

    def __init__(self, graph: SimGraph, plan: QuantPlan, bitwidth: int, raw: RawCalibration, params: Params,
                 bias_correction: bool, round_bias: bool = True) -> None:
        self.graph = graph
        self.plan = plan
        self.bitwidth = bitwidth
        self.raw = raw
        self.bias_correction = bias_correction
        self.round_bias = round_bias
        self.finetuned = params
        self.current = OrderedDict((k, (w, b)) for k, (w, b) in params.items())  # type: Params
        self.stopped = {}  # type: Dict[str, Tuple[bool, float, float]]
        self.batches = 0
        self._forward = FrozenForward(graph, self.current, raw.out_fp, bitwidth,
                                      self._corrected if bias_correction else None, raw.norm_params)

    def step(self, *xs: torch.Tensor) -> Any:
        """One calibration batch (not modified); returns the model output."""
        check_batch(xs, len(self.graph.inputs))
        out = self._forward.run(xs, output=True)[OUTPUT]
        self.batches += 1
        return out

    def _corrected(self, node: SimNode, x: torch.Tensor) -> torch.Tensor:
        w, b = self.current[node.name]
        if node.op not in g.BIAS_CORR_TYPES:
            return self._forward.quantize(node, param_forward(self.graph, node, x, w, b))
        stop, eff, dev = self.stopped.get(node.name, (False, 0.0, 0.0))
        if b is not None and self.round_bias and not stop:
            bfp = self.raw.param_fp[node.param_names["bias"]]
            b = fixpoint.fake_quant(b, bfp, self.bitwidth, "std_round")
            self.current[node.name] = (w, b)
        out = self._forward.quantize(node, param_forward(self.graph, node, x, w, b))
        if stop:
            return out
        w_ft, b_ft = self.finetuned[node.name]
        b, stop, eff, dev = bias_step(self.graph, node, x, out, w_ft, b_ft, b, eff, dev)
        self.current[node.name] = (w, b)
        self.stopped[node.name] = (stop, eff, dev)
        return out

    def fix_positions(self, change_concat_input_fix: bool = False, change_pool_input_fix: bool = False):
        """Like ``Calibrator.fix_positions``: the finetune's raw fix positions after the export-time
        adjustments, as ``(param_fp, output_fp, notes)``."""
        if self.batches == 0:
            raise QuantizationError("fast finetune: run at least one calibration forward after fast_finetune "
                                    "(the re-calibration) before exporting the quantization config")
        param_fp = {p: self.raw.param_fp.get(p) for p in self.plan.param_order}
        output_fp = {n: self.raw.out_fp[n] for n in self.plan.output_order}
        notes = adjust_fix_pos(self.plan, param_fp, output_fp, change_concat_input_fix, change_pool_input_fix)
        return param_fp, output_fp, notes

    def bias_corrections(self) -> Dict[str, Optional[torch.Tensor]]:
        """``bias_corr.pth`` content: ``"<Class>::<node>"`` -> ``b_ft - b_final`` (None without bias)."""
        return bias_corr_table(self.graph, {name: (self.finetuned[name][1], self.current[name][1])
                                            for name in self.finetuned})
