"""Fast finetune (AdaQuant) as the real quantizer runs it, on the simulation (docs/finetune.md).

Re-implements ``AdvancedQuantProcessor.finetune_v2`` of ``pytorch_nndct/qproc/adaquant.py``
(Vitis AI 3.5, default options: ``ft_mode=1``, ``quant_opt=3``, ``finetune_lr_factor=0.01``;
the method of Hubara et al., "Improving Post Training Neural Quantization: Layer-wise Calibration
and Integer Programming", arXiv:2006.10518):

1. The finetune data's inputs are kept, with the float graph's outputs at the *last quant nodes*
   (walking back from each graph output, the first quantizable node with inputs).
2. An ordinary calibration on the finetune data with bias correction off gives the raw fix
   positions (no export-time adjustment) and the on-grid starting parameters.
3. The float forwards of the finetune see the kept inputs rounded to the input's fix_pos (nndct
   rounds its cached CPU tensors in place on the first test-mode forward; the float targets of
   step 1 were made before that). The kept batches themselves are not changed.
4. ``net loss``: per last node, the batch average of ``sqrt(mse(float target, quant output))``.
5. Each conv/linear layer in graph order: Adam on its weight and bias (lr ``0.01 * std`` of the
   on-grid tensor, ``0.001 * std`` when its SQNR/8 > 4.5, halved again for batch size 1), one step
   per batch on ``mse(q_out, f_out) + mse(W, W_float)``, where ``q_out`` is the layer (and its
   following ReLU/ReLU6/Hardswish/Hardsigmoid) on the quant model's input to it, rounded at their
   fix positions as a straight-through estimator, and ``f_out`` the float graph's layer output
   (through the float activation). After each pass over the batches the parameters are rounded
   (std_round) and the net loss decides: better keeps them, otherwise the best are restored, both
   learning rates halve (Adam's state is kept) and the layer stops when both are below 1e-5 or
   the loss equals the previous one (rel. 1e-6). At most 100 passes.

The per-layer inputs and float outputs are computed once per layer (nndct recomputes them each
pass for the first half of the layers; both give the same values) and held in a
:class:`~pipeline.quantizers.sim.spill.BatchStore`, in memory up to a budget and spilled to files
beyond it, so memory does not grow with the finetune set.

The calibrations before and after (:class:`RawCalibration`, :class:`KeepFpCalibrator`) are in
``adaquant_calib.py``; ``param.pth``'s layout in ``param_file.py``.
"""
import math
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ... import fixpoint
from ... import ops as g
from ...fx.graph import SimGraph, SimNode
from .adaquant_calib import RawCalibration
from .frozen import INPUT_OF, FrozenForward, Params, float_params
from ...ops.hard_sigmoid import HARD_SIGMOID_SCALE, HSWISH_FIX_POS
from .ops import param_forward
from .plan import QuantPlan
from .spill import BatchStore

LR_FACTOR = 0.01  # option finetune_lr_factor
HIGH_EFFICIENCY = 4.5  # quant_eff above which the learning rate is 10x smaller
MAX_PASSES = 100  # iters of optimize_layer_v2
MIN_LR = 1e-5
LOSS_REL_TOL = 1e-6  # AverageMeter.__eq__
TUNED_TYPES = g.with_role("adaquant")  # is_conv_like (the 2-D ops the sim captures)
PAIR_LAYER_TYPES = g.with_role("adaquant_pair_layer")  # collect_layer_act_pair
PAIR_ACT_TYPES = g.with_role("adaquant_act")
# a paired activation's float function: the first function its record maps to it (F.relu, F.relu6,
# F.hardswish, F.hardsigmoid), as nndct's float model runs it
FLOAT_ACTS = {op: next(fn for fn, o in g.FUNCTION_OPS.items() if o == op) for op in PAIR_ACT_TYPES}
METHODS = ("adaquant", "adaquant_bc")


