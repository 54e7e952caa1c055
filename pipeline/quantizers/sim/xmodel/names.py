"""The real quantizer's node names (``<Class>::<scope>/<trace value>``), which the xmodel's op names are made of.

quant_info.json keys nndct nodes by their topological names (``nndct_conv2d_1``), but the xmodel
keeps the names nndct's parser gave them from a ``torch.jit`` trace of the model
(``pytorch_nndct/parse/trace_helper.py``, ``parser.py``, ``utils/jit_utils.py``; docs/xmodel.md#names):
the module scope of the traced op (``ConvNet/Conv2d[conv1]``) and the debug name of its output
value. torch's tracer names a value after the Python variable that holds it when it is next used
(``ret`` inside ``Tensor.__torch_function__``), else by its number in the trace graph (``458``).
Those names are a property of the trace, so this module traces the model the way nndct does:

- the model (after nndct's module swaps, before BN folding) wrapped in a module that takes the
  flattened inputs (nndct's ``FlattenInOutModelForTrace``), its inputs a ``torch.Tensor`` subclass
  whose ``__torch_function__`` runs pooling, ``mean``, ``chunk`` and ``split`` through nndct's own
  replacements (``parse/override_torch_function.py``), forward hooks that record module scopes;
- ``torch.jit._get_trace_graph``, the alias nodes those replacements leave removed, nndct's graph passes (inlining,
  constant propagation, dead code, peephole) run without renumbering (nndct discards the canonicalized graph);
- each nndct node of the simulation's graph is matched, in execution order, to the traced op that computes it; a
  chain of ``aten::slice`` is one strided slice named after its first slice; a number operand of add/sub/mul/div
  is a constant node named after its traced value (of ``x.add_(c)``: its traced constant's node, scope and value).

The numbers depend on the torch version (as they do for the real quantizer): the names equal the real one's under the same torch.
"""
import math
import re
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .... import ops as t
from ....fx.graph import SimGraph
from ....fx.naming import traced_constant

WRAPPER = "FlattenInOutModelForTrace"

KINDS = t.TRACED  # nndct op type -> torch.jit kinds (without "aten::") that produce it: the records' (OpRecord.traced)


# ------------------------------------------------------------------------------ nndct's trace
_REPLACED = {}  # type: Dict[Any, Any]


def _replaces(*functions: Any):
    def register(fn):
        for f in functions:
            _REPLACED[f] = fn
        return fn
    return register


