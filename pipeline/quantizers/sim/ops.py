"""Float semantics of the nodes as the real quantizer's modules compute them (shared by calib and test).

``pytorch_nndct/nn/modules`` replaces some operators by DPU approximations
(docs/arithmetic.md#leakyrelu-slope, #hardsigmoid-and-hardswish, #average-pool-correction); each is
its op record's simulation piece (``OpRecord.sim``, ``pipeline/ops/sim_support.py``), which
:func:`run_node` calls with its context (:class:`NodeRun`):

- LeakyReLU: slope forced to 26/256 = 0.1015625 (``leaky_relu.py``, option
  ``leaky_relu_approximate``).
- AvgPool2d and AdaptiveAvgPool2d: output multiplied by the DPU factor of
  :func:`pipeline.ops.pool.avgpool_dpu_scale` (``avgpool.py``,
  ``adaptive_avg_pool.py``). An adaptive pool whose input size is not a multiple of its output
  size is left unscaled and unquantized: ``deephi_AdaptiveAvgPool2d.forward`` warns "is not
  quantized" and returns the plain average, so its output entry is ``[[8, null]]`` and a conv or
  Linear after it reads float values (docs/arithmetic.md#adaptive-average-pool-that-does-not-divide).
- Hardsigmoid: ``relu6(x + 3) * 2731/16384``; Hardswish: ``x * Q7(relu6(x + 3) * 2731/16384)``
  with ``Q7`` a half_up fake quantization at fix_pos 7, 8 bits (``hardsigmoid.py``,
  ``hardswish.py``).

A layer norm runs ``F.layer_norm`` with its weight and bias quantized as parameters
(``layer_norm``; ``deephi_LayerNorm`` in ``layernorm.py``), a PReLU ``F.prelu`` with its slopes
quantized as a parameter (``norm_forward``; ``deephi_PReLU`` in ``prelu.py``).

Every other node runs its own torch operator, on the values the quantized graph gives it: a float
operator (``pipeline.ops``, kind "float": sigmoid, tanh, GELU in its erf form, SiLU,
softmax, ``mean`` without any DPU factor, clamp, ``-``, ``/``, any ``aten::*`` op) computes
``f(x_q)`` in float32 exactly as torch does, and is quantized afterwards only where it has an
output entry (docs/arithmetic.md#float-operators). A Python-number operand of
arithmetic is replaced by its ``nndct_const`` node's value (quantized at its own fix_pos when it
has one: 1.3 -> 1.296875 at fix_pos 6). In-place activations run out of place here, so the
caller's tensors are never written.
"""
from typing import Any, Dict, Optional, Tuple

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.node import map_arg

from ...errors import QuantizationError
from ... import ops as g
from ...fx.graph import SimGraph, SimNode
from ...ops.pool.sim import adaptive_output_size, adaptive_scale, tiled_max_pool  # noqa: F401 (tiled_max_pool: tests)
from ...ops.prelu import simulate as simulate_prelu
from ...fx.example_run import node_error
from ...fx.in_place import OUT_OF_PLACE, OUT_OF_PLACE_METHODS  # nndct runs x += y and x.add_(y) out of place


def adaptive_unquantized(graph: SimGraph, node: SimNode) -> bool:
    """Whether an adaptive average pool node is one nndct leaves unscaled and unquantized: an output
    size that does not divide the input size on the example (``deephi_AdaptiveAvgPool2d.forward``,
    ``pytorch_nndct/nn/modules/adaptive_avg_pool.py``: ``input_size[i] % output_size[i]``; 7x7 of
    a 2x2 map, 3x3 of 8x8). A global pool (every output size 1 or None) always divides and needs no
    example shapes (they cost one float forward).

    Args:
        graph: the SimGraph; ``node``: one of its ``nndct_adaptive_avg_pool2d`` nodes (NCHW input).

    Returns:
        True when its output has no fix position (quant_info ``[[bitwidth, null]]``).
    """
    if adaptive_global(graph, node):
        return False
    out = adaptive_output_size(graph.module(node) if node.fx_node.op == "call_module" else None, node.fx_node)
    shape = graph.example_shapes[node.fx_node.all_input_nodes[0]]
    return adaptive_scale((int(shape[-2]), int(shape[-1])), out) is None


def adaptive_global(graph: SimGraph, node: SimNode) -> bool:
    """Whether an adaptive average pool node is global (every output size 1 or None): it divides any input."""
    out = adaptive_output_size(graph.module(node) if node.fx_node.op == "call_module" else None, node.fx_node)
    return all(s is None or int(s) == 1 for s in ((out, out) if isinstance(out, int) else tuple(out)))