def last_quant_nodes(graph: SimGraph, plan: QuantPlan) -> List[SimNode]:
    """``collect_last_quant_nodes``: from each graph output, depth first towards the inputs, the
    first node that is quantizable, has inputs and a tensor output."""
    found = []  # type: List[SimNode]
    visited = set()

    def walk(node: SimNode) -> None:
        if node.name in visited:
            return
        visited.add(node.name)
        if plan.quantizable(node) and node.inputs and node.op != g.INPUT:
            found.append(node)
            return
        for parent in node.inputs:
            walk(parent)

    for node in graph.outputs:
        walk(node)
    return found


def act_pairs(graph: SimGraph) -> Dict[str, SimNode]:
    """``collect_layer_act_pair``: conv node name -> the activation node that reads it."""
    pairs = {}  # type: Dict[str, SimNode]
    for node in graph.nodes:
        if node.op in PAIR_LAYER_TYPES:
            for user in node.users:
                if user.op in PAIR_ACT_TYPES:
                    pairs[node.name] = user
    return pairs


def quant_eff(w_q: torch.Tensor, w_f: torch.Tensor) -> float:
    """``AdvancedQuantProcessor.quant_eff``: SQNR / 8 of the rounded weight, in float32 torch."""
    noise = torch.mean(torch.pow(w_f - w_q, 2))
    return float(10 * torch.log10(torch.mean(torch.pow(w_f, 2)) / noise) / 8.0)


def losses_lt(a: Sequence[float], b: Sequence[float]) -> bool:
    """``AverageMeter.__lt__``: no entry of ``a`` larger than ``b``'s, at least one smaller."""
    if any(x > y for x, y in zip(a, b)):
        return False
    return any(x < y for x, y in zip(a, b))


def losses_eq(a: Sequence[float], b: Sequence[float]) -> bool:
    """``AverageMeter.__eq__``: every entry ``math.isclose`` (rel. 1e-6)."""
    return all(math.isclose(x, y, rel_tol=LOSS_REL_TOL) for x, y in zip(a, b))


def _round_(t: torch.Tensor, fix_pos: int, bitwidth: int, method: str) -> None:
    """``t`` (a leaf's data, or an output) rounded in place, outside autograd (nndct's FixNeuron
    kernel writes the storage; the gradient passes straight through)."""
    with torch.no_grad():
        t.data.copy_(fixpoint.fake_quant(t.data, fix_pos, bitwidth, method))


class LayerTrace:
    """What the finetune did to one layer (the run's report and the closing checks read it)."""

    def __init__(self, node: str, act: Optional[str], quant_eff: float, lr_w: float, lr_b: float) -> None:
        self.node = node
        self.act = act
        self.quant_eff = quant_eff
        self.lr_w = lr_w
        self.lr_b = lr_b
        self.evals = []  # type: List[List[float]]
        self.accepted = []  # type: List[bool]
        self.loss_in = []  # type: List[float]
        self.loss_out = []  # type: List[float]
        self.weight_changed = 0
        self.bias_changed = 0
        self.seconds = 0.0
        self.final = []  # type: List[float]

    def as_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "act": self.act, "quant_eff": self.quant_eff, "lr_w": self.lr_w,
                "lr_b": self.lr_b, "passes": len(self.evals), "evals": self.evals, "accepted": self.accepted,
                "net_loss_in": self.loss_in, "net_loss_out": self.loss_out,
                "weight_changed": self.weight_changed, "bias_changed": self.bias_changed,
                "seconds": round(self.seconds, 3)}