class _TraceTensor(torch.Tensor):
    """Routes the functions nndct replaces while tracing through their replacements."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in _REPLACED:
            return _REPLACED[func](*args, **(kwargs or {}))
        return super().__torch_function__(func, types, args, kwargs or {})


# The replacements mirror nndct's (parse/override_torch_function.py) operation by operation and frame
# by frame, which is what the trace's names depend on: every traced op (a shape read, an alias made by
# ``as_subclass``) creates values whose count numbers the later ones, and torch names a value after a
# variable that holds it in the frame ABOVE the one running the op that uses it. So each op runs in the
# replacement's own frame (no helper functions) and the locals keep nndct's names (``input``,
# ``normal_data``). nndct's check for splitting a big pool reads the window size and is off by default.
@_replaces(F.max_pool2d)
def _max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    normal_data = input.as_subclass(torch.Tensor)
    normal_data = F.max_pool2d(normal_data, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    return normal_data.as_subclass(_TraceTensor)


@_replaces(F.avg_pool2d)
def _avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    normal_data = input.as_subclass(torch.Tensor)
    normal_data = F.avg_pool2d(normal_data, kernel_size, stride, padding, ceil_mode, count_include_pad,
                               divisor_override)
    return normal_data.as_subclass(_TraceTensor)


@_replaces(F.adaptive_avg_pool2d)
def _adaptive_avg_pool2d(input, output_size):
    if output_size == 1:
        [int(input.shape[-2]), int(input.shape[-1])]  # nndct reads the window for its big-pool check
    normal_data = input.as_subclass(torch.Tensor)
    normal_data = F.adaptive_avg_pool2d(normal_data, output_size)
    return normal_data.as_subclass(_TraceTensor)


@_replaces(F.adaptive_max_pool2d)
def _adaptive_max_pool2d(input, output_size, return_indices=False):
    if output_size == 1:
        [int(input.shape[-2]), int(input.shape[-1])]  # the same check
    normal_data = input.as_subclass(torch.Tensor)
    normal_data = F.adaptive_max_pool2d(normal_data, output_size, return_indices)
    return normal_data.as_subclass(_TraceTensor)


@_replaces(torch.mean, torch.Tensor.mean)
def _mean(input, dim, keepdim=False, *, dtype=None, out=None):
    if isinstance(dim, (list, tuple)) and len(dim) == 2:
        dim = [d + input.dim() if d < 0 else d for d in dim]
        if (input.dim() == 3 and tuple(dim) == (1, 2)) or (input.dim() == 4 and tuple(dim) == (2, 3)):
            [int(input.shape[-2]), int(input.shape[-1])]  # the same check
    normal_data = input.as_subclass(torch.Tensor)
    normal_data = torch.mean(normal_data, dim, keepdim=keepdim, dtype=dtype, out=out)
    return normal_data.as_subclass(_TraceTensor)


@_replaces(torch.chunk, torch.Tensor.chunk)
def _chunk(input, chunks, dim=0):
    split_size = math.ceil(input.shape[dim] / chunks)
    if split_size != 0:
        chunks = math.ceil(input.shape[dim] / split_size)
    pieces = []
    for k in range(chunks):
        index = [slice(None, None) for _ in input.shape]
        start = k * split_size
        end = input.shape[dim] if k == chunks - 1 else (k + 1) * split_size
        index[dim] = slice(start, end)
        pieces.append(input[tuple(index)])
    return tuple(pieces)


@_replaces(torch.split, torch.Tensor.split)
def _split(tensor, split_size_or_sections, dim=0):
    pieces = []
    if isinstance(split_size_or_sections, (list, tuple)):
        total = 0
        for size in split_size_or_sections:
            total = total + size
        assert total == tensor.shape[dim]
        end = 0
        for size in split_size_or_sections:
            index = [slice(None, None) for _ in tensor.shape]
            start = end
            end = start + size
            index[dim] = slice(start, end)
            pieces.append(tensor[tuple(index)])
        return tuple(pieces)
    groups = math.ceil(tensor.shape[dim] / split_size_or_sections)
    if groups == 0:
        groups = 1
    for k in range(groups):
        index = [slice(None, None) for _ in tensor.shape]
        start = k * split_size_or_sections
        end = tensor.shape[dim] if k == groups - 1 else (k + 1) * split_size_or_sections
        index[dim] = slice(start, end)
        pieces.append(tensor[tuple(index)])
    return tuple(pieces)


class _Wrapper(nn.Module):
    """nndct's FlattenInOutModelForTrace: the model as an attribute ``nndct_st_<Class>_ed``, called
    with the flattened inputs, its output flattened to a tuple."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.module_name = "nndct_st_" + inner._get_name() + "_ed"
        setattr(self, self.module_name, inner)

    def _get_name(self) -> str:
        return WRAPPER

    def forward(self, *flatten_input):
        output = getattr(self, self.module_name)(*flatten_input)
        return tuple(output) if isinstance(output, (tuple, list)) else (output,)


def _scope_name(parents: List[nn.Module], module: nn.Module) -> str:
    """``Class[path]`` as nndct's trace hooks name a module inside its caller (ModuleList items as
    ``ModuleList[i]``)."""
    if not parents:
        return module._get_name()

    def walk(m: nn.Module, prefix: str, out: Dict[str, nn.Module]) -> None:
        out[prefix] = m
        children = [("ModuleList[%d" % i if not prefix else "%s]/ModuleList[%d" % (prefix, i), c)
                    for i, c in enumerate(m)] if isinstance(m, nn.ModuleList) else \
            [(n if not prefix else "%s]/%s[%s" % (prefix, c._get_name(), n), c) for n, c in m.named_children()]
        for name, child in children:
            walk(child, name, out)

    found = {}  # type: Dict[str, nn.Module]
    walk(parents[-1], "", found)
    for name, child in found.items():
        if child is module and name:
            return "%s[%s]" % (module._get_name(), name)
    return module._get_name()


def trace_graph(model: nn.Module, examples: Tuple[torch.Tensor, ...]) -> Any:
    """The ``torch._C.Graph`` nndct's parser works on for ``model`` (see the module docstring)."""
    from torch.jit import _trace as jit_trace
    wrapper = _Wrapper(model).eval()
    stack = []  # type: List[nn.Module]
    hooks = []

    def pre(module: nn.Module, _inputs: Any) -> None:
        jit_trace._trace_module_map[module] = _scope_name(stack, module)
        stack.append(module)

    def post(module: nn.Module, _inputs: Any, _outputs: Any) -> None:
        stack.pop()

    saved = jit_trace._trace_module_map
    jit_trace._trace_module_map = {}
    try:
        for m in wrapper.modules():
            hooks.append(m.register_forward_pre_hook(pre))
            hooks.append(m.register_forward_hook(post))
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's warnings concern reuse of the trace, which is not reused
            inputs = tuple(x.clone().as_subclass(_TraceTensor) for x in examples)  # the model may write them
            graph, _ = jit_trace._get_trace_graph(wrapper, inputs)
    finally:
        for h in hooks:
            h.remove()
        jit_trace._trace_module_map = saved
    for node in graph.findAllNodes("aten::alias"):
        node.output().replaceAllUsesWith(node.inputsAt(0))
        node.destroy()
    _optimize(graph)
    return graph


