"""Fast finetune on the simulation, from batches to files: the one path of the drop-in and the runner.

Phases (docs/finetune.md), each fed one batch at a time by the caller:

1. ``record(batch)``: keeps the batch (a :class:`~pipeline.quantizers.sim.spill.BatchStore`: in
   memory up to half the budget, then in files) and the float graph's outputs at the last quant
   nodes; returns the float model output (what nndct's quant model returns with quantization off).
2. ``calibrate(batch)``: the finetune's own calibration (bias correction off).
3. ``finetune()``: AdaQuant, layer by layer (``sim/adaquant.py``).
4. ``recalibrator()``: the calibration forwards that follow (nndct's ``keep_fp``), whose
   ``fix_positions`` and ``bias_corrections`` make the exported files, with :func:`param_bytes`.

Method ``adaquant`` is the real quantizer's. Method ``adaquant_plus`` (this project's,
docs/finetune.md#methods) moves continuous parameters through the rounding so that small drifts add
up over passes (``AdaQuant(latent=True)``), and keeps the bias correction that nndct's
re-calibration rounds away (``recalibrator(round_bias=False)``).
"""
import io
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from ...errors import QuantizationError
from ...fx.graph import SimGraph
from .adaquant import TUNED_TYPES, AdaQuant, last_quant_nodes
from .adaquant_calib import KeepFpCalibrator, RawCalibration
from .calib import check_batch
from .frozen import OUTPUT, FrozenForward, Params, float_params
from .param_file import param_state_dict
from .spill import BatchStore, nbytes

log = logging.getLogger("pipeline")

PARAM_FILE = "param.pth"
METHODS = ("adaquant", "adaquant_plus")
DEFAULT_MEMORY_MB = 1024
MIN_BATCHES = 2


class FinetuneOptions:
    """What a fast finetune may do.

    Args:
        method: one of ``METHODS``.
        passes: the most passes per layer (nndct: 100), >= 1.
        memory_mb: memory the kept batches and each layer's cache may use, in MiB (beyond it they
            go to files in ``spill_dir``).
        spill_dir: folder for spill files (None: the system's temporary folder).
    """

    def __init__(self, method: str = "adaquant", passes: int = 100, memory_mb: int = DEFAULT_MEMORY_MB,
                 spill_dir: Optional[str] = None) -> None:
        if method not in METHODS:
            raise QuantizationError("fast finetune method: expected one of %s, got %r" % (list(METHODS), method))
        self.method = method
        self.passes = int(passes)
        self.memory_mb = int(memory_mb)
        self.spill_dir = spill_dir


def mib(n: float) -> str:
    return "%.1f MiB" % (n / 2.0 ** 20)


