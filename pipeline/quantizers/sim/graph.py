"""Graph capture for the simulation: torch.fx trace, nndct-style rewrites and nndct node names.

The real quantizer parses the model with ``torch.jit.trace`` into an nndct graph, rewrites it
(``nndct_shared/optimization/optimizer.py``: fold Conv+BN, drop dropout, CLE, LeakyReLU slope)
and names every node ``<type>_<index>`` in topological order (``assign_node_topological_name`` in
``nndct_shared/nndct_graph/base_graph.py``), e.g. ``nndct_conv2d_1``. ``quant_info.json`` keys
are these names with a ``<ModelClass>::`` prefix, so the simulation has to reproduce them.

Here the model is traced with ``torch.fx.symbolic_trace`` (torch 1.13 and 2.x) on a deep copy
(the caller's model is never touched), and the fx graph is rewritten the same way:

1. Module swaps before tracing (``pytorch_nndct/qproc/utils.py`` ``parse_module``): every
   ``nn.ReLU6`` becomes ``nn.ReLU`` when CLE is on (option ``relu6_replace='relu'``) or when
   ``convert_relu6_to_relu`` is set; ``nn.SiLU`` becomes ``nn.Hardswish`` with
   ``convert_silu_to_hswish``.
2. Dropout and Identity nodes are removed (nndct removes dropout; jit traces never see Identity).
3. A BatchNorm2d whose input is a Conv2d/ConvTranspose2d is folded into it (facts 2.6,
   ``fuse_conv_bn.py``), in float32 exactly as nndct's numpy code does it:
   ``s = gamma / sqrt(var + eps)``, ``W' = W * s`` per output channel,
   ``b' = b * s + (beta - mean * s)`` (a bias is created when the conv had none).
4. Every remaining node gets its nndct op type (a literal table below) and its nndct name.

Supported operators (anything else raises ``QuantizationError`` naming the node): Conv2d
(incl. depthwise), ConvTranspose2d, Linear, BatchNorm2d after a conv, ReLU, ReLU6, Hardtanh(0, 6),
LeakyReLU, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Upsample/interpolate, Hardswish,
Hardsigmoid, Flatten, add, mul, cat, view/reshape, size, contiguous, permute, Dropout, Identity.

Known differences from nndct's jit-based parser: ``x.size(i)`` becomes one ``nndct_shape`` node
here; nndct may add ``tensor``/``int`` nodes for it, shifting later node numbers. Shared conv
modules (one module called twice) are rejected.
"""
import copy
import hashlib
import json
import operator
from typing import Any, Dict, List, Optional

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from ...errors import QuantizationError
from ..quant_config import QuantConfig

# nndct op type strings (nndct_shared/base/key_names.py, NNDCT_OP)
INPUT = "nndct_input"
CONV2D = "nndct_conv2d"
DEPTHWISE_CONV2D = "nndct_depthwise_conv2d"
CONVTRANSPOSE2D = "nndct_conv_transpose_2d"
DEPTHWISE_CONVTRANSPOSE2D = "nndct_depthwise_conv_transpose_2d"
DENSE = "nndct_dense"
RELU = "nndct_relu"
RELU6 = "nndct_relu6"
LEAKY_RELU = "nndct_leaky_relu"
MAX_POOL = "nndct_maxpool"
AVG_POOL = "nndct_avgpool"
ADAPTIVEAVGPOOL2D = "nndct_adaptive_avg_pool2d"
FLATTEN = "nndct_flatten"
RESHAPE = "nndct_reshape"
SHAPE = "nndct_shape"
CONTIGUOUS = "nndct_contiguous"
PERMUTE = "nndct_permute"
RESIZE = "nndct_resize"
HSWISH = "nndct_hswish"
HSIGMOID = "nndct_hsigmoid"
ADD = "nndct_elemwise_add"
MULTIPLY = "nndct_elemwise_mul"
CONCAT = "nndct_concat"
RETURN = "nndct_return"

CONV_TYPES = (CONV2D, DEPTHWISE_CONV2D, CONVTRANSPOSE2D, DEPTHWISE_CONVTRANSPOSE2D)
PARAM_TYPES = CONV_TYPES + (DENSE,)