def _optimize(graph: Any) -> None:
    from torch.onnx.utils import _split_tensor_list_constants
    C = torch._C
    C._jit_pass_inline(graph)
    C._jit_pass_inline_fork_wait(graph)
    C._jit_pass_lower_all_tuples(graph)
    C._jit_pass_constant_propagation(graph)
    _split_tensor_list_constants(graph, graph)
    C._jit_pass_dce(graph)
    C._jit_pass_canonicalize_graph_fuser_ops(graph)
    C._jit_pass_peephole(graph, True)
    C._jit_pass_fuse_addmm(graph)


# ------------------------------------------------------------------------------ matching
class _Op:
    """One traced op: kind (``conv2d`` for ``aten::_convolution``...), nndct name, input value names, its output
    value's name, and its inputs with each list (``prim::ListConstruct``) replaced by the values it holds."""

    def __init__(self, kind: str, name: str, inputs: List[str], out: str = "",
                 sources: Optional[List[str]] = None) -> None:
        self.kind = kind
        self.name = name
        self.inputs = inputs
        self.out = out
        self.sources = list(inputs) if sources is None else sources


_WRAPPER_SCOPE = re.compile(r"%s/(.*?)\[nndct_st_[\w_]+_ed\]" % WRAPPER)


def _node_name(node: Any) -> str:
    scope = _WRAPPER_SCOPE.sub(lambda m: m.group(1), node.scopeName())
    if scope.startswith("__"):
        scope = scope.split("/")[-1]
    out = node.outputsAt(0).debugName()
    return "%s/%s" % (scope, out) if scope else out


def traced_ops(graph: Any) -> List[_Op]:
    """The traced ops in order, a slice chain (each slice the one reader of the one before it) folded into its
    first slice; a traced ``torch.autograd.Function`` (``prim::PythonOp``) is known by its class name
    (``QuantStubF``), as nndct's parser knows it."""
    ops = []  # type: List[_Op]
    slice_names = {}  # type: Dict[str, str]   # output value of a slice -> the chain's name
    lists = {}  # type: Dict[str, List[str]]   # output value of a prim::ListConstruct -> the values it holds
    for node in graph.nodes():
        kind = node.kind()
        if kind == "prim::ListConstruct" and node.outputsSize() == 1:
            lists[node.outputsAt(0).debugName()] = [v.debugName() for v in node.inputs()]
        if kind == "prim::PythonOp" and node.outputsSize() == 1:  # a torch.autograd.Function: its class name
            ops.append(_Op(node.pyname(), _node_name(node), [v.debugName() for v in node.inputs()]))
            continue
        if not kind.startswith("aten::") or node.outputsSize() < 1:  # several outputs: named by the first
            continue
        kind = kind[len("aten::"):].rstrip("_") if kind != "aten::_convolution" else "_convolution"
        inputs = [v.debugName() for v in node.inputs()]
        name = _node_name(node)
        if kind == "slice":
            source = inputs[0]
            if source in slice_names and len({u.user for u in node.inputsAt(0).uses()}) == 1:
                # the next slice of a chain, the one op reading the one before it (nndct's parser ends a chain at
                # a slice read by several: OptPass.slice_to_strided_slice): the chain keeps its first name
                chain = slice_names.pop(source)
                slice_names[node.outputsAt(0).debugName()] = chain
                ops[-1].inputs.append(node.outputsAt(0).debugName())
                continue
            slice_names[node.outputsAt(0).debugName()] = name
        sources = [s for v in inputs for s in lists.get(v, [v])]
        ops.append(_Op(kind, name, inputs, node.outputsAt(0).debugName(), sources))
    return ops


