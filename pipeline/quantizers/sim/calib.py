"""Calibration: the real quantizer's calib-mode forward, batch by batch (docs/arithmetic.md#fix-position-search, docs/arithmetic.md#bias-and-bias-correction).

Per calibration batch, in graph order (``TORCHQuantizer.calibrate_int`` in
``pytorch_nndct/quantization/torchquantizer.py``):

- every quantized activation (and the input) gets a fix_pos from the "diffs" search on this
  batch (scope 1 for the input, 5 otherwise, half_up), capped at 12; it is appended to the
  tensor's history and the tensor is fake-quantized with the *mode of the history so far*, so
  later layers see what nndct's did;
- conv/linear weights and bias, and a layer norm's weight and bias, get their fix_pos once, at
  the first batch (diffs, scope 5, std_round: ``calibrate_int`` rounds every ``param`` tensor
  std_round, whatever its quant config says), and are fake-quantized then; a state-dict tensor
  another quantizable node takes directly is used in float and gets no fix_pos
  (``SimNode.free_params``);
- with bias correction on (``nn/modules/conv.py``, ``linear.py``, ``quant_noise.py``): the first
  batch keeps float copies ``W_f, b_f``; after every batch the quantized output is compared with
  the float output ``op(x, W_f, b_f)`` on the same (quantized) input, and until the
  ``eval_qnoise`` rule says stop the bias moves by ``rate * mean(error)`` per output channel
  (rate 0.05, halved while the smoothed efficiency exceeds 4). The corrected bias is used as is
  (not re-quantized) in later calibration batches. ``bias_corr[node] = b_f - b_final``.

Tensors holding NaN or Inf are passed through unquantized and add nothing to the statistics,
as in nndct. Nothing the caller owns is written.

Memory: a batch keeps an activation only until the last node that reads it has run (``release_schedule``),
bias correction squares into one reused buffer (``Scratch``), and a value the calibration itself just made (a
conv output, a ReLU's, a pool's) is quantized in place, as is a ReLU over such a value that nothing else reads
(``in_place_plan``): the peak stays near a float forward's, fewer new pages are touched, every result is the same.
"""
import math
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.fx.node import map_arg

from ...errors import QuantizationError
from ... import fixpoint, ops as g
from .. import fix_pos_search
from ...fx.graph import SimGraph, SimNode, first_output, with_first_output
from .ops import float_reference, norm_float_params, norm_forward, param_forward, run_node, run_step
from .plan import QuantPlan, adjust_fix_pos

BIAS_CORR_RATE = 0.05  # option param_corr_rate

# Node types whose calibration value is a new tensor that nothing else holds (``param_forward`` and
# ``run_node`` allocate it): once computed, the calibration may overwrite it in place.
FRESH_OUTPUT_TYPES = g.PARAM_TYPES + g.with_role("fresh_output")


def check_batch(xs: Any, n_inputs: int) -> None:
    """Raise QuantizationError unless ``xs`` holds ``n_inputs`` float32 tensors (one calibration
    batch: one tensor per model input)."""
    if len(xs) != n_inputs:
        raise QuantizationError("calibration batch: the model takes %d inputs, got %d tensors" % (n_inputs, len(xs)))
    for x in xs:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
            raise QuantizationError("calibration batch: expected a float32 tensor, got %s; cast it with "
                                    ".float()" % (x.dtype if isinstance(x, torch.Tensor) else type(x).__name__))


class ParamState:
    """Calibration state of one conv/linear node."""

    def __init__(self) -> None:
        self.weight = None  # type: Optional[torch.Tensor]   # quantized weight
        self.bias = None  # type: Optional[torch.Tensor]     # current bias (quantized, then corrected)
        self.weight_float = None  # type: Optional[torch.Tensor]
        self.bias_float = None  # type: Optional[torch.Tensor]
        self.stop = False
        self.efficiency = 0.0
        self.deviation = 0.0


