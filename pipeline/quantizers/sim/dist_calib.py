"""Calibration split over the ranks of a torch.distributed run, bit-identical to one process.

One process calibrates batch by batch (``calib.Calibrator``), and batch ``i`` depends on the
batches before it: each activation is fake-quantized with the mode of its fix_pos history *so far*
(so a later layer's input, hence its statistics, depends on earlier batches), and with bias
correction each conv/linear bias moves after every batch until its stop rule fires. So the ranks
cannot calibrate their shards independently and merge: the result would differ.

``DistributedCalibrator`` runs the batches in rounds: round ``k`` holds global batches
``k * world .. k * world + world - 1``, one per rank (the shard rule of ``pipeline.distributed``),
and the ranks walk the graph together, node by node:

- an activation: each rank computes its batch's value and fix_pos (the costly part, in
  parallel), the fix_pos values are gathered (one small all_gather per node), and each rank
  fake-quantizes with the mode of the global history up to and including its own batch; every rank
  appends the round's fix_pos values in batch order, so every rank holds one process's history;
- a conv/linear whose bias is still being corrected: the bias used by batch ``i`` is the one batch
  ``i - 1`` left, so the ranks of the round take turns in batch order, each broadcasting its
  fix_pos and the new bias state (bias tensor, stop flag, efficiency, deviation: exact bits);
  once the stop rule fires (usually after a few batches) the node runs in parallel again;
- weights and biases are quantized from the weights alone, identically on every rank.

At the end every rank holds the same history, weights and bias state as one process, so
``fix_positions()`` and ``bias_corrections()`` give the same bits on every rank (rank 0 writes).
A rank with no batch left in a round takes part with None; ``finish()`` runs such rounds until
every rank is done, so shards of unequal length (a batch count not divisible by the ranks) work.
"""
from typing import Any, Dict, List, Optional

import torch
from torch.fx.node import map_arg

from ... import ops as g
from ...fx.graph import SimGraph, first_output, with_first_output
from ... import fixpoint
from .. import fix_pos_search
from .calib import Calibrator, check_batch
from .ops import norm_forward, param_forward, run_node, run_step


