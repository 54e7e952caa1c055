"""Constant folding: the tensors of the lowered model that no input value reaches.

Torchvision's Swin computes its relative position bias (a table gathered by an index buffer) and
its shifted-window attention mask (``x.new_zeros``, nine item assignments, ``!=``/``==``,
``masked_fill``) from parameters, buffers and sizes only; the scale ``(C // heads) ** -0.5`` is a
number made a 0-dim tensor. Their values are the same for every input, so the exporter writes
each such tensor, where an input-dependent node reads it, as an initializer holding the value torch
computed (and quantized) on the example: exact by construction, with no ONNX op for a gather by
an int64 buffer, a boolean mask or an in-place fill.

A node is input-independent when none of its inputs is, counting as independent: ``get_attr``
nodes, Python values that the batch size does not change (sizes, numbers), and the ``self`` of
``new_zeros``/``new_ones``/``new_full``/``new_empty`` (only its dtype and device are read).
"""
from typing import Any, Dict, Sequence, Set, Tuple

import torch
import torch.fx

# methods whose result reads only the dtype and device of ``self``
_NEW_METHODS = ("new_zeros", "new_ones", "new_full", "new_empty")


def independent_nodes(gm: torch.fx.GraphModule, meta1: Dict[str, Tuple[Any, ...]],
                      meta2: Dict[str, Tuple[Any, ...]]) -> Set[str]:
    """Names of the nodes whose value no model input reaches (module docstring); ``meta1``/``meta2``
    are ``builder.record``'s descriptions on the batch-1 and batch-2 examples."""
    out = set()  # type: Set[str]
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "get_attr" or (meta1.get(node.name, ("",))[0] == "value"
                                     and meta1[node.name] == meta2.get(node.name)):
            out.add(node.name)
            continue
        inputs = node.all_input_nodes
        if node.op == "call_method" and node.target in _NEW_METHODS:
            inputs = inputs[1:]
        if all(i.name in out for i in inputs):
            out.add(node.name)
    return out


class _Snapshots(torch.fx.Interpreter):
    """Runs the graph; keeps a copy of each independent tensor as the first dependent node reads
    it (after any in-place change made before that read)."""

    def __init__(self, gm: torch.fx.GraphModule, independent: Set[str]) -> None:
        super().__init__(gm)
        self.independent = independent
        self.values = {}  # type: Dict[str, torch.Tensor]

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.name not in self.independent:
            for i in n.all_input_nodes:
                v = self.env.get(i)
                if i.name in self.independent and isinstance(v, torch.Tensor) and i.name not in self.values:
                    self.values[i.name] = v.detach().clone()
        return super().run_node(n)


def folded_values(gm: torch.fx.GraphModule, xs: Sequence[torch.Tensor], independent: Set[str]) -> Dict[str, torch.Tensor]:
    """Node name -> the tensor (a copy) an input-dependent node reads from an independent node."""
    runner = _Snapshots(gm, independent)
    with torch.no_grad():
        runner.run(*xs)
    return runner.values
