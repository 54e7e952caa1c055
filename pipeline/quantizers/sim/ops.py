"""Float semantics of the nodes as the real quantizer's modules compute them (shared by calib and test).

``pytorch_nndct/nn/modules`` replaces some operators by DPU approximations
(docs/arithmetic.md#leakyrelu-slope, #hardsigmoid-and-hardswish, #average-pool-correction):

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
import operator
from typing import Any, Dict, Optional, Tuple

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.node import map_arg

from ...errors import QuantizationError
from ... import fixpoint
from ... import ops as g
from ...fx.graph import SimGraph, SimNode
from ...ops.hard_sigmoid import HARD_SIGMOID_SCALE, HSWISH_FIX_POS
from ...ops.leaky_relu import LEAKY_SLOPE
from ...ops.pool import avgpool_dpu_scale
from ...ops.prelu import simulate as simulate_prelu
from ...fx.example_run import node_error

OUT_OF_PLACE = {operator.iadd: operator.add, operator.imul: operator.mul}


def pair(v: Any) -> Tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def avgpool_kernel(graph: SimGraph, node: SimNode) -> Tuple[int, int]:
    """Kernel size (kh, kw) of an AvgPool2d node (module or functional)."""
    fx_node = node.fx_node
    if fx_node.op == "call_module":
        return pair(graph.module(node).kernel_size)
    return pair(fx_node.kwargs.get("kernel_size", fx_node.args[1] if len(fx_node.args) > 1 else None))


def adaptive_output_size(graph: SimGraph, node: SimNode) -> Any:
    fx_node = node.fx_node
    if fx_node.op == "call_module":
        return graph.module(node).output_size
    return fx_node.kwargs.get("output_size", fx_node.args[1] if len(fx_node.args) > 1 else None)


def adaptive_scale(in_hw: Tuple[int, int], output_size: Any) -> Optional[float]:
    """The DPU factor of an adaptive average pool, or None when it stays unquantized.

    Args:
        in_hw: input (H, W).
        output_size: the pool's output size (int, pair, or pair with None entries).
    """
    out = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    out = tuple(in_hw[i] if o is None else int(o) for i, o in enumerate(out))
    if any(in_hw[i] % out[i] for i in range(2)):
        return None
    return avgpool_dpu_scale(in_hw[0] // out[0], in_hw[1] // out[1])


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
    out = adaptive_output_size(graph, node)
    sizes = (out, out) if isinstance(out, int) else tuple(out)
    if all(s is None or int(s) == 1 for s in sizes):
        return False
    shape = graph.example_shapes[node.fx_node.all_input_nodes[0]]
    return adaptive_scale((int(shape[-2]), int(shape[-1])), out) is None


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
            return getattr(args[0], fx_node.target)(*args[1:], **kwargs)
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


def tiled_max_pool(m: nn.MaxPool2d, x: Any) -> Optional[torch.Tensor]:
    """``m(x)`` for a non-overlapping max pool (stride == kernel, no padding or dilation), as the
    elementwise maximum of the ``kh * kw`` strided views of ``x``; None for any other pool.

    The values are exactly ``F.max_pool2d``'s (a maximum is exact; NaN propagates in both),
    several times faster on the CPU for small windows, whose NCHW kernel is scalar. The one
    possible difference is the sign of a zero when ``+0.0`` and ``-0.0`` tie in a window; every
    pool output reaches a quantization point (``fake_quant`` gives ``+0.0`` for both) before any
    use that could tell them apart, so calibration results are unchanged. Used in calibration
    only; the lowered test-mode model keeps ``nn.MaxPool2d``.

    Args:
        m: the MaxPool2d module.
        x: its input; not modified.

    Returns:
        A new contiguous float32 tensor (N, C, H // kh, W // kw), or None: another pool, or an
        input that is not a plain contiguous float32 NCHW tensor.
    """
    kh, kw = pair(m.kernel_size)
    stride = pair(m.stride if m.stride is not None else m.kernel_size)
    if (stride != (kh, kw) or kh * kw < 2 or pair(m.padding) != (0, 0) or pair(m.dilation) != (1, 1)
            or m.ceil_mode or m.return_indices or not isinstance(x, torch.Tensor) or x.dim() != 4
            or x.dtype != torch.float32):
        return None
    # plain NCHW only, where F.max_pool2d's output is plain NCHW too; a channels_last (or
    # ambiguous: C == 1, H == W == 1) input keeps F.max_pool2d and its output layout, which
    # later reductions depend on
    if not x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
        return None
    ho, wo = int(x.shape[2]) // kh, int(x.shape[3]) // kw
    if ho == 0 or wo == 0:
        return None
    views = [x[:, :, i:ho * kh:kh, j:wo * kw:kw] for i in range(kh) for j in range(kw)]
    out = torch.maximum(views[0], views[1])  # a new contiguous (N, C, ho, wo) tensor
    for view in views[2:]:
        torch.maximum(out, view, out=out)
    return out


def hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """nndct's DPU hardsigmoid: ``relu6(x + 3) * 2731/16384`` (float32)."""
    return F.relu6(torch.add(x, 3.0)) * HARD_SIGMOID_SCALE


def hard_swish(x: torch.Tensor) -> torch.Tensor:
    """nndct's DPU hardswish: ``x * Q7(relu6(x + 3) * 2731/16384)``, Q7 = half_up at fix_pos 7, 8 bits."""
    return torch.mul(x, fixpoint.fake_quant(hard_sigmoid(x), HSWISH_FIX_POS, 8, "half_up"))


def run_node(graph: SimGraph, node: SimNode, env: Dict[torch.fx.Node, Any]) -> Tuple[Any, bool]:
    """Float output of a non-parameter node with nndct's operator semantics.

    Returns:
        ``(value, quantizable)``: ``quantizable`` is False only for an adaptive average pool that
        the real quantizer leaves unquantized (input size not a multiple of the output size).
    """
    op = node.op
    fx_node = node.fx_node
    if op == g.LEAKY_RELU:
        return F.leaky_relu(env[fx_node.all_input_nodes[0]], LEAKY_SLOPE), True
    if op == g.HSWISH:
        return hard_swish(env[fx_node.all_input_nodes[0]]), True
    if op == g.HSIGMOID:
        return hard_sigmoid(env[fx_node.all_input_nodes[0]]), True
    if op == g.MAX_POOL and fx_node.op == "call_module":
        out = tiled_max_pool(graph.module(node), env[fx_node.all_input_nodes[0]])
        if out is not None:
            return out, True
    consts = {i: env[c] for i, c in node.const_args.items()} if node.const_args else None
    out = run_fx(graph.root, fx_node, env, graph.module(node) if fx_node.op == "call_module" else None, consts)
    if op == g.AVG_POOL:
        kh, kw = avgpool_kernel(graph, node)
        return out * avgpool_dpu_scale(kh, kw), True
    if op == g.ADAPTIVEAVGPOOL2D:
        x = env[fx_node.all_input_nodes[0]]
        scale = adaptive_scale((int(x.shape[2]), int(x.shape[3])), adaptive_output_size(graph, node))
        if scale is None:
            return out, False
        return out * scale, True
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
    :func:`layer_norm`. A new float32 tensor."""
    if node.op == g.PRELU:
        return simulate_prelu(x, weight)
    return layer_norm(graph, node, x, weight, bias)


def param_forward(graph: SimGraph, node: SimNode, x: torch.Tensor, weight: torch.Tensor,
                  bias: Optional[torch.Tensor]) -> torch.Tensor:
    """A conv/linear node with the given parameters, as nndct's modules call it (conv.py, linear.py)."""
    m = graph.module(node)
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
