"""Describe each tensor operation of a float model in DPU terms, on the one graph capture.

The model is captured by ``pipeline.fx.capture.capture(..., None)`` (the same torch.fx
trace and op table the simulation and the exporter use, without the quantizer's rewrites: no ``Rewrites``) and
its GraphModule run once on a clone of the example input (``ShapeProp``) to record every output
shape. Each call that produces a tensor becomes an :class:`OpNode` with its op type by the capture's
tables (``pipeline.fx.classify``, read off the records of ``pipeline.ops``: the one torch-to-op
mapping), the inspector's name for it (its record's ``dpu_rule`` names: conv2d, depthwise_conv2d,
conv_transpose2d, dense, batch_norm, relu, relu6, ...), the attributes the rules need, and the
capture's node type and float-operator flag. Nodes the quantizer drops before deployment (Dropout, Identity,
``contiguous``) are removed and their consumers re-linked to their input; calls that produce no
tensor (``x.size(0)``) are not nodes.

Nothing of the caller's model or example is changed: both are copied first.
"""

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.nn as nn
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

from pipeline import ops
from pipeline.errors import PipelineError, QuantizationError
from pipeline.fx.capture import capture
from pipeline.fx.classify import classify


@dataclass
class OpNode:
    """One tensor operation of the traced model.

    Attributes:
        name: the fx node name, unique in the graph (``layer1_0_conv1``).
        op: the inspector's name of the op (its record's ``dpu_rule`` names, else the call's own
            name: ``conv2d``, ``view``, ``truediv``); "input" for a graph input.
        source: what the model called: ``nn.Conv2d 'layer1.0.conv1'``, ``torch.flatten``,
            ``Tensor.view``.
        inputs: names of the OpNodes whose outputs feed this one (graph inputs included,
            constants and Python numbers not).
        shape: output shape as PyTorch gives it (NCHW for 4-D feature maps), or None when the
            output is not one tensor.
        attrs: op attributes: ``kernel_size``/``stride``/``dilation`` as [h, w], ``pad`` as
            [left, right, top, bottom] (XIR order), ``groups``, ``in_channels``,
            ``out_channels``, ``output_padding``, ``negative_slope``, ``order``, ...
        contiguous: whether the output tensor was C-contiguous on the example run.
        maybe_noncontiguous: whether the output may be non-contiguous whatever the input shape
            (made by permute, transpose, expand, slicing, ...), or was on the example run.
        quantizer_op: the op type of the one graph capture (``pipeline.ops``, e.g.
            ``nndct_conv2d``, ``aten::mean``), None where the capture has no node.
        float_operator: the quantizer runs it in float on the CPU (``SimNode.float_operator``).
        op_type: the op type of the call by the capture's tables (``pipeline.fx.classify``), which
            selects its DPU-support rule (``pipeline.ops.DPU_RULES``); None for a node known by name
            only (an xmodel's op: its rule is found by ``op``).
        in_quant_part: False where the node lies outside the model's quantized parts (QuantStub /
            DeQuantStub: ``SimNode.in_quant_part``): the quantizer runs it in float.
    """

    name: str
    op: str
    source: str
    inputs: List[str]
    shape: Optional[Tuple[int, ...]]
    attrs: Dict[str, Any] = field(default_factory=dict)
    contiguous: bool = True
    maybe_noncontiguous: bool = False
    quantizer_op: Optional[str] = None
    float_operator: bool = False
    op_type: Optional[str] = None
    in_quant_part: bool = True


@dataclass
class TracedModel:
    """The traced graph: graph inputs, op nodes in topological order, and graph output names."""

    model_name: str
    inputs: List[OpNode]
    nodes: List[OpNode]
    outputs: List[str]


# Ops whose output may be a non-contiguous view of their input, whatever the shapes.
_NONCONTIGUOUS_METHODS = ("permute", "transpose", "t", "expand", "expand_as", "narrow", "movedim",
                          "swapaxes", "swapdims", "unfold", "as_strided")
_NONCONTIGUOUS_FUNCTIONS = (torch.permute, torch.transpose, torch.t, torch.narrow, torch.movedim,
                            torch.swapaxes, torch.as_strided)


def _pair(value) -> List[int]:
    """An int or a pair as [h, w]."""
    if isinstance(value, (tuple, list)):
        return [int(v) for v in value] if len(value) == 2 else [int(value[0])] * 2
    return [int(value), int(value)]