# Literal tables: what each fx target becomes. Conv types are decided in _module_op.
MODULE_OPS = {
    nn.Linear: DENSE,
    nn.ReLU: RELU,
    nn.ReLU6: RELU6,
    nn.LeakyReLU: LEAKY_RELU,
    nn.MaxPool2d: MAX_POOL,
    nn.AvgPool2d: AVG_POOL,
    nn.AdaptiveAvgPool2d: ADAPTIVEAVGPOOL2D,
    nn.Flatten: FLATTEN,
    nn.Upsample: RESIZE,
    nn.Hardswish: HSWISH,
    nn.Hardsigmoid: HSIGMOID,
}
FUNCTION_OPS = {
    F.relu: RELU,
    torch.relu: RELU,
    F.relu6: RELU6,
    F.leaky_relu: LEAKY_RELU,
    F.max_pool2d: MAX_POOL,
    F.avg_pool2d: AVG_POOL,
    F.adaptive_avg_pool2d: ADAPTIVEAVGPOOL2D,
    F.interpolate: RESIZE,
    F.hardswish: HSWISH,
    F.hardsigmoid: HSIGMOID,
    torch.flatten: FLATTEN,
    torch.add: ADD,
    operator.add: ADD,
    operator.iadd: ADD,
    torch.mul: MULTIPLY,
    operator.mul: MULTIPLY,
    operator.imul: MULTIPLY,
    torch.cat: CONCAT,
    torch.reshape: RESHAPE,
    torch.permute: PERMUTE,
}
METHOD_OPS = {
    "relu": RELU,
    "flatten": FLATTEN,
    "view": RESHAPE,
    "reshape": RESHAPE,
    "size": SHAPE,
    "contiguous": CONTIGUOUS,
    "permute": PERMUTE,
    "add": ADD,
    "mul": MULTIPLY,
}
REMOVED_MODULES = (nn.Dropout, nn.Dropout2d, nn.Dropout1d, nn.Identity) if hasattr(nn, "Dropout1d") \
    else (nn.Dropout, nn.Dropout2d, nn.Identity)
REMOVED_FUNCTIONS = (F.dropout, F.dropout2d)


class SimNode:
    """One nndct node of the captured graph.

    Attributes:
        name: nndct node name without the class prefix, e.g. ``"nndct_conv2d_1"``.
        op: nndct op type, e.g. ``"nndct_conv2d"``.
        fx_node: the node of ``SimGraph.gm`` that computes it.
        inputs: producer SimNodes in argument order (nndct ``in_nodes``).
        users: consumer SimNodes in graph order (nndct ``out_nodes``; the return is not a SimNode).
        module_path: submodule path in ``SimGraph.gm`` for module calls, else None.
        param_names: for conv/dense: ``{"weights": "<Class>::<path>.weight", "bias": ...}``
            (bias only when the folded module has one).
        is_output: True when the node feeds the graph's return.
    """

    def __init__(self, name: str, op: str, fx_node: torch.fx.Node) -> None:
        self.name = name
        self.op = op
        self.fx_node = fx_node
        self.inputs = []  # type: List[SimNode]
        self.users = []  # type: List[SimNode]
        self.module_path = fx_node.target if fx_node.op == "call_module" else None  # type: Optional[str]
        self.param_names = {}  # type: Dict[str, str]
        self.is_output = False

    def __repr__(self) -> str:
        return "SimNode(%s)" % self.name