def eval_qnoise(output: torch.Tensor, res_f: torch.Tensor, efficiency: float, deviation: float,
                rate: float, stop: bool, scratch: Optional["Scratch"] = None):
    """nndct's bias-correction step rule (``pytorch_nndct/nn/modules/quant_noise.py``).

    ``eff = 1.25 * log10(mean(res_f**2) / mean(err**2))`` (float32 reductions, then Python float
    arithmetic as numpy 1.x does for 0-d arrays); smoothed ``efficiency`` and ``deviation``
    decide the rate (halved above 4.0) and when to stop.

    With ``scratch``, the squares go into a reused buffer and, when ``output`` and ``res_f`` have
    the same strides, the error is written over ``res_f`` (which the caller then gives up): the
    same element-wise values in the same memory order, so the same float32 sums.

    Returns:
        ``(error, rate, stop, efficiency, deviation)`` with ``error = output - res_f`` (float32).
    """
    in_place = scratch is not None and output.stride() == res_f.stride() and output.dtype == res_f.dtype
    signal = None
    if in_place:
        squares = scratch.like(res_f)
        signal = torch.mul(res_f, res_f, out=squares).mean()  # x * x is what pow(2) computes
        error = torch.sub(output, res_f, out=res_f)
        noise = torch.mul(error, error, out=squares).mean()
    else:
        error = torch.add(output, res_f, alpha=-1)
        noise = error.pow(2).mean()
    if not noise.item() > 0:
        return error, rate, True, efficiency, deviation
    if signal is None:
        signal = res_f.pow(2).mean()
    eff = 1.25 * float(signal.div(noise).log10().item())
    dev = math.fabs(eff - efficiency)
    if not dev > 0:
        return error, rate, True, efficiency, deviation
    efficiency = (efficiency * 4 + eff) * 0.2
    deviation = (deviation * 4 + dev) * 0.2
    if efficiency > 4.0:
        rate = rate * 0.5
    if efficiency > 4.3 or (deviation / efficiency) < 0.05 or math.fabs(dev - deviation / dev) < 0.05:
        stop = True
    return error, rate, stop, efficiency, deviation


class Scratch:
    """One reused float buffer for temporaries of any shape (grown to the largest request)."""

    def __init__(self) -> None:
        self._flat = None  # type: Optional[torch.Tensor]
        self._views = {}  # type: Dict[torch.Size, torch.Tensor]   # shape -> view of _flat

    def like(self, t: torch.Tensor) -> torch.Tensor:
        """An uninitialized tensor with ``t``'s shape, strides and dtype: a view of the buffer
        when ``t`` is contiguous (the same view object for the same shape), else a new
        ``empty_like`` (its memory order must match)."""
        if not t.is_contiguous():
            return torch.empty_like(t)
        if self._flat is None or self._flat.numel() < t.numel() or self._flat.dtype != t.dtype:
            self._flat = self._views = None  # free the old buffer before taking the new one
            self._flat, self._views = torch.empty(t.numel(), dtype=t.dtype), {}
        view = self._views.get(t.shape)
        if view is None:
            view = self._views[t.shape] = self._flat[:t.numel()].view(t.shape)
        return view


def release_schedule(graph: SimGraph) -> List[List[Any]]:
    """For each step of ``graph.steps`` (in order), the fx nodes whose values no later step reads:
    the calibration loop drops them after that step, so a batch holds only live values. A value
    read by the graph's output, or by anything that is not a later step, is kept."""
    index = {fx_node: i for i, (fx_node, _) in enumerate(graph.steps)}
    free = [[] for _ in graph.steps]  # type: List[List[Any]]
    for i, (fx_node, _) in enumerate(graph.steps):
        users = list(fx_node.users)
        if all(u in index for u in users):
            free[max([index[u] for u in users] + [i])].append(fx_node)
    return free


def in_place_plan(graph: SimGraph):
    """Which calibration values may be overwritten in place, as ``(fresh, relu_in_place)``.

    ``fresh``: the fx nodes of ``FRESH_OUTPUT_TYPES`` nodes, whose value is a new tensor (its
    quantization may overwrite it). ``relu_in_place``: ReLU fx node -> its input's fx node, for a
    ReLU whose input is such a value that no other node reads (the ReLU may overwrite it, and its
    result is then fresh too). ReLU in place and out of place give the same values.
    """
    fresh = set(n.fx_node for n in graph.nodes if n.op in FRESH_OUTPUT_TYPES and n.fx_node is not None)
    relu_in_place = {}  # type: Dict[Any, Any]
    for fx_node, node in graph.steps:
        if node is None or node.op != g.RELU or len(fx_node.all_input_nodes) != 1:
            continue
        src = fx_node.all_input_nodes[0]
        if src in fresh and len(src.users) == 1:
            relu_in_place[fx_node] = src
    return fresh | set(relu_in_place), relu_in_place


