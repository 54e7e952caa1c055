"""Forwards of a SimGraph with frozen fix positions (quant) or none (float): what fast finetune runs.

The real quantizer's fast finetune (``qproc/adaquant.py``, docs/finetune.md) runs two models:

- the quant model in test mode (``quant_mode == 2``): every tensor with a fix position is rounded
  at that fixed position (activations half_up), the conv/linear parameters are used as they are
  (the caller keeps them on their grid), nothing is searched or corrected;
- its float clone (``ModuleHooker.clone_quant_module`` with ``quantizer=None``): nndct's
  *transformed* float graph: BN folded, CLE applied, ReLU6 replaced, the average-pool DPU factor
  and the LeakyReLU slope kept, hardsigmoid/hardswish as ``relu6(x + 3) / 6`` (``hardsigmoid.py``,
  ``hardswish.py`` with ``quant_mode is None``), constants unrounded.

:class:`FrozenForward` runs either, batch by batch, and can stop after a node (``StopForward`` in
nndct) and keep chosen node values. Nothing the caller owns is written.
"""
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch
from torch.fx.node import map_arg

from ... import fixpoint
from ... import ops as g
from ...fx.graph import SimGraph, SimNode, first_output, with_first_output
from .calib import release_schedule
from .ops import norm_float_params, norm_forward, param_forward, run_node, run_step

INPUT_OF = "<input of>"
OUTPUT = "<output>"
Params = Dict[str, Tuple[torch.Tensor, Optional[torch.Tensor]]]


def float_params(graph: SimGraph) -> Params:
    """node name -> (weight, bias) of every parameter node: the transformed float graph's own
    tensors (BN folded, CLE applied), detached; read only."""
    out = {}  # type: Params
    for node in graph.nodes:
        if node.op in g.PARAM_TYPES:
            m = graph.module(node)
            out[node.name] = (m.weight.detach(), None if m.bias is None else m.bias.detach())
    return out


class FrozenForward:
    """One forward mode of a SimGraph.

    Args:
        graph: the captured (and, with CLE, equalized) SimGraph; not modified.
        params: node name -> (weight, bias) used by each parameter node (read at every call, so
            the caller may change the tensors between calls).
        out_fp: node name -> activation fix_pos (quant mode), or None for the float mode.
        bitwidth: bit width of every tensor.
        param_node: ``(node, input) -> output`` replacing the parameter nodes' forward (the
            re-calibration's bias correction), or None.
        norm_params: layer norm node name -> (weight, bias) it uses (the quant model's rounded
            ones), or None: each layer norm uses the graph's float tensors (the float clone).
    """

    def __init__(self, graph: SimGraph, params: Params, out_fp: Optional[Dict[str, int]], bitwidth: int,
                 param_node: Optional[Callable[[SimNode, torch.Tensor], torch.Tensor]] = None,
                 norm_params: Optional[Params] = None) -> None:
        self.graph = graph
        self.norm_params = norm_params
        self.param_node = param_node
        self.params = params
        self.out_fp = out_fp
        self.bitwidth = bitwidth
        self._release = release_schedule(graph)
        self._consts = {}  # type: Dict[Any, Any]
        for node in graph.nodes:
            if node.op == g.CONST:
                value = node.value
                if out_fp is not None and node.name in out_fp and not node.shape_value:
                    value = float(fixpoint.fake_quant(torch.tensor(float(value), dtype=torch.float32),
                                                      out_fp[node.name], bitwidth, "half_up"))
                self._consts[node] = value

    def quantize(self, node: SimNode, value: Any) -> Any:
        """``value`` rounded at ``node``'s frozen fix_pos (half_up), or as it is (float mode, no
        entry, not a float tensor); of a node with several outputs, its first (``fx.graph.first_output``)."""
        if self.out_fp is None or node.name not in self.out_fp:
            return value
        first = first_output(node, value)
        if not isinstance(first, torch.Tensor) or not first.is_floating_point():
            return value
        return with_first_output(node, value, fixpoint.fake_quant(first, self.out_fp[node.name], self.bitwidth,
                                                                  "half_up"))

    def run(self, xs: Tuple[torch.Tensor, ...], stop: Optional[str] = None,
            keep: Iterable[str] = (), input_of: Optional[str] = None, output: bool = False) -> Dict[str, Any]:
        """Run one batch (one float32 tensor per model input, not modified).

        Args:
            xs: the batch.
            stop: a node name: the forward ends right after that node's value is made.
            keep: node names whose values are returned.
            input_of: a node name: the forward ends just before that node runs, returning its
                (first) input under the key ``INPUT_OF``.
            output: also return the model's output under the key ``OUTPUT``.

        Returns:
            node name -> value (as the node's module returns it: rounded when it has a fix_pos in
            quant mode) for every name of ``keep`` (and ``stop``) reached.
        """
        keep = set(keep)
        if stop is not None:
            keep.add(stop)
        out = {}  # type: Dict[str, Any]
        env = dict(self._consts)  # type: Dict[Any, Any]
        feed = dict(zip(self.graph.inputs, self.graph.own_inputs(xs)))  # an input it writes: a copy
        with torch.no_grad():
            for (fx_node, node), done in zip(self.graph.steps, self._release):
                if node is None:
                    env[fx_node] = run_step(self.graph, fx_node, env)
                else:
                    if node.name == input_of:
                        out[INPUT_OF] = env[fx_node.all_input_nodes[0]]
                        return out
                    value = self._value(node, fx_node, env, feed)
                    env[fx_node] = value
                    if node.name in keep:
                        out[node.name] = value
                    if node.name == stop:
                        return out
                for old in done:
                    del env[old]
            if output:
                out[OUTPUT] = map_arg(self.graph.output_node.args[0], env.__getitem__)
        return out

    def _value(self, node: SimNode, fx_node: Any, env: Dict[Any, Any], feed: Dict[SimNode, torch.Tensor]) -> Any:
        if node.op == g.INPUT:
            return self.quantize(node, feed[node])
        if node.op in g.PARAM_TYPES:
            if self.param_node is not None:
                return self.param_node(node, env[fx_node.all_input_nodes[0]])
            w, b = self.params[node.name]
            return self.quantize(node, param_forward(self.graph, node, env[fx_node.all_input_nodes[0]], w, b))
        if node.op in g.NORM_TYPES:
            pair = norm_float_params(self.graph, node) if self.norm_params is None else self.norm_params[node.name]
            return self.quantize(node, norm_forward(self.graph, node, env[fx_node.all_input_nodes[0]], *pair))
        if self.out_fp is None and node.op in (g.HSWISH, g.HSIGMOID):
            return float_hard_act(node.op, env[fx_node.all_input_nodes[0]])
        value, quantizable = run_node(self.graph, node, env)
        return self.quantize(node, value) if quantizable else value


def float_hard_act(op: str, x: torch.Tensor) -> torch.Tensor:
    """nndct's float-mode hardsigmoid ``relu6(x + 3) / 6`` and hardswish ``x * that``."""
    s = torch.div(torch.nn.functional.relu6(torch.add(x, 3.0)), 6.0)
    return s if op == g.HSIGMOID else torch.mul(x, s)