class SimGraph:
    """The captured, rewritten float graph plus its nndct view.

    Attributes:
        class_name: the model's class name (``quant_info.json`` prefix).
        gm: ``torch.fx.GraphModule`` computing the rewritten float model (BN folded, ReLU6
            swapped when CLE is on, dropout removed); owns deep copies of the caller's modules.
        nodes: SimNodes in topological (execution) order, inputs first; no return node.
        outputs: the SimNodes whose values the model returns, in return order.
        example_shapes: fx node -> output shape (tuple) seen on the example input, propagated on
            first use (test mode needs them; calibration does not, and a float forward of the
            example costs about a quarter of a four-batch calibration on a small model).
    """

    def __init__(self, class_name: str, gm: torch.fx.GraphModule, nodes: List[SimNode],
                 outputs: List[SimNode], example: torch.Tensor) -> None:
        self.class_name = class_name
        self.gm = gm
        self.nodes = nodes
        self.outputs = outputs
        self.by_name = {n.name: n for n in nodes}
        self._example = example
        self._shapes = None  # type: Optional[Dict[torch.fx.Node, Any]]
        self._modules = {}  # type: Dict[str, nn.Module]

    @property
    def example_shapes(self) -> Dict[torch.fx.Node, Any]:
        if self._shapes is None:
            self._shapes = _example_shapes(self.gm, self._example)
        return self._shapes

    def full_name(self, node: SimNode) -> str:
        """``"<Class>::<node name>"``, the key used in quant_info.json and bias_corr.pth."""
        return "%s::%s" % (self.class_name, node.name)

    def module(self, node: SimNode) -> nn.Module:
        """The submodule a call_module node runs (looked up once per node; the rewrites that
        replace submodules all run in ``capture``, before this is first called)."""
        m = self._modules.get(node.module_path)
        if m is None:
            m = self._modules[node.module_path] = self.gm.get_submodule(node.module_path)
        return m

    def graph_md5(self) -> str:
        """md5 of the graph description nndct checks in test mode (``Graph.get_md5``).

        The description lists, per node in topological order (the return node last), its op type
        and the op types of its input and output nodes, dumped with ``json.dumps(indent=2)``.
        """
        entries = []
        for n in self.nodes:
            outs = [u.op for u in n.users] + ([RETURN] if n.is_output else [])
            entries.append({"op": n.op, "input_ops": [i.op for i in n.inputs], "output_ops": outs})
        entries.append({"op": RETURN, "input_ops": [n.op for n in self.outputs], "output_ops": []})
        text = json.dumps({"nodes": entries}, indent=2, separators=(",", ": "))
        return hashlib.md5(text.encode("utf-8")).hexdigest()


def _set_submodule(root: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, leaf = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    setattr(parent, leaf, module)


def _swap_modules(model: nn.Module, cfg: QuantConfig) -> None:
    swaps = []
    for name, m in model.named_modules():
        if isinstance(m, nn.ReLU6) and (cfg.include_cle or cfg.convert_relu6_to_relu):
            swaps.append((name, nn.ReLU(m.inplace)))
        elif isinstance(m, nn.SiLU) and cfg.convert_silu_to_hswish:
            swaps.append((name, nn.Hardswish()))
    for name, new in swaps:
        if not name:
            raise QuantizationError("the model itself is a single %s; wrap it in a module with a "
                                    "forward to quantize it" % type(new).__name__)
        _set_submodule(model, name, new)


def _trace(model: nn.Module) -> torch.fx.Graph:
    # torch.fx.symbolic_trace without its GraphModule: the module is built once, after the
    # rewrites (one code generation instead of two)
    try:
        return torch.fx.Tracer().trace(model)
    except Exception as e:  # fx raises many types (TraceError, TypeError, ...)
        raise QuantizationError(
            "the sim quantizer captures the model with torch.fx.symbolic_trace, which failed for "
            "%s: %s. Make forward() free of data-dependent Python control flow (the real "
            "quantizer's torch.jit.trace has the same requirement)." % (type(model).__name__, e))


def _remove_passthrough(root: nn.Module, graph: torch.fx.Graph) -> None:
    for node in list(graph.nodes):
        drop = (node.op == "call_module" and isinstance(root.get_submodule(node.target), REMOVED_MODULES)) \
            or (node.op == "call_function" and node.target in REMOVED_FUNCTIONS)
        if drop:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


def fold_bn_params(weight: torch.Tensor, bias: Optional[torch.Tensor], bn: nn.BatchNorm2d,
                   out_dim: int):
    """Fold BatchNorm statistics into conv parameters (float32, nndct's order of operations).

    Args:
        weight: conv weight; ``out_dim`` is its output-channel dimension (0 for Conv2d, 1 for
            ConvTranspose2d).
        bias: conv bias or None.
        bn: the BatchNorm2d (eval statistics; ``affine=False`` counts as gamma 1, beta 0).

    Returns:
        ``(weight, bias)`` new float32 tensors (copies).
    """
    mean = bn.running_mean.detach().float()
    var = bn.running_var.detach().float()
    gamma = bn.weight.detach().float() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().float() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)
    offset = beta - mean * scale
    shape = [1] * weight.dim()
    w = weight.detach().float()
    if out_dim == 1 and w.shape[1] != scale.numel():  # grouped transposed conv: (in, out/g, kh, kw)
        groups = scale.numel() // w.shape[1]
        w = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
        shape = [groups, 1, w.shape[2]] + [1] * (w.dim() - 3)
        new_w = (w * scale.reshape(shape)).reshape(weight.shape)
    else:
        shape[out_dim] = scale.numel()
        new_w = w * scale.reshape(shape)
    new_b = offset.clone() if bias is None else bias.detach().float() * scale + offset
    return new_w, new_b