def run_fx(root: nn.Module, fx_node: torch.fx.Node, env: Dict[Any, Any],
           module: Optional[nn.Module] = None, consts: Optional[Dict[int, Any]] = None) -> Any:
    """Run one fx node with its arguments looked up in ``env``; in-place activations out of place.

    ``root``: the module the node's targets are named in (``SimGraph.root``). ``module``: the submodule
    a call_module node runs, when the caller has it (else looked up in ``root``).
    ``consts``: positional argument index -> value replacing that (Python number) argument: the
    constant as the quantized graph uses it.

    Raises:
        QuantizationError: the node fails; the message names it (and, for a ``view`` of a
            non-contiguous tensor, says that the float model fails there too and to use reshape).
    """
    args = map_arg(fx_node.args, env.__getitem__)
    if consts:
        args = tuple(consts[i] if i in consts else a for i, a in enumerate(args))
    kwargs = dict(map_arg(fx_node.kwargs, env.__getitem__))
    try:
        if fx_node.op == "call_module":
            m = module if module is not None else root.get_submodule(fx_node.target)
            if isinstance(m, (nn.ReLU, nn.Hardtanh)) and getattr(m, "inplace", False):
                return F.relu(args[0]) if isinstance(m, nn.ReLU) else F.hardtanh(args[0], m.min_val, m.max_val)
            return m(*args, **kwargs)
        if fx_node.op == "call_function":
            if "inplace" in kwargs:
                kwargs["inplace"] = False
            # nndct runs ``x += y`` as torch.add (out of place)
            target = OUT_OF_PLACE.get(fx_node.target, fx_node.target)
            return target(*args, **kwargs)
        if fx_node.op == "call_method":
            return getattr(args[0], OUT_OF_PLACE_METHODS.get(fx_node.target, fx_node.target))(*args[1:], **kwargs)
        if fx_node.op == "get_attr":
            return getattr_path(root, fx_node.target)
    except RuntimeError as e:
        raise node_error(fx_node, e) from e
    raise ValueError("run_fx: unexpected fx node %s (%s)" % (fx_node.name, fx_node.op))


def getattr_path(root: nn.Module, path: str) -> Any:
    """The attribute ``a.b.c`` of ``root`` (a get_attr node's target)."""
    value = root
    for part in path.split("."):
        value = getattr(value, part)
    return value


def run_step(graph: SimGraph, fx_node: torch.fx.Node, env: Dict[Any, Any]) -> Any:
    """A helper step of the graph (``x.shape``, a chunk's tuple, a get_attr): the fx node as is."""
    return run_fx(graph.root, fx_node, env)


class NodeRun:
    """The context of one node's simulation piece (``ops/sim_support.py``: ``run(s)``), given at call time."""

    def __init__(self, graph: SimGraph, node: SimNode, env: Dict[torch.fx.Node, Any]) -> None:
        self.graph, self.node, self.env = graph, node, env
        self.fx_node = node.fx_node
        self.module = graph.module(node) if self.fx_node.op == "call_module" else None

    @property
    def x(self) -> Any:
        """The value of the node's first input."""
        return self.env[self.fx_node.all_input_nodes[0]]

    def torch(self) -> Any:
        """torch's own call on the node's inputs, a number operand replaced by its const node's value."""
        node = self.node
        consts = {i: self.env[c] for i, c in node.const_args.items()} if node.const_args else None
        return run_fx(self.graph.root, self.fx_node, self.env, self.module, consts)


def run_node(graph: SimGraph, node: SimNode, env: Dict[torch.fx.Node, Any]) -> Tuple[Any, bool]:
    """Float output of a non-parameter node with nndct's operator semantics.

    Returns:
        ``(value, quantizable)``: ``quantizable`` is False only for an adaptive average pool that
        the real quantizer leaves unquantized (input size not a multiple of the output size).
    """
    s = NodeRun(graph, node, env)
    form = g.sim_form(node.op)
    if form is not None and graph.runs_float(node) and not form.exact:  # float: torch's own call
        form = None
    if form is not None:
        done = form.run(s)
        if done is not None:
            return done
    out = s.torch()
    if isinstance(out, float) and not node.shape_value:
        # a float computed from sizes (``(C // heads) ** -0.5``): torch.jit traces a 0-dim float32
        # tensor, which nndct quantizes like any activation
        return torch.tensor(out, dtype=torch.float32), True
    return out, True