def node_names(graph: SimGraph, model: nn.Module, examples: Tuple[torch.Tensor, ...]) -> Dict[str, str]:
    """nndct's full name (``<Class>::<scope>/<value>``) of every node of ``graph`` but shape arithmetic (a
    size read a consumer takes as a tensor, ``lower.size_kept``, is named after its ``aten::size``).

    Args:
        graph: the simulation's capture of ``model``.
        model: the float model after nndct's module swaps (``pipeline.fx.rewrites.swap_modules``),
            BatchNorms not folded; not modified.
        examples: one example tensor per model input.

    Raises:
        lower.XmodelUnsupported: a node of the simulation has no traced op of its type at its place (named).
    """
    prefix = graph.class_name + "::"
    traced = trace_graph(model, examples)
    ops, constants = traced_ops(traced), {n.outputsAt(0).debugName(): _node_name(n) for n in traced.nodes()
                                          if n.kind() == "prim::Constant" and n.outputsSize() == 1}
    names = {}  # type: Dict[str, str]
    for i, node in enumerate(graph.inputs):
        names[node.name] = prefix + "input_%d" % i
    from .lower import size_kept
    position = 0
    matched = {}  # type: Dict[str, _Op]   # sim node name -> its traced op
    for node in graph.nodes:
        if node.fx_node is None or node.op in (t.INPUT, t.CONST, t.SHAPE, t.FLOOR_DIVIDE) or node.shape_value:
            continue
        kinds = KINDS.get(node.op, (node.op.split("::")[-1].rstrip("_"),))  # aten::silu_: kind silu_, listed as silu
        while position < len(ops) and ops[position].kind not in kinds:
            position += 1
        if position == len(ops):
            from ....fx.refusals import XMODEL, explain, traced_otherwise
            from .lower import unsupported
            generic = traced_otherwise(
                "this call", "no traced op of kind %s follows the ops before it" % "/".join(kinds),
                "this form is not written yet. The ONNX exports do not depend on it: drop xmodel from export.formats "
                "to go on, or write the call in a form the table in docs/xmodel.md lists")
            several = graph.example_shapes.get(node.fx_node) is None  # not one tensor: values and indices, say
            raise unsupported(node, explain(node.fx_node, graph.root, XMODEL, generic, several=several))
        op = ops[position]
        names[node.name] = prefix + op.name
        matched[node.name] = op
        for index, const in node.const_args.items():
            if len(op.inputs) > 1:  # a traced constant keeps its node's name; a number nndct converts, its value's
                names[const.name] = prefix + (constants.get(op.inputs[1], op.inputs[1]) if traced_constant(const)
                                              else op.inputs[1])
        position += 1
    _name_kept_sizes(graph, ops, matched, names, prefix)
    return names


def _name_kept_sizes(graph: SimGraph, ops: List[_Op], matched: Dict[str, _Op], names: Dict[str, str],
                     prefix: str) -> None:
    """A size read some consumer takes as a tensor (``lower.size_kept``) is named after the traced ``aten::size``
    whose value its consumer's traced op takes (directly or in a list: ``expand(cls, [n, -1, -1])``), the k-th
    such size for the consumer's k-th kept size; a read whose consumer has no such size is left unnamed (the
    writer then refuses it, naming it)."""
    from .lower import size_kept
    sizes = {op.out: op for op in ops if op.kind == "size"}
    for user in graph.nodes:
        kept = [i for i in user.inputs if size_kept(i)]
        if not kept or user.name not in matched:
            continue
        feeding = [sizes[v] for v in matched[user.name].sources if v in sizes]
        for node, op in zip(kept, feeding):
            names.setdefault(node.name, prefix + op.name)


def xmodel_op_names(model: nn.Module, examples: Tuple[torch.Tensor, ...], cfg: Any = None) -> Dict[str, str]:
    """torch.fx node name (of the float model's trace) -> the xmodel op the real quantizer writes for
    it (without its ``_fix``), for every node that becomes one (the deploy graph's rewrites run, on the
    float parameters: a pad folded into its conv or a reshape merged into the next becomes none);
    what ``inspect`` reports per node.

    Args:
        model: the float model; not modified. examples: one tensor per model input.
        cfg: the QuantConfig whose module swaps apply (ReLU6 -> ReLU with CLE changes names); None
            for the real quantizer's defaults.

    Raises:
        QuantizationError / ExportError: the model cannot be captured or traced.
    """
    from ....fx.capture import capture
    from ....fx.rewrites import swap_modules
    from ....fx.work_copy import work_copy
    from ...quant_config import load_quant_config
    from ....xir.xgraph import formal_name
    cfg = cfg if cfg is not None else load_quant_config(None, None)
    graph = capture(model, examples, cfg.rewrites())
    swapped = work_copy(model)
    swap_modules(swapped, cfg.rewrites())
    from .deploy import optimize
    from .lower import deploy_graph
    names = node_names(graph, swapped, examples)
    dev = deploy_graph(graph, None, names, examples)
    optimize(dev)
    return {n.fx_node.name: formal_name(names[n.name]) for n in graph.nodes
            if n.fx_node is not None and names.get(n.name) in dev and n.op not in (t.INPUT, t.CONST)}