def _fold_bn(root: nn.Module, graph: torch.fx.Graph) -> None:
    for node in list(graph.nodes):
        if node.op != "call_module" or not isinstance(root.get_submodule(node.target), nn.BatchNorm2d):
            continue
        src = node.args[0]
        conv = root.get_submodule(src.target) if isinstance(src, torch.fx.Node) and src.op == "call_module" else None
        if not isinstance(conv, (nn.Conv2d, nn.ConvTranspose2d)):
            raise QuantizationError(
                "node %r: BatchNorm2d without a Conv2d before it is not supported by the sim "
                "quantizer (nndct turns it into a scale/offset layer that quantizes poorly); put "
                "the BatchNorm right after a convolution" % node.name)
        if len(src.users) != 1:
            raise QuantizationError(
                "node %r: the output of conv %r is used by %d nodes besides its BatchNorm; the real "
                "quantizer would fold the BatchNorm into the conv and change what the other users "
                "see. Use the conv output only through the BatchNorm." % (node.name, src.target, len(src.users) - 1))
        bn = root.get_submodule(node.target)
        out_dim = 1 if isinstance(conv, nn.ConvTranspose2d) else 0
        w, b = fold_bn_params(conv.weight, conv.bias, bn, out_dim)
        # root is capture's own deep copy, so its conv is folded in place (every node calling
        # this module names the same target path, so none could still see the unfolded conv)
        conv.weight = nn.Parameter(w, requires_grad=False)
        conv.bias = nn.Parameter(b, requires_grad=False)
        node.replace_all_uses_with(src)
        graph.erase_node(node)


def _conv_op(m: nn.Module) -> str:
    if m.padding_mode != "zeros":
        raise QuantizationError("conv with padding_mode=%r: the real quantizer's conv module pads with zeros "
                                "(it calls F.conv2d with the padding); use padding_mode='zeros' or an "
                                "explicit pad" % m.padding_mode)
    if isinstance(m, nn.Conv2d):
        cin = m.in_channels
        depthwise = m.groups != 1 and m.groups == cin and m.out_channels % cin == 0
        return DEPTHWISE_CONV2D if depthwise else CONV2D
    # nndct op_dispatcher: transposed conv is depthwise when weight (in, out/g) has out/g == 1
    # and groups == in_channels
    depthwise = m.weight.shape[1] == 1 and m.groups == m.weight.shape[0] and m.groups != 1
    return DEPTHWISE_CONVTRANSPOSE2D if depthwise else CONVTRANSPOSE2D