class DistributedCalibrator(Calibrator):
    """A Calibrator whose ``step`` is one round of a distributed calibration.

    Args (besides Calibrator's): comm: a ``pipeline.distributed.Comm``.

    Every rank calls ``step`` for each of its batches (its shard, in order), then ``finish()``;
    both are collectives. ``batches`` counts the batches of every rank.

    Raises:
        DistributedError: a peer failed or timed out (the message names it).
        QuantizationError: as Calibrator.step.
    """

    def __init__(self, graph: SimGraph, plan: Any, bitwidth: int, bias_correction: bool, comm: Any,
                 max_fix_pos: int = fixpoint.MAX_FIX_POS_8BIT) -> None:
        super().__init__(graph, plan, bitwidth, bias_correction, max_fix_pos)
        self.comm = comm
        self.rounds = 0
        self._finished = False

    def step(self, *xs: torch.Tensor) -> Any:
        """Run this rank's next batch (one float32 tensor per model input, not modified) as one
        round; returns its output.

        Raises:
            QuantizationError: not one float32 tensor per model input (before any collective).
        """
        if self._finished:
            raise RuntimeError("DistributedCalibrator.step after finish()")
        check_batch(xs, len(self.graph.inputs))
        return self._round(xs)[1]

    def finish(self) -> None:
        """Take part in rounds without a batch until no rank has one left (a collective)."""
        while not self._finished:
            self._finished = not self._round(None)[0]

    def _round(self, xs: Optional[tuple]):
        """One round; returns (whether any rank had a batch, this rank's output or None).

        Every rank makes the same collectives in the same order: which ones depends only on the
        graph, the replicated bias state and who has a batch, never on this rank's values.
        """
        comm = self.comm
        comm.context = "calibration round %d" % (self.rounds + 1)
        present = comm.gather_ints(None if xs is None else 1)
        active = [r for r, p in enumerate(present) if p is not None]
        if not active:
            return False, None
        mine = xs is not None
        feed = dict(zip(self.graph.inputs, self.graph.own_inputs(xs or ())))  # an input it writes: a copy
        env = {}  # type: Dict[Any, Any]
        with torch.no_grad():
            for node in self.graph.nodes:
                if node.op == g.CONST:  # the same fix_pos in every batch: no collective needed
                    env[node] = self._const_round(node, len(active))
            for fx_node, node in self.graph.steps:
                if node is None:
                    env[fx_node] = run_step(self.graph, fx_node, env) if mine else None
                    continue
                comm.context = "calibration round %d, node %s" % (self.rounds + 1, node.name)
                value, quantizable = None, mine
                if node.op in g.PARAM_TYPES:
                    state = self._param_state(node)
                    if self.bias_correction and node.op in g.BIAS_CORR_TYPES and state.bias is not None \
                            and not state.stop:
                        env[fx_node] = self._chain(node, env, active)
                        continue
                    if mine:
                        value = param_forward(self.graph, node, env[fx_node.all_input_nodes[0]],
                                              state.weight, state.bias)
                elif node.op == g.INPUT:
                    value = feed.get(node)
                elif node.op in g.NORM_TYPES:
                    pair = self._norm_state(node)  # on every rank: from the weights alone, as a conv's
                    if mine:
                        value = norm_forward(self.graph, node, env[fx_node.all_input_nodes[0]], *pair)
                elif mine:
                    value, quantizable = run_node(self.graph, node, env)
                if node.name in self.quantized:  # a collective on every rank, quantizable or not
                    value = self._gathered_activation(node, value, quantizable, active)
                env[fx_node] = value
        self.batches += len(active)
        self.rounds += 1
        return True, (map_arg(self.graph.output_node.args[0], lambda n: env[n]) if mine else None)

    def _const_round(self, node: Any, batches: int) -> Any:
        """A constant in a round of ``batches`` batches: its history grows as in one process."""
        if node.name not in self.quantized or node.shape_value:
            return node.value
        t = torch.tensor(float(node.value), dtype=torch.float32)
        fp = self._batch_fix_pos(node, t)
        hist = self.history[node.name]
        hist.extend([fp] * batches)
        return float(fixpoint.fake_quant(t, fix_pos_search.modal_fix_pos(hist), self.bitwidth, "half_up"))

    def _gathered_activation(self, node: Any, t: Any, mine: bool, active: List[int]) -> Any:
        """Gather this node's per-batch fix_pos, extend the history in batch order, fake-quantize
        this rank's value (``mine``: it has one to quantize) with the mode of the history up to its batch (the
        first output of a node with several, ``fx.graph.first_output``)."""
        fp = self._batch_fix_pos(node, first_output(node, t)) if mine else None
        fps = self.comm.gather_ints(fp)
        hist = self.history[node.name]
        out = t
        for r in active:
            if fps[r] is not None:
                hist.append(fps[r])
            if r == self.comm.rank and fp is not None:
                out = with_first_output(node, t, fixpoint.fake_quant(
                    first_output(node, t), fix_pos_search.modal_fix_pos(hist), self.bitwidth, "half_up"))
        return out

    def _chain(self, node: Any, env: Dict[Any, Any], active: List[int]) -> Any:
        """A conv/linear under bias correction: the active ranks in batch order, one at a time."""
        state = self.params[node.name]
        quantized = node.name in self.quantized
        hist = self.history.get(node.name, [])  # appended to only when quantized
        value = None
        for r in active:
            if r == self.comm.rank:
                x = env[node.fx_node.all_input_nodes[0]]
                out = param_forward(self.graph, node, x, state.weight, state.bias)
                fp = self._batch_fix_pos(node, out) if quantized else None
                if fp is not None:
                    out = fixpoint.fake_quant(out, fix_pos_search.modal_fix_pos(hist + [fp]), self.bitwidth, "half_up")
                bias, stop, eff, dev = self._bias_update(node, x, out)
                self.comm.broadcast((fp, bias, stop, eff, dev), r)
                value = out
            else:
                fp, bias, stop, eff, dev = self.comm.broadcast(None, r)
            if fp is not None:
                hist.append(fp)
            state.bias, state.stop, state.efficiency, state.deviation = bias, stop, eff, dev
            if state.stop:  # the rest of the round runs with the final bias, in parallel
                rest = active[active.index(r) + 1:]
                if rest:
                    tail = self._parallel_after_stop(node, env, rest, quantized)
                    value = tail if self.comm.rank in rest else value
                break
        return value

    def _parallel_after_stop(self, node: Any, env: Dict[Any, Any], rest: List[int], quantized: bool) -> Any:
        state = self.params[node.name]
        mine = self.comm.rank in rest
        value = None
        if mine:
            value = param_forward(self.graph, node, env[node.fx_node.all_input_nodes[0]], state.weight, state.bias)
        if quantized:
            value = self._gathered_activation(node, value, mine, rest)
        return value