class Calibrator:
    """Runs calibration batches through a SimGraph and collects fix positions.

    Args:
        graph: the captured (and, with CLE, equalized) SimGraph.
        plan: its QuantPlan.
        bitwidth: bit width of every tensor (8 on the DPU).
        bias_correction: the ``include_bias_corr`` switch.
        max_fix_pos: the fix_pos cap for bit widths <= 8 (12).
    """

    def __init__(self, graph: SimGraph, plan: QuantPlan, bitwidth: int, bias_correction: bool,
                 max_fix_pos: int = fixpoint.MAX_FIX_POS_8BIT) -> None:
        self.graph = graph
        self.plan = plan
        self.bitwidth = bitwidth
        self.bias_correction = bias_correction
        self.max_fix_pos = max_fix_pos
        self.quantized = set(plan.output_order)
        self.history = {name: [] for name in plan.output_order}  # type: Dict[str, List[int]]
        self.param_fp = {}  # type: Dict[str, int]
        self.params = {n.name: ParamState() for n in graph.nodes if n.op in g.PARAM_TYPES}
        self.norm_params = {}  # type: Dict[str, Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]]
        self.batches = 0
        self._release = release_schedule(graph)
        self._scratch = Scratch()
        self._consts = [n for n in graph.nodes if n.op == g.CONST]
        self._fresh, self._relu_in_place = in_place_plan(graph)

    # -- one batch ---------------------------------------------------------------------------
    def step(self, *xs: torch.Tensor) -> Any:
        """Run one calibration batch (one float32 tensor per model input, not modified); returns
        the model output.

        Raises:
            QuantizationError: not one float32 tensor per model input, or a node fails (named).
        """
        inputs = self.graph.inputs
        check_batch(xs, len(inputs))
        env = {}  # type: Dict[Any, Any]
        with torch.no_grad():
            for node in self._consts:
                env[node] = self._const(node)
            feed = dict(zip(inputs, self.graph.own_inputs(xs)))  # an input the graph writes: a copy
            for (fx_node, node), done in zip(self.graph.steps, self._release):
                if node is None:
                    env[fx_node] = run_step(self.graph, fx_node, env)
                    for old in done:
                        del env[old]
                    continue
                if node.op == g.INPUT:
                    value, quantizable = feed[node], True
                elif node.op in g.PARAM_TYPES:
                    value, quantizable = self._param_node(node, env), True
                elif node.op in g.NORM_TYPES:
                    value, quantizable = self._norm_node(node, env), True
                elif fx_node in self._relu_in_place:  # over its input, which only it reads
                    value, quantizable = torch.relu_(env[self._relu_in_place[fx_node]]), True
                else:
                    value, quantizable = run_node(self.graph, node, env)
                if quantizable and node.name in self.quantized:
                    value = self._activation(node, value, fx_node in self._fresh)
                if node.op in g.BIAS_CORR_TYPES and self.bias_correction:
                    self._correct_bias(node, env, value)
                env[fx_node] = value
                value = None
                for old in done:  # values no later step reads: free them now
                    del env[old]
        self.batches += 1
        return map_arg(self.graph.output_node.args[0], lambda n: env[n])

    def _const(self, node: SimNode) -> Any:
        """A constant's value as the quantized graph uses it: quantized at its own fix_pos when it
        has an output entry (a float constant feeding a quantizable op), else the number."""
        if node.name not in self.quantized or node.shape_value:
            return node.value
        return float(self._activation(node, torch.tensor(float(node.value), dtype=torch.float32)))

    def _activation(self, node: SimNode, t: torch.Tensor, owned: bool = False) -> torch.Tensor:
        """``t`` fake-quantized at the mode of the node's history after this batch's fix_pos (``t`` itself when it
        adds nothing to the history); a node with several outputs quantizes its first (``fx.graph.first_output``).
        ``owned``: ``t`` is this step's own new tensor, nothing else reads it: quantized in place if contiguous."""
        if node.outputs > 1 and isinstance(t, tuple):
            return with_first_output(node, t, self._activation(node, first_output(node, t)))
        found = self._fix_pos_and_range(node, t)
        if found is None:
            return t
        hist = self.history[node.name]
        hist.append(found[0])
        fix_pos = fix_pos_search.modal_fix_pos(hist)
        if owned and t.dtype == torch.float32 and t.is_contiguous() and self.bitwidth <= 23:
            return fixpoint.fake_quant_(t, fix_pos, self.bitwidth,
                                        not fixpoint.codes_in_range(found[1], fix_pos, self.bitwidth))
        return fixpoint.fake_quant(t, fix_pos, self.bitwidth, "half_up")

    def _batch_fix_pos(self, node: SimNode, t: Any) -> Optional[int]:
        """This batch's capped fix_pos of activation ``t``; None when it adds nothing to the history
        (not a float tensor, empty, or holding NaN/Inf)."""
        found = self._fix_pos_and_range(node, t)
        return None if found is None else found[0]

    def _fix_pos_and_range(self, node: SimNode, t: Any):
        """``(fix_pos, (min, max))``: the batch's fix_pos, ``t``'s extremes; None: no float data, or quant_off."""
        if self.graph.quant_off or not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            return None
        mn, mx = torch.aminmax(t)
        min_max = (mn.item(), mx.item())
        if not (math.isfinite(min_max[0]) and math.isfinite(min_max[1])):  # NaN/Inf reach min/max
            return None
        scope = fix_pos_search.SCOPE_INPUT if node.op in g.INPUT_SCOPE_TYPES else fix_pos_search.SCOPE_DEFAULT
        fp = fix_pos_search.diffs_fix_pos(t, self.bitwidth, scope, "half_up", min_max)
        return fixpoint.cap_fix_pos(fp, self.bitwidth, self.max_fix_pos), min_max

    def _param_fix(self, name: str, t: torch.Tensor) -> torch.Tensor:
        fp = fix_pos_search.diffs_fix_pos(t, self.bitwidth, fix_pos_search.SCOPE_DEFAULT, "std_round")
        self.param_fp[name] = fixpoint.cap_fix_pos(fp, self.bitwidth, self.max_fix_pos)
        return fixpoint.fake_quant(t, self.param_fp[name], self.bitwidth, "std_round")

    def _param_node(self, node: SimNode, env: Dict[Any, Any]) -> torch.Tensor:
        state = self._param_state(node)
        x = env[node.fx_node.all_input_nodes[0]]
        return param_forward(self.graph, node, x, state.weight, state.bias)

    def _param_state(self, node: SimNode) -> ParamState:
        """The node's ParamState, its weight and bias quantized at the first call (from the weights alone)."""
        state = self.params[node.name]
        if state.weight is None:
            m = self.graph.module(node)  # its weight and bias never written: quantized copies are new tensors
            w, b = m.weight.detach(), None if m.bias is None else m.bias.detach()
            state.weight_float, state.bias_float = w, b
            if self.graph.runs_float(node):  # outside the quantized parts, or quant_off: float, as its module
                state.weight, state.bias = w, b
                return state
            state.weight = self._param_fix(node.param_names["weights"], w)
            if b is not None:
                state.bias = self._param_fix(node.param_names["bias"], b)
        return state

    def _norm_node(self, node: SimNode, env: Dict[Any, Any]) -> torch.Tensor:
        return norm_forward(self.graph, node, env[node.fx_node.all_input_nodes[0]], *self._norm_state(node))

    def _norm_state(self, node: SimNode) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """A layer norm's ``(weight, bias)``, quantized at its first call from the float tensors
        (diffs, std_round: nndct's calibration of every parameter), as its module does once."""
        pair = self.norm_params.get(node.name)
        if pair is None:
            floats = norm_float_params(self.graph, node)
            pair = self.norm_params[node.name] = tuple(
                None if t is None else self._param_fix(node.param_names[k], t)
                for k, t in zip(("weights", "bias"), floats))
        return pair

    def _correct_bias(self, node: SimNode, env: Dict[Any, Any], output: torch.Tensor) -> None:
        state = self.params[node.name]
        if state.stop:
            return
        x = env[node.fx_node.all_input_nodes[0]]
        state.bias, state.stop, state.efficiency, state.deviation = self._bias_update(node, x, output)

    def _bias_update(self, node: SimNode, x: torch.Tensor, output: torch.Tensor):
        """One bias-correction step of a node not yet stopped, on its input ``x`` and (quantized)
        ``output``: the new ``(bias, stop, efficiency, deviation)``; the state is not changed."""
        state = self.params[node.name]
        return bias_step(self.graph, node, x, output, state.weight_float, state.bias_float, state.bias,
                         state.efficiency, state.deviation, self._scratch)

    # -- results -----------------------------------------------------------------------------
    def fix_positions(self, change_concat_input_fix: bool = False, change_pool_input_fix: bool = False):
        """Final fix positions after the export-time adjustments (docs/arithmetic.md#export-time-adjustments).

        Returns:
            ``(param_fp, output_fp, notes)``: nndct param name -> fix_pos (None for the
            ``plan.unquantized_params``), node name (no class prefix) -> fix_pos, both in
            quant_info order, and the adjustment messages.

        Raises:
            QuantizationError: no batch was run, or a tensor never got a fix_pos (it held NaN/Inf
                in every batch); the message names it.
        """
        if self.batches == 0:
            raise QuantizationError("calibration saw 0 batches: run at least one calibration "
                                    "batch before exporting the quantization config")
        if self.graph.quant_off:  # every entry null, no adjustment (organize_quant_pos returns at once)
            return dict.fromkeys(self.plan.param_order), dict.fromkeys(self.plan.output_order), []
        missing = [n for n in self.plan.output_order if not self.history[n] and n not in self.plan.may_stay_null] + \
            [p for p in self.plan.param_order if p not in self.param_fp and p not in self.plan.unquantized_params]
        if missing:
            raise QuantizationError("calibration gave no fix_pos to %s (every batch empty, or non-finite "
                                    "values in every batch?); check the calibration data" % ", ".join(missing))
        param_fp = {p: self.param_fp.get(p) for p in self.plan.param_order}
        output_fp = {n: fix_pos_search.modal_fix_pos(self.history[n]) if self.history[n] else None
                     for n in self.plan.output_order}
        notes = adjust_fix_pos(self.plan, param_fp, output_fp, change_concat_input_fix, change_pool_input_fix)
        return param_fp, output_fp, notes

    def bias_corrections(self) -> Dict[str, Optional[torch.Tensor]]:
        """``bias_corr.pth`` content: ``"<Class>::<node>"`` -> ``b_f - b_final`` (None without bias)."""
        return bias_corr_table(self.graph, {name: (state.bias_float, state.bias) for name, state in self.params.items()})