def _classify(gm: torch.fx.GraphModule, node: torch.fx.Node) -> str:
    if node.op == "placeholder":
        return INPUT
    if node.op == "call_module":
        m = gm.get_submodule(node.target)
        if type(m) in (nn.Conv2d, nn.ConvTranspose2d):
            return _conv_op(m)
        if type(m) is nn.Hardtanh and m.min_val == 0.0 and m.max_val == 6.0:
            return RELU6
        if type(m) in MODULE_OPS:
            return MODULE_OPS[type(m)]
        what = "module %r (%s)" % (node.target, type(m).__name__)
    elif node.op == "call_function":
        if node.target in FUNCTION_OPS:
            return FUNCTION_OPS[node.target]
        what = "function %s" % getattr(node.target, "__name__", node.target)
    elif node.op == "call_method":
        if node.target in METHOD_OPS:
            return METHOD_OPS[node.target]
        what = "method Tensor.%s" % node.target
    else:
        what = "%s %r" % (node.op, node.target)
    raise QuantizationError(
        "node %r: %s is not supported by the sim quantizer; supported: Conv2d, ConvTranspose2d, "
        "Linear, BatchNorm2d after a conv, ReLU, ReLU6, LeakyReLU, MaxPool2d, AvgPool2d, "
        "AdaptiveAvgPool2d, Upsample/interpolate, Hardswish, Hardsigmoid, Flatten, add, mul, cat, "
        "view/reshape, size, contiguous, permute, Dropout, Identity" % (node.name, what))


def _example_shapes(gm: torch.fx.GraphModule, example: torch.Tensor) -> Dict[torch.fx.Node, Any]:
    with torch.no_grad():
        ShapeProp(gm).propagate(example)
    shapes = {}
    for node in gm.graph.nodes:
        meta = node.meta.get("tensor_meta")
        shapes[node] = tuple(meta.shape) if hasattr(meta, "shape") else None
    return shapes


def capture(model: nn.Module, example: torch.Tensor, cfg: QuantConfig) -> SimGraph:
    """Deep-copy, rewrite and trace ``model``; name every node as nndct does.

    Args:
        model: the float model (any device; the copy is moved to the CPU and put in eval mode).
            Never modified.
        example: float32 NCHW example input (the trace shape; not modified).
        cfg: resolved quantization config (CLE and the convert_* switches decide module swaps).

    Returns:
        SimGraph.

    Raises:
        QuantizationError: the model cannot be traced, or uses an unsupported operator (named).
    """
    work = copy.deepcopy(model).cpu().eval()
    for p in work.parameters():
        p.requires_grad_(False)
    _swap_modules(work, cfg)
    fx_graph = _trace(work)
    placeholders = [n for n in fx_graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise QuantizationError("the sim quantizer supports models with exactly one input; forward() of %s "
                                "takes %d" % (type(model).__name__, len(placeholders)))
    _remove_passthrough(work, fx_graph)
    _fold_bn(work, fx_graph)
    fx_graph.lint()
    # holds the modules the rewritten graph calls (not the folded BatchNorms), as symbolic_trace would
    gm = torch.fx.GraphModule(work, fx_graph, class_name=type(work).__name__)

    called = {}  # type: Dict[str, int]
    nodes = []  # type: List[SimNode]
    by_fx = {}  # type: Dict[torch.fx.Node, SimNode]
    outputs = []  # type: List[SimNode]
    index = 0
    class_name = type(model).__name__
    for fx_node in gm.graph.nodes:
        if fx_node.op == "output":
            outputs = [by_fx[n] for n in fx_node.all_input_nodes]
            for n in outputs:
                n.is_output = True
            continue
        op = _classify(gm, fx_node)
        sim = SimNode("%s_%d" % (op, index), op, fx_node)
        index += 1
        sim.inputs = [by_fx[n] for n in fx_node.all_input_nodes]
        for i in sim.inputs:
            i.users.append(sim)
        if op in PARAM_TYPES:
            called[fx_node.target] = called.get(fx_node.target, 0) + 1
            if called[fx_node.target] > 1:
                raise QuantizationError("module %r is called more than once; the sim quantizer "
                                        "needs one module per conv/linear use" % fx_node.target)
            m = gm.get_submodule(fx_node.target)
            sim.param_names["weights"] = "%s::%s.weight" % (class_name, fx_node.target)
            if m.bias is not None:
                sim.param_names["bias"] = "%s::%s.bias" % (class_name, fx_node.target)
        nodes.append(sim)
        by_fx[fx_node] = sim
    return SimGraph(class_name, gm, nodes, outputs, example.detach().cpu())