class AdaQuant:
    """One fast finetune of a SimGraph (see the module docstring).

    Args:
        graph, plan, bitwidth: the session's SimGraph, QuantPlan and bit width.
        raw: the finetune data's calibration (:class:`RawCalibration`).
        net_inputs: the finetune batches (tuples of float32 tensors, one per model input); read only.
        net_outputs: per batch, the float graph's outputs at :func:`last_quant_nodes` on the raw inputs.
        budget: bytes each per-layer cache may hold in memory before spilling to files.
        spill_dir: where spill folders are made (None: the system's temporary folder).
        progress: called ``(index, count, LayerTrace)`` after each layer, or None.
        passes: the most passes per layer (100 in nndct).
        latent: ``adaquant_plus``'s passes (:meth:`_passes_latent`) instead of nndct's.

    The global RNG is not used (nndct draws one ``torch.rand`` per layer for a gradient check, and
    more when it builds its quantizer; the caller's random stream is left alone here).
    """

    def __init__(self, graph: SimGraph, plan: QuantPlan, bitwidth: int, raw: RawCalibration,
                 net_inputs: BatchStore, net_outputs: List[Tuple[torch.Tensor, ...]], budget: int,
                 spill_dir: Optional[str] = None, progress: Optional[Callable[..., None]] = None,
                 passes: int = MAX_PASSES, latent: bool = False) -> None:
        self.graph = graph
        self.plan = plan
        self.bitwidth = bitwidth
        self.raw = raw
        self.inputs = net_inputs
        self.targets = net_outputs
        self.budget = budget
        self.spill_dir = spill_dir
        self.progress = progress
        self.passes = passes
        self.latent = latent
        # node name -> current (weight, bias): the raw tensors until a layer is tuned, then the tuned
        # layer's own (a layer works on copies, so the raw ones are never written)
        self.params = OrderedDict(raw.params)  # type: Params
        self.float = FrozenForward(graph, float_params(graph), None, bitwidth)
        self.quant = FrozenForward(graph, self.params, raw.out_fp, bitwidth, norm_params=raw.norm_params)
        self.last = [n.name for n in last_quant_nodes(graph, plan)]
        self.pairs = act_pairs(graph)
        self.trace = []  # type: List[LayerTrace]
        self.initial_loss = []  # type: List[float]
        self.final_loss = []  # type: List[float]

    def layers(self) -> List[SimNode]:
        """The layers to tune, in graph order (``is_conv_like`` with parameters)."""
        return [n for n in self.graph.nodes if n.op in TUNED_TYPES and n.name in self.params]

    def net_loss(self) -> List[float]:
        """``calc_net_loss``: per last node, the batch average of ``sqrt(mse)`` (Python floats)."""
        sums = [0.0] * len(self.last)
        for i in range(len(self.inputs)):
            values = self.quant.run(self.inputs[i], keep=self.last)
            for j, name in enumerate(self.last):
                sums[j] += math.sqrt(F.mse_loss(self.targets[i][j], values[name]).item())
        return [s / len(self.inputs) for s in sums]

    def run(self) -> Params:
        """Finetune every layer; returns node name -> (weight, bias), on their grids."""
        net = self.initial_loss = self.net_loss()
        layers = self.layers()
        for k, node in enumerate(layers):
            net = self._layer(node, net)
            if self.progress is not None:
                self.progress(k + 1, len(layers), self.trace[-1])
        self.final_loss = net
        return self.params

    def _rounded_input(self, i: int) -> Tuple[torch.Tensor, ...]:
        """Batch ``i`` rounded to the input fix_pos: what nndct's float forwards see once its
        first test-mode forward has rounded the cached CPU tensors in place."""
        return tuple(self.quant.quantize(node, x) for node, x in zip(self.graph.inputs, self.inputs[i]))

    def _batch_size(self) -> int:
        last = self.inputs[len(self.inputs) - 1]
        return int(last[0].shape[0]) if last[0].dim() else 1

    def _layer_cache(self, node: SimNode) -> Tuple[BatchStore, BatchStore]:
        """Per batch, the quant model's input to the layer and the float target: the float layer's
        output through the float activation of its act pair (the same every pass, so made once)."""
        act = self.pairs.get(node.name)
        f_act = FLOAT_ACTS[act.op] if act is not None else None
        qin, fout = BatchStore(self.budget // 2, self.spill_dir), BatchStore(self.budget // 2, self.spill_dir)
        for i in range(len(self.inputs)):
            xs = self.inputs[i]
            qin.append((self.quant.run(xs, input_of=node.name)[INPUT_OF],))
            f = self.float.run(self._rounded_input(i), stop=node.name)[node.name]
            fout.append((f if f_act is None else f_act(f),))
        return qin, fout

    def _q_forward(self, node: SimNode, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
        """The layer (and its paired activation) in quant mode, with autograd through ``w`` and
        ``b``; roundings in place as straight-through estimators."""
        out_fp = self.raw.out_fp
        y = param_forward(self.graph, node, x, w, b)
        if node.name in out_fp:
            _round_(y, out_fp[node.name], self.bitwidth, "half_up")
        act = self.pairs.get(node.name)
        if act is None:
            return y
        if act.op == g.RELU:
            y = torch.relu(y)
        elif act.op == g.RELU6:
            y = F.relu6(y)
        else:
            h = torch.mul(F.relu6(torch.add(y, 3.0)), HARD_SIGMOID_SCALE)
            if act.op == g.HSWISH:
                _round_(h, HSWISH_FIX_POS, 8, "half_up")
                h = torch.mul(y, h)
            y = h
        if act.name in out_fp:
            _round_(y, out_fp[act.name], self.bitwidth, "half_up")
        return y

    def _layer(self, node: SimNode, net: List[float]) -> List[float]:
        start = time.perf_counter()
        w0, b0 = self.params[node.name]
        wf, _ = self.float.params[node.name]
        wfp = self.raw.param_fp[node.param_names["weights"]]
        bfp = self.raw.param_fp[node.param_names["bias"]] if b0 is not None else None
        eff = quant_eff(w0, wf)
        batch_factor = 0.5 if self._batch_size() == 1 else 1
        factor = LR_FACTOR * batch_factor
        if eff > HIGH_EFFICIENCY:
            factor = 0.1 * factor * batch_factor
        w = w0.clone().requires_grad_(True)
        opt_w = torch.optim.Adam([w], lr=factor * w.std().item())
        b, opt_b = None, None
        if b0 is not None:
            b = b0.clone().requires_grad_(True)
            opt_b = torch.optim.Adam([b], lr=0.0 if b.numel() == 1 else factor * b.std().item())
        act = self.pairs.get(node.name)
        trace = LayerTrace(node.name, None if act is None else act.name, eff, opt_w.param_groups[0]["lr"],
                           0.0 if opt_b is None else opt_b.param_groups[0]["lr"])
        self.trace.append(trace)
        trace.loss_in = list(net)
        qin, fout = self._layer_cache(node)
        try:
            if self.latent:
                self._passes_latent(node, trace, w, b, opt_w, opt_b, qin, fout, wf, wfp, bfp, net)
            else:
                self._passes(node, trace, w, b, opt_w, opt_b, qin, fout, wf, wfp, bfp, net)
        finally:
            qin.close()
            fout.close()
        net = trace.loss_out = trace.final
        w_end, b_end = self.params[node.name]
        trace.weight_changed = int((w_end != w0).sum())
        trace.bias_changed = 0 if b0 is None else int((b_end != b0).sum())
        trace.seconds = time.perf_counter() - start
        return net

    def _step(self, node: SimNode, w: Any, b: Any, opt_w: Any, opt_b: Any, x: torch.Tensor, f: torch.Tensor,
              wf: torch.Tensor, w_in: Any, b_in: Any) -> None:
        """One Adam step on ``mse(q_out, f) + mse(w, wf)``; ``w_in``/``b_in`` are what the layer runs with."""
        q = self._q_forward(node, x, w_in, b_in)
        loss = F.mse_loss(q, f) + F.mse_loss(w, wf)
        opt_w.zero_grad()
        if opt_b is not None:
            opt_b.zero_grad()
        loss.backward()
        opt_w.step()
        if opt_b is not None:
            opt_b.step()

    @staticmethod
    def _halve(opt_w: Any, opt_b: Any) -> bool:
        """Halve both learning rates; True when both are now below ``MIN_LR``."""
        opt_w.param_groups[0]["lr"] /= 2.0
        if opt_b is not None:
            opt_b.param_groups[0]["lr"] /= 2.0
        return opt_w.param_groups[0]["lr"] < MIN_LR and (opt_b is None or opt_b.param_groups[0]["lr"] < MIN_LR)

    def _passes(self, node, trace, w, b, opt_w, opt_b, qin, fout, wf, wfp, bfp, net) -> None:
        """nndct's passes: Adam moves the parameters themselves, rounded after each pass."""
        self.params[node.name] = (w.detach(), None if b is None else b.detach())
        best = (w.detach().clone(), None if b is None else b.detach().clone())
        prev = [1000.0] * len(net)
        for _ in range(self.passes):
            for i in range(len(qin)):
                self._step(node, w, b, opt_w, opt_b, qin[i][0], fout[i][0], wf, w, b)
            _round_(w, wfp, self.bitwidth, "std_round")
            if b is not None:
                _round_(b, bfp, self.bitwidth, "std_round")
            ev = self.net_loss()
            trace.evals.append(ev)
            ratio = (np.array(net) - np.array(ev)) / np.array(net) * 10000
            if losses_lt(ev, net) and ratio.max() > 0:
                best = (w.detach().clone(), None if b is None else b.detach().clone())
                net = ev
                trace.accepted.append(True)
                continue
            trace.accepted.append(False)
            with torch.no_grad():
                w.copy_(best[0])
                if b is not None:
                    b.copy_(best[1])
            if self._halve(opt_w, opt_b) or losses_eq(ev, prev):
                break
            prev = ev
        self.params[node.name] = (w.detach(), None if b is None else b.detach())
        trace.final = net

    def _passes_latent(self, node, trace, w, b, opt_w, opt_b, qin, fout, wf, wfp, bfp, net) -> None:
        """``adaquant_plus``'s passes: Adam moves continuous (latent) parameters through the rounding
        (a straight-through estimator), so drifts smaller than half an LSB add up over passes instead of
        being rounded away after each one. A pass whose rounded parameters did not change costs no net
        loss evaluation; a change is kept only when the net loss improves (else the latent parameters go
        back to the best ones and the learning rates halve, as nndct's rule)."""

        def rounded():
            with torch.no_grad():
                return (fixpoint.fake_quant(w.detach(), wfp, self.bitwidth, "std_round"),
                        None if b is None else fixpoint.fake_quant(b.detach(), bfp, self.bitwidth, "std_round"))

        best_q = self.params[node.name]
        best_latent = (w.detach().clone(), None if b is None else b.detach().clone())
        for _ in range(self.passes):
            for i in range(len(qin)):
                w_in = w + (fixpoint.fake_quant(w.detach(), wfp, self.bitwidth, "std_round") - w.detach())
                b_in = None if b is None else b + (fixpoint.fake_quant(b.detach(), bfp, self.bitwidth, "std_round")
                                                   - b.detach())
                self._step(node, w, b, opt_w, opt_b, qin[i][0], fout[i][0], wf, w_in, b_in)
            cand = rounded()
            if torch.equal(cand[0], best_q[0]) and (b is None or torch.equal(cand[1], best_q[1])):
                continue  # nothing crossed a rounding boundary yet: keep drifting
            self.params[node.name] = cand
            ev = self.net_loss()
            trace.evals.append(ev)
            if losses_lt(ev, net):
                best_q, net = cand, ev
                best_latent = (w.detach().clone(), None if b is None else b.detach().clone())
                trace.accepted.append(True)
                continue
            trace.accepted.append(False)
            self.params[node.name] = best_q
            with torch.no_grad():
                w.copy_(best_latent[0])
                if b is not None:
                    b.copy_(best_latent[1])
            if self._halve(opt_w, opt_b):
                break
        self.params[node.name] = best_q
        trace.final = net