def bias_step(graph: SimGraph, node: SimNode, x: torch.Tensor, output: torch.Tensor, weight_ref: torch.Tensor,
              bias_ref: Optional[torch.Tensor], bias: Optional[torch.Tensor], efficiency: float, deviation: float,
              scratch: Optional[Scratch] = None):
    """One bias-correction step (``nn/modules/conv.py``, ``linear.py``) of a node not yet stopped: the
    quantized ``output`` against ``op(x, weight_ref, bias_ref)``, then ``eval_qnoise``; unless it says
    stop, ``bias`` moves by ``rate * mean(error)`` per output channel.

    Returns:
        ``(bias, stop, efficiency, deviation)``; ``bias`` is a new tensor (or the one given, on stop).
    """
    res_f = float_reference(graph, node, x, weight_ref, bias_ref)
    error, rate, stop, efficiency, deviation = eval_qnoise(output, res_f, efficiency, deviation, BIAS_CORR_RATE,
                                                           False, scratch)
    del res_f  # with the scratch, its buffer now holds the error
    if not stop and bias is not None:
        form = g.layer_form(node.op)
        dims = list(form.bias_dims) if form is not None else \
            [k for k in range(error.dim() - 1)] if node.op == g.DENSE else [0, 2, 3]
        bias = torch.sub(bias, error.mean(dim=dims), alpha=rate)
    return bias, stop, efficiency, deviation


def bias_corr_table(graph: SimGraph, biases: Dict[str, Any]) -> Dict[str, Optional[torch.Tensor]]:
    """``bias_corr.pth`` content from node name -> ``(reference bias, final bias)``: for every
    conv/linear node, ``"<Class>::<node>"`` -> ``reference - final`` (None when either is None)."""
    corr = {}  # type: Dict[str, Optional[torch.Tensor]]
    for node in graph.nodes:
        if node.op in g.BIAS_CORR_TYPES:
            ref, final = biases[node.name]
            corr[graph.full_name(node)] = None if ref is None or final is None else torch.sub(ref, final)
    return corr
