"""The rewritten graph run on the capture's example inputs (``capture``): its GraphModule and each
node's output shape, made on first use; ``node_error`` names the model operation that failed."""
from typing import Any, Dict, Optional, Tuple

import torch
import torch.fx
from torch import nn

from ..errors import QuantizationError


class _ShapeRecorder(torch.fx.Interpreter):
    """Runs the graph once and records each node's output shape (a tuple for a tensor, None for
    anything else); failures name the node (``node_error``). A plain Interpreter, not torch's
    ``ShapeProp``: that one imports ``torch.fx.experimental.symbolic_shapes`` (sympy), about 0.4 s."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.shapes = {}  # type: Dict[torch.fx.Node, Any]

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            result = super().run_node(n)
        except Exception as e:  # any error of the model's own code, as torch 2's ShapeProp did
            raise node_error(n, e) from e
        self.shapes[n] = tuple(result.shape) if isinstance(result, torch.Tensor) else None
        return result


def node_error(fx_node: torch.fx.Node, e: Exception) -> QuantizationError:
    """A QuantizationError naming the model operation that raised ``e`` (a ``view`` of a
    non-contiguous tensor gets the fix: the float model fails there too)."""
    what = fx_node.target if isinstance(fx_node.target, str) else getattr(fx_node.target, "__name__", fx_node.target)
    msg = "node %r (%s %s) failed: %s" % (fx_node.name, fx_node.op, what, e)
    if "view size is not compatible" in str(e):
        msg += (". The float model fails here too (plain PyTorch refuses .view() on a non-contiguous "
                "tensor, e.g. after permute/transpose, and so does the real quantizer when it runs "
                "the float model): use .reshape(...) instead of .view(...) in the model's forward")
    return QuantizationError(msg)


class ExampleRun:
    """The rewritten graph's GraphModule and its output shapes on the example, each made on
    first use: the GraphModule's code generation costs as much as a calibration batch of a small
    model, and the shapes one float forward; calibration needs neither, test mode both, and the
    capture the rank of a tensor whose torch.Size is sliced or used whole."""

    def __init__(self, root: nn.Module, fx_graph: torch.fx.Graph, example: Tuple[torch.Tensor, ...]) -> None:
        self.root = root
        self.fx_graph = fx_graph
        self._example = example
        self._gm = None  # type: Optional[torch.fx.GraphModule]
        self._shapes = None  # type: Optional[Dict[torch.fx.Node, Any]]

    @property
    def gm(self) -> torch.fx.GraphModule:
        if self._gm is None:
            # holds the modules the rewritten graph calls (not the folded BatchNorms), as symbolic_trace would
            self._gm = torch.fx.GraphModule(self.root, self.fx_graph, class_name=type(self.root).__name__)
        return self._gm

    @property
    def shapes(self) -> Dict[torch.fx.Node, Any]:
        if self._shapes is None:
            recorder = _ShapeRecorder(self.gm)
            with torch.no_grad():
                recorder.run(*self._example)
            self._shapes = {node: recorder.shapes.get(node) for node in self.fx_graph.nodes}
        return self._shapes

    def rank(self, fx_node: torch.fx.Node) -> int:
        """The rank of the tensor ``fx_node`` computes on the example.

        Raises:
            QuantizationError: ``fx_node`` computes no tensor (named)."""
        shape = self.shapes[fx_node]
        if shape is None:
            raise QuantizationError("node %r: its .shape/.size() is read, but it computes no tensor" % fx_node.name)
        return len(shape)