def norm_float_params(graph: SimGraph, node: SimNode) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """A layer norm's float ``(weight, bias)`` (None where it has none): the working copy's own
    tensors, detached; read only."""
    return tuple(None if k not in node.param_names else graph.parameter(node.param_names[k]).detach()
                 for k in ("weights", "bias"))


def norm_shape_eps(graph: SimGraph, node: SimNode) -> Tuple[Tuple[int, ...], float]:
    """A layer norm's ``(normalized_shape, eps)``: the module's, or ``F.layer_norm``'s arguments
    (the shape from the weight when it has one, which must match it).

    Raises:
        QuantizationError: ``F.layer_norm`` without a weight whose normalized_shape is computed in
            forward() (the node is named).
    """
    fx_node = node.fx_node
    if fx_node.op == "call_module":
        m = graph.module(node)
        return tuple(int(d) for d in m.normalized_shape), float(m.eps)
    args, kwargs = fx_node.args, fx_node.kwargs
    shape = args[1] if len(args) > 1 else kwargs.get("normalized_shape")
    eps = args[4] if len(args) > 4 else kwargs.get("eps", 1e-5)
    if "weights" in node.param_names:
        shape = tuple(graph.parameter(node.param_names["weights"]).shape)
    elif isinstance(shape, int):
        shape = (shape,)
    if not (isinstance(shape, (tuple, list, torch.Size)) and all(isinstance(d, int) for d in shape)) \
            or not isinstance(eps, (int, float)):
        raise QuantizationError("node %r (layer_norm): its normalized_shape or eps is computed in forward(); "
                                "give them as numbers (or use nn.LayerNorm)" % fx_node.name)
    return tuple(int(d) for d in shape), float(eps)


def layer_norm(graph: SimGraph, node: SimNode, x: torch.Tensor, weight: Optional[torch.Tensor],
               bias: Optional[torch.Tensor]) -> torch.Tensor:
    """A layer norm node with the given (quantized) weight and bias, as nndct's LayerNorm module
    computes it in its default mode: ``F.layer_norm`` on its (already quantized) input
    (``deephi_LayerNorm.forward``, ``pytorch_nndct/nn/modules/layernorm.py``). A new float32 tensor."""
    shape, eps = norm_shape_eps(graph, node)
    return F.layer_norm(x, shape, weight, bias, eps)


def norm_forward(graph: SimGraph, node: SimNode, x: torch.Tensor, weight: Optional[torch.Tensor],
                 bias: Optional[torch.Tensor]) -> torch.Tensor:
    """A node whose module quantizes its own parameters (role ``norm``), with the given (quantized) weight
    and bias: a PReLU as its unit simulates it (``pipeline.ops.prelu.simulate``), a layer norm as
    :func:`layer_norm`, any other as its record's ``norm`` form computes it (``OpRecord.norm``). A new float32
    tensor."""
    form = g.norm_form(node.op)
    if form is not None:
        return form.forward(graph, node, x, weight, bias)
    if node.op == g.PRELU:
        return simulate_prelu(x, weight)
    return layer_norm(graph, node, x, weight, bias)


def param_forward(graph: SimGraph, node: SimNode, x: torch.Tensor, weight: torch.Tensor,
                  bias: Optional[torch.Tensor]) -> torch.Tensor:
    """A conv/linear node with the given parameters, as nndct's modules call it (conv.py, linear.py); a type
    whose record gives its ``layer`` form (``OpRecord.layer``), as that form calls it."""
    m = graph.module(node)
    form = g.layer_form(node.op)
    if form is not None:
        return form.forward(m, x, weight, bias)
    if node.op == g.DENSE:
        return F.linear(x, weight, bias)
    if node.op == g.BATCH_NORM:  # converted parameters: mean 0, var 1, eps 0 (capture)
        return F.batch_norm(x, m.running_mean, m.running_var, weight, bias, False, 0.0, m.eps)
    if node.op in (g.CONV2D, g.DEPTHWISE_CONV2D):
        return F.conv2d(x, weight, bias, m.stride, m.padding, m.dilation, m.groups)
    return F.conv_transpose2d(x, weight, bias, m.stride, m.padding, m.output_padding, m.groups, m.dilation)


def float_reference(graph: SimGraph, node: SimNode, x: torch.Tensor, weight: torch.Tensor,
                    bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The float output bias correction compares with (conv.py / linear.py ``res_f``).

    Linear uses ``matmul`` then ``add`` (not ``F.linear``), exactly as nndct's linear module.
    """
    if node.op == g.DENSE:
        out = torch.matmul(x, torch.transpose(weight, 0, 1))
        return out if bias is None else torch.add(out, bias)
    return param_forward(graph, node, x, weight, bias)