def _pad_lrtb(padding, kernel_size: List[int], dilation: List[int]) -> List[int]:
    """PyTorch padding (int, (h, w) or "same"/"valid") as XIR [left, right, top, bottom]."""
    if padding == "valid":
        return [0, 0, 0, 0]
    if padding == "same":
        total_h = dilation[0] * (kernel_size[0] - 1)
        total_w = dilation[1] * (kernel_size[1] - 1)
        return [total_w // 2, total_w - total_w // 2, total_h // 2, total_h - total_h // 2]
    ph, pw = _pair(padding)
    return [pw, pw, ph, ph]


def _arg(node: torch.fx.Node, index: int, name: str, default=None):
    """Argument ``name`` of a call, given positionally at ``index`` or as a keyword."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _module_attrs(op: str, module: nn.Module) -> Dict[str, Any]:
    """Attributes of a module call, in the inspector's names."""
    if op in ("conv2d", "depthwise_conv2d", "conv_transpose2d"):
        kernel, dilation = list(module.kernel_size), list(module.dilation)
        attrs = {"kernel_size": kernel, "stride": list(module.stride), "dilation": dilation,
                 "pad": _pad_lrtb(module.padding, kernel, dilation), "groups": module.groups,
                 "in_channels": module.in_channels, "out_channels": module.out_channels,
                 "padding_mode": module.padding_mode}
        if op == "conv_transpose2d":
            attrs["output_padding"] = list(module.output_padding)
        return attrs
    if op == "dense":
        return {"in_features": module.in_features, "out_features": module.out_features}
    if op == "leaky_relu":
        return {"negative_slope": float(module.negative_slope)}
    if op in ("max_pool2d", "avg_pool2d"):
        return _pool_attrs(op, module.kernel_size, module.stride, module.padding,
                           getattr(module, "dilation", 1), module.ceil_mode)
    if op == "adaptive_avg_pool2d":
        return {"output_size": module.output_size}
    if op == "flatten":
        return {"start_dim": module.start_dim, "end_dim": module.end_dim}
    if op == "resize":
        return {"mode": module.mode, "align_corners": bool(module.align_corners)}
    return {}


def _pool_attrs(op, kernel_size, stride, padding, dilation, ceil_mode) -> Dict[str, Any]:
    kernel = _pair(kernel_size)
    dil = _pair(dilation)
    return {"kernel_size": kernel, "stride": _pair(stride) if stride else list(kernel),
            "dilation": dil, "pad": _pad_lrtb(padding, kernel, dil), "ceil_mode": bool(ceil_mode)}


def _function_attrs(op: str, node: torch.fx.Node) -> Dict[str, Any]:
    """Attributes of a function or method call, in the inspector's names."""
    if op == "leaky_relu":
        return {"negative_slope": float(_arg(node, 1, "negative_slope", 0.01))}
    if op in ("max_pool2d", "avg_pool2d"):
        dilation = _arg(node, 4, "dilation", 1) if op == "max_pool2d" else 1
        ceil_mode = _arg(node, 5 if op == "max_pool2d" else 4, "ceil_mode", False)
        return _pool_attrs(op, _arg(node, 1, "kernel_size"), _arg(node, 2, "stride"),
                           _arg(node, 3, "padding", 0), dilation, ceil_mode)
    if op == "adaptive_avg_pool2d":
        return {"output_size": _arg(node, 1, "output_size")}
    if op == "flatten":
        return {"start_dim": _arg(node, 1, "start_dim", 0), "end_dim": _arg(node, 2, "end_dim", -1)}
    if op == "permute":
        dims = node.args[1:]
        order = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return {"order": [int(d) for d in order]}
    if op == "transpose":
        return {"dims": [int(_arg(node, 1, "dim0")), int(_arg(node, 2, "dim1"))]}
    if op == "concat":
        return {"dim": int(_arg(node, 1, "dim", 0))}
    if op == "mean":
        dim = _arg(node, 1, "dim")
        dims = list(dim) if isinstance(dim, (tuple, list)) else ([dim] if dim is not None else [])
        return {"dim": [int(d) for d in dims], "keepdim": bool(_arg(node, 2, "keepdim", False))}
    if op == "resize":
        return {"mode": _arg(node, 3, "mode", "nearest"), "align_corners": bool(_arg(node, 4, "align_corners", False))}
    if op in ("add", "mul", "truediv", "div"):
        operands = [_arg(node, 0, "input"), _arg(node, 1, "other")]
        numbers = [float(o) for o in operands if isinstance(o, (int, float)) and not isinstance(o, bool)]
        attrs = {"tensor_operands": sum(isinstance(o, torch.fx.Node) for o in operands)}
        return dict(attrs, constant=numbers[0]) if numbers else attrs
    if op in ("clamp", "clip", "hardtanh"):  # the bounds (hardtanh's default -1, 1)
        low, high = (-1.0, 1.0) if op == "hardtanh" else (None, None)
        return {"min": _arg(node, 1, "min_val" if op == "hardtanh" else "min", low),
                "max": _arg(node, 2, "max_val" if op == "hardtanh" else "max", high)}
    return {}


def _op_type(root: nn.Module, node: torch.fx.Node) -> str:
    """The op type of a call by the capture's tables (``pipeline.fx.classify``, read off the records of
    ``pipeline.ops``; not strict: what the simulation refuses is still described), without the
    in-place underscore of a float operator (``aten::silu_`` is judged as ``aten::silu``)."""
    op_type = classify(root, node, strict=False)
    if op_type not in ops.DPU_RULES and op_type.endswith("_") and op_type[:-1] in ops.DPU_RULES:
        return op_type[:-1]
    return op_type


def _classify(node: torch.fx.Node, modules: Dict[str, nn.Module],
              root: nn.Module) -> Tuple[str, str, str, Dict[str, Any]]:
    """(op type, the inspector's name, source description, attributes) of one call node. The name is
    the type's first name in its record's ``dpu_rule`` (``conv2d``, ``max_pool2d``, ``concat``), or the
    call's own name where the record lists it (``view`` for a reshape) or gives the type no rule
    (``truediv``, ``clamp``, an unknown module's class name in lower case)."""
    op_type = _op_type(root, node)
    rule = ops.DPU_RULES.get(op_type)
    if node.op == "call_module":
        module = modules[node.target]
        label = "nn.{} {!r}".format(type(module).__name__, node.target)
        own = type(module).__name__.lower()
    elif node.op == "call_method":
        label = "Tensor." + node.target
        own = node.target
    else:
        target = node.target
        module_name = getattr(target, "__module__", None) or "torch"
        label = "{}.{}".format("operator" if module_name == "_operator" else module_name,
                               getattr(target, "__name__", str(target)))
        own = getattr(target, "__name__", str(target))
    name = own if not isinstance(rule, ops.DpuRule) or own in rule.names else rule.names[0]
    module = modules[node.target] if node.op == "call_module" else None
    attrs = _module_attrs(name, module) if module is not None else _function_attrs(name, node)
    if isinstance(rule, ops.DpuRule) and rule.attrs is not None:  # what the op's rule reads besides
        attrs.update(rule.attrs(module, lambda index, key, default=None: _arg(node, index, key, default)))
    return op_type, name, label, attrs


def _is_contiguous(meta: TensorMetadata) -> bool:
    """C-contiguity from recorded shape and strides (size-1 dimensions may have any stride)."""
    expected = 1
    for size, stride in reversed(list(zip(meta.shape, meta.stride))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _makes_noncontiguous(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        return node.target in _NONCONTIGUOUS_METHODS
    if node.op == "call_function":
        if node.target is operator.getitem:
            index = node.args[1]
            index = index if isinstance(index, tuple) else (index,)
            return any(isinstance(i, slice) for i in index)
        return node.target in _NONCONTIGUOUS_FUNCTIONS
    return False


class _ShapeRecorder(ShapeProp):
    """ShapeProp that names the node a run fails at."""

    def run_node(self, n):
        try:
            return super().run_node(n)
        except Exception as error:
            raise _NodeFailure(n, error) from error


class _NodeFailure(Exception):
    def __init__(self, node, error):
        super().__init__(str(error))
        self.node = node
        self.error = error


def trace_model(model: nn.Module, example: Any, traced: Any = None) -> TracedModel:
    """Trace ``model`` with torch.fx and run it once on ``example`` to record shapes.

    Args:
        model: the float model (NCHW input). Not modified: a deep copy is traced in eval mode.
        example: one input batch (a tensor, or a tuple with one tensor per forward argument;
            any batch size; shapes are reported with it). Not modified: the run uses a clone.
        traced: the step's ``pipeline.fx.float_trace.FloatTrace`` of ``model``, or None: the capture
            starts from it instead of tracing ``model`` again.

    Returns:
        The :class:`TracedModel`.

    Raises:
        PipelineError: torch.fx cannot trace the model (data-dependent control flow), or the
            float model fails on the example; the message names the node and what to change.
    """
    examples = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    try:
        # the one graph capture, without the quantizer's rewrites (BatchNorm, Dropout kept)
        graph = capture(model, examples, None, traced=traced)
    except QuantizationError as error:
        raise PipelineError(
            "torch.fx could not trace {}: {}. Inspection (like the real quantizer, which traces "
            "with torch.jit.trace) needs a forward() without data-dependent control flow: keep "
            "pre- and post-processing outside the model".format(type(model).__name__, error)) from error
    graph_module = graph.gm
    sim_nodes = {fx.name: sim for fx, sim in graph.steps if sim is not None}
    try:
        with torch.no_grad():
            _ShapeRecorder(graph_module).propagate(*[e.detach().clone() for e in examples])
    except _NodeFailure as failure:
        node = failure.node
        advice = ""
        if node.op == "call_method" and node.target == "view":
            advice = (" 'view' needs a tensor whose strides fit the new shape; its input may be "
                      "non-contiguous (after permute/transpose): use .reshape() or .flatten()")
        raise PipelineError("the float model fails on the example input (shape {}) at node {!r} "
                            "({}): {}.{}".format(", ".join(str(tuple(e.shape)) for e in examples), node.name, node.format_node(),
                                                 failure.error, advice)) from failure.error
    modules = dict(graph_module.named_modules())
    inputs: List[OpNode] = []
    nodes: List[OpNode] = []
    outputs: List[str] = []
    alias: Dict[str, str] = {}          # removed node -> the node its consumers now read
    maybe_nc: Dict[str, bool] = {}      # output may be non-contiguous
    origin_nc: Dict[str, str] = {}      # name of the op that made it so
    for fx_node in graph_module.graph.nodes:
        meta = fx_node.meta.get("tensor_meta")
        if fx_node.op == "placeholder":
            inputs.append(OpNode(fx_node.name, "input", "graph input",
                                 [], tuple(meta.shape) if isinstance(meta, TensorMetadata) else None))
            maybe_nc[fx_node.name] = False
            continue
        if fx_node.op == "output":
            outputs = [alias.get(n.name, n.name) for n in fx_node.all_input_nodes]
            continue
        sim = sim_nodes.get(fx_node.name)
        if fx_node.op == "get_attr" or (meta is None and not (sim is not None and sim.float_operator)):
            continue  # a float operator making no tensor (x[idx] = v, a float from sizes) still runs on the CPU
        op_type, op, source, attrs = _classify(fx_node, modules, graph_module)
        known = [n.name for n in fx_node.all_input_nodes if n.name in maybe_nc]
        is_tensor = isinstance(meta, TensorMetadata)
        contiguous = _is_contiguous(meta) if is_tensor else True
        made_nc = _makes_noncontiguous(fx_node) or not contiguous
        if op_type in (ops.IDENTITY, ops.CONTIGUOUS) and known:
            alias[fx_node.name] = alias.get(known[0], known[0])
            maybe_nc[fx_node.name] = op == "identity" and maybe_nc[known[0]]
            if maybe_nc[fx_node.name]:
                origin_nc[fx_node.name] = origin_nc[known[0]]
            continue
        if op == "view" and known and maybe_nc[known[0]]:
            attrs["input_may_be_noncontiguous_from"] = origin_nc[known[0]]
        maybe_nc[fx_node.name] = made_nc
        if made_nc:
            origin_nc[fx_node.name] = fx_node.name
        nodes.append(OpNode(fx_node.name, op, source, [alias.get(n, n) for n in known],
                            tuple(meta.shape) if is_tensor else None, attrs, contiguous, made_nc,
                            sim.op if sim is not None else None,
                            sim is not None and sim.float_operator, op_type, sim is None or sim.in_quant_part))
    return TracedModel(type(model).__name__, inputs, nodes, outputs)