class FastFinetune:
    """One fast finetune of a SimSession (see the module docstring).

    Args:
        session: the SimSession (its graph, plan, bit width and config).
        options: FinetuneOptions.
    """

    def __init__(self, session: Any, options: FinetuneOptions) -> None:
        from .calib import Calibrator
        self.session = session
        self.options = options
        graph = session.graph
        budget = options.memory_mb * 2 ** 20
        self.inputs = BatchStore(budget // 2, options.spill_dir)
        self.targets = []  # type: List[Tuple[torch.Tensor, ...]]
        self.float = FrozenForward(graph, float_params(graph), None, session.bitwidth)
        self.last = [n.name for n in last_quant_nodes(graph, session.plan)]
        self.calibrator = Calibrator(graph, session.plan, session.bitwidth, False)
        self.raw = None  # type: Optional[RawCalibration]
        self.params = None  # type: Optional[Params]
        self.ada = None  # type: Optional[AdaQuant]
        self.seconds = 0.0
        self._sample_shapes = None  # type: Optional[List[Tuple[int, ...]]]

    # -- phase 1 and 2 ------------------------------------------------------------------------------
    def record(self, *xs: torch.Tensor) -> Any:
        """Keep one finetune batch (not modified); returns the float model's output on it.

        Raises:
            QuantizationError: not one float32 tensor per input, or another per-sample shape than
                the first batch's (named).
        """
        check_batch(xs, len(self.session.graph.inputs))
        shapes = [tuple(int(d) for d in x.shape[1:]) for x in xs]
        if self._sample_shapes is None:
            self._sample_shapes = shapes
        elif shapes != self._sample_shapes:
            raise QuantizationError(
                "fast finetune batch %d has per-sample shape %s, the first batch had %s: every finetune batch "
                "must have the calibration's input shape; check the finetune data loader (a resize or crop "
                "missing?)" % (len(self.inputs) + 1, _shapes(shapes), _shapes(self._sample_shapes)))
        self.inputs.append(xs)
        values = self.float.run(xs, keep=self.last, output=True)
        self.targets.append(tuple(values[n].clone() for n in self.last))
        return values[OUTPUT]

    def calibrate(self, *xs: torch.Tensor) -> Any:
        """One batch of the finetune's own calibration (bias correction off); returns its output."""
        return self.calibrator.step(*xs)

    def estimate(self) -> Dict[str, int]:
        """Bytes the finetune keeps: the batches, the float targets, and the largest layer cache."""
        n = len(self.inputs)
        est = estimate_bytes(self.session.graph, self.inputs[0], n) if n else {"inputs": 0, "layer_cache": 0}
        est["targets"] = sum(sum(int(t.numel()) * t.element_size() for t in ts) for ts in self.targets)
        return est

    # -- phase 3 ----------------------------------------------------------------------------------
    def finetune(self, progress: Any = None) -> Params:
        """Run AdaQuant on the recorded batches; returns node name -> (weight, bias) on their grids.

        Raises:
            QuantizationError: fewer than two batches, or a calibration count that differs from the
                recorded one (run_fn fed other data the second time).
        """
        n = len(self.inputs)
        if n < MIN_BATCHES:
            raise QuantizationError(
                "fast finetune needs at least %d batches of finetune data, got %d: AdaQuant takes one Adam step "
                "per batch and judges each pass on the same data, so a single batch is memorised, not learned. "
                "Give it the calibration set (e.g. 32 or more images in batches of 4 or more)" % (MIN_BATCHES, n))
        if self.calibrator.batches != n:
            raise QuantizationError(
                "fast finetune: the data gave %d batches when its inputs were kept and %d when it was calibrated; "
                "run_fn must feed the same batches each time it is called (no shuffling, no random augmentation)"
                % (n, self.calibrator.batches))
        est = self.estimate()
        cache_budget = self.options.memory_mb * 2 ** 20 // 2
        log.info("fast finetune: %d batches; kept inputs %s (%s in memory, %s in files), float targets %s, largest "
                 "layer cache %s (%s)", n, mib(est["inputs"]), mib(self.inputs.in_memory), mib(self.inputs.on_disk),
                 mib(est["targets"]), mib(est["layer_cache"]),
                 "in memory" if est["layer_cache"] <= cache_budget else "partly in files")
        start = time.perf_counter()
        self.raw = RawCalibration(self.calibrator)
        self.calibrator = None  # its statistics are in self.raw now (one copy of the weights less)
        self.ada = AdaQuant(self.session.graph, self.session.plan, self.session.bitwidth, self.raw, self.inputs,
                            self.targets, cache_budget, self.options.spill_dir, progress,
                            passes=self.options.passes, latent=self.options.method == "adaquant_plus")
        self.params = self.ada.run()
        self.seconds = time.perf_counter() - start
        return self.params

    # -- phase 4 ----------------------------------------------------------------------------------
    def recalibrator(self, round_bias: Optional[bool] = None) -> KeepFpCalibrator:
        """The calibration that follows the finetune; ``round_bias`` (default: True for ``adaquant``,
        False for ``adaquant_plus``) re-rounds the bias before each batch as nndct does."""
        if round_bias is None:
            round_bias = self.options.method == "adaquant"
        if self.params is None or self.raw is None:
            raise QuantizationError("fast finetune: finetune() has not run")
        return KeepFpCalibrator(self.session.graph, self.session.plan, self.session.bitwidth, self.raw,
                                self.params, self.session.cfg.include_bias_corr, round_bias)

    def output_scores(self, candidates: Dict[str, Tuple[Dict[str, Any], Any, Optional[Params]]]) -> Dict[str, Dict[str, float]]:
        """Per candidate ``name -> (quant_info dict, bias_corr or None, params or None)``, its test-mode
        model's ``{"mse", "top1_agreement"}`` on the finetune batches against the float graph's outputs
        (first output; top-1 over dimension 1 when it has one). One float forward per batch serves all."""
        from .lowered import build_lowered
        models = {name: build_lowered(self.session.graph, self.session.plan, info, self.session.bitwidth, corr, params)
                  for name, (info, corr, params) in candidates.items()}
        sums = {name: [0.0, 0, 0, 0] for name in models}  # squared error, elements, agreeing, samples
        with torch.no_grad():
            for i in range(len(self.inputs)):
                xs = self.inputs[i]
                f = _first(self.float.run(xs, output=True)[OUTPUT])
                for name, gm in models.items():
                    q, acc = _first(gm(*xs)), sums[name]
                    acc[0] += float(torch.sum((q.double() - f.double()) ** 2))
                    acc[1] += q.numel()
                    if q.dim() >= 2:
                        acc[2] += int((q.argmax(1) == f.argmax(1)).sum())
                        acc[3] += int(q.shape[0])
        return {name: {"mse": sq / max(count, 1), "top1_agreement": agree / samples if samples else float("nan")}
                for name, (sq, count, agree, samples) in sums.items()}

    def trace(self) -> Dict[str, Any]:
        """The finetune's record for the step result and the report."""
        ada = self.ada
        if ada is None:
            return {}
        return {"method": self.options.method, "batches": len(self.inputs), "seconds": round(self.seconds, 3),
                "net_loss_before": ada.initial_loss, "net_loss_after": ada.final_loss,
                "codes_changed": sum(t.weight_changed + t.bias_changed for t in ada.trace),
                "memory": dict(self.estimate(), inputs_in_memory=self.inputs.in_memory,
                               inputs_in_files=self.inputs.on_disk, budget=self.options.memory_mb * 2 ** 20),
                "layers": [t.as_dict() for t in ada.trace]}

    def close(self) -> None:
        """Drop the kept batches (and their spill files)."""
        self.inputs.close()
        self.targets = []


def param_bytes(graph: Any, params: Params, norm_params: Optional[Params] = None) -> bytes:
    """``param.pth``: nndct's ``torch.save(quant_model.state_dict())`` layout (see ``param_file.param_state_dict``;
    ``norm_params``: the layer norms' rounded weight and bias)."""
    buf = io.BytesIO()
    torch.save(param_state_dict(graph, params, norm_params), buf)
    return buf.getvalue()


def _first(out: Any) -> torch.Tensor:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def _shapes(shapes: List[Tuple[int, ...]]) -> str:
    return str(list(shapes[0])) if len(shapes) == 1 else str([list(s) for s in shapes])


def estimate_bytes(graph: SimGraph, batch: Tuple[torch.Tensor, ...], batches: int) -> Dict[str, int]:
    """The finetune's memory needs for ``batches`` batches shaped like ``batch``: the kept inputs,
    and the largest per-layer cache (layer input + output over all batches, float32), from the
    example shapes scaled to the batch size."""
    shapes = graph.example_shapes
    layer = 0
    for node in graph.nodes:
        if node.op not in TUNED_TYPES or node.fx_node is None:
            continue
        sin, sout = shapes.get(node.fx_node.all_input_nodes[0]), shapes.get(node.fx_node)
        if sin is None or sout is None:
            continue
        scale = int(batch[0].shape[0]) / max(int(sin[0]), 1)
        layer = max(layer, int((int(np.prod(sin)) + int(np.prod(sout))) * 4 * scale))
    return {"inputs": nbytes(batch) * batches, "layer_cache": layer * batches}
