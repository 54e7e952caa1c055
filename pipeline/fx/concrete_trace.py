"""A torch.fx trace that sees through ``torch.fx.wrap``-ped functions, as torch.jit.trace does.

The real quantizer parses the model with ``torch.jit.trace`` (``pytorch_nndct/parse/trace_helper.py``),
which records every aten op a forward runs on the example input: it sees through any Python
function, and a branch on a traced size runs as the example's size says. ``torch.fx`` symbolic
tracing instead keeps a function registered with ``torch.fx.wrap`` as one leaf call (torchvision's
``shifted_window_attention``, ``_get_relative_position_bias``, ...), which the simulation would run
as one float operator where nndct has dozens of nodes (dense, matmul, softmax, ...).

``concrete_trace`` traces again with a tracer that (1) inlines every wrapped function: it calls
the function's body on the proxies instead of recording a leaf; (2) carries each proxy's value on
the example input, so that ``bool()``, ``int()``, ``len()`` and iteration of a traced value take the
example's value (jit's specialisation: the comparison is not recorded); (3) records item
assignment ``x[idx] = v`` as ``operator.setitem`` (jit's ``slice`` + ``fill_``/``copy_``).

The capture uses it for a model with wrapped functions, and for one whose forward branches in
Python on a traced value (``if x.dim() == 4:``, ``assert x.shape[1] == 3``, ``nn.Softmax2d``), which
plain fx refuses (``float_trace.fails_on_control_flow``): the branch takes the example's path, the
other path leaves no node, as in the real quantizer's trace.

Only a branch on the input's metadata (sizes, rank, dtype, and what is computed from them alone) is
followed. A Python branch, ``int()`` or index on a value computed from the input's data
(``if x.sum() > 0:``) raises :class:`DataDependentBranch`: torch.jit.trace specialises on it too
(the real quantizer then quantizes the example's path and warns only with torch's TracerWarning
"Converting a tensor to a Python boolean might cause the trace to be incorrect"), so its quantized
model computes the wrong path for inputs that take the other one; the capture refuses it instead.
Parameters and buffers are the model's, not the input's: a branch on them is followed.
"""
import operator
from typing import Any, Dict, List, Optional, Set, Tuple

import torch
import torch.fx
import torch.utils._pytree
from torch import nn
from torch.fx._symbolic_trace import _orig_module_call, _orig_module_getattr, _wrapped_fns_to_patch
from torch.fx.node import map_aggregate

from .proxy_args import recording_proxy_arguments
from .tracer import AugmentedAssignments, CaptureTracer


def _wrapped_keys() -> set:
    """``(id(globals), name)`` of every function registered with ``torch.fx.wrap`` (a dict in
    torch 2, a list of ``(globals, name)`` in torch 1.13)."""
    if isinstance(_wrapped_fns_to_patch, dict):
        return set(_wrapped_fns_to_patch)
    return {(id(g), name) for g, name in _wrapped_fns_to_patch}


def _is_wrapped(target: Any, keys: set) -> bool:
    g = getattr(target, "__globals__", None)  # a Python function: its module's globals and name
    return g is not None and (id(g), getattr(target, "__name__", "")) in keys


def is_wrapped_call(node: torch.fx.Node) -> bool:
    """True for a call_function node that calls a function registered with ``torch.fx.wrap``."""
    return node.op == "call_function" and _is_wrapped(node.target, _wrapped_keys())


def has_wrapped_calls(graph: torch.fx.Graph) -> bool:
    """True when a plain fx trace kept a ``torch.fx.wrap``-ped function as a leaf call."""
    return any(is_wrapped_call(n) for n in graph.nodes)


class DataDependentBranch(Exception):
    """A Python branch, ``int()`` or index on a value computed from the input's data (module docstring);
    its message names the fx node whose value was asked for."""


# what reads a tensor's metadata, not its data: a value computed only from these (and constants,
# parameters) is the same for every input of the example's shape
_META_METHODS = frozenset(["size", "dim", "ndimension", "numel", "nelement", "get_device", "is_contiguous",
                           "is_floating_point", "is_complex", "element_size"])
_META_ATTRS = frozenset(["shape", "ndim", "dtype", "device", "is_cuda", "layout", "requires_grad", "is_quantized"])


def _reads_metadata(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        return str(node.target) in _META_METHODS
    return node.op == "call_function" and node.target is getattr and len(node.args) > 1 and \
        node.args[1] in _META_ATTRS


def _attr(root: nn.Module, path: str) -> Any:
    # a dotted attribute of ``root`` without ``nn.Module.__getattr__`` (patched while tracing)
    obj = root  # type: Any
    for part in path.split("."):
        if isinstance(obj, nn.Module):
            for table in (obj._modules, obj._parameters, obj._buffers, obj.__dict__):
                if part in table:
                    obj = table[part]
                    break
            else:
                obj = getattr(obj, part)
        else:
            obj = getattr(obj, part)
    return obj


def _run_unpatched(module: nn.Module, args: Any, kwargs: Any) -> Any:
    # a leaf module on example values, run as torch.nn runs it: the tracer patches
    # Module.__call__ and Module.__getattr__ while it traces (its forward would be traced again)
    patched = nn.Module.__call__, nn.Module.__getattr__
    nn.Module.__call__, nn.Module.__getattr__ = _orig_module_call, _orig_module_getattr
    try:
        return module(*args, **kwargs)
    finally:
        nn.Module.__call__, nn.Module.__getattr__ = patched


class _ConcreteProxy(AugmentedAssignments, torch.fx.Proxy):
    """A Proxy that also holds its value on the example input (``value``)."""

    def __init__(self, node: torch.fx.Node, tracer: "ConcreteTracer", value: Any) -> None:
        super().__init__(node, tracer)
        self.value = value

    def __len__(self) -> int:
        return len(self.value)

    def __int__(self) -> int:
        self.tracer.check_not_data(self, "int()")
        return int(self.value)

    def __index__(self) -> int:
        self.tracer.check_not_data(self, "an index")
        return operator.index(self.value)

    def __setitem__(self, idx: Any, v: Any) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, idx, v), {})


class ConcreteTracer(CaptureTracer):
    """The capture's tracer (``tracer.CaptureTracer``) with example values; see the module docstring."""

    def __init__(self, examples: Tuple[torch.Tensor, ...], baked: Tuple[Any, ...] = ()) -> None:
        super().__init__()
        self._examples = list(examples) + list(baked)
        self._inputs = len(examples)  # placeholders that are the input; the rest, baked defaults, are not data
        self._values = {}  # type: Dict[torch.fx.Node, Any]
        self._data = set()  # type: Set[torch.fx.Node]  # nodes whose value depends on the input's data
        self._wrapped = _wrapped_keys()

    def _depends_on_data(self, node: torch.fx.Node) -> bool:
        if node.op == "placeholder":
            self._inputs -= 1
            return self._inputs >= 0
        if node.op == "get_attr" or _reads_metadata(node):
            return False
        found = []  # type: List[bool]
        map_aggregate((node.args, node.kwargs), lambda a: found.append(isinstance(a, torch.fx.Node) and a in self._data))
        return any(found)

    def check_not_data(self, obj: torch.fx.Proxy, what: str) -> None:
        """Raise DataDependentBranch when ``obj``'s value depends on the input's data (module docstring)."""
        if obj.node in self._data:
            raise DataDependentBranch("%s of %r (%s %s), a value computed from the input's data"
                                      % (what, obj.node.name, obj.node.op, getattr(obj.node.target, "__name__",
                                                                                    obj.node.target)))

    def _known(self, a: Any) -> Any:
        if not isinstance(a, torch.fx.Node):
            return a
        if a not in self._values and a.op == "get_attr":  # a constant fx made with create_node
            self._values[a] = self._value(a)
        return self._values[a]

    def _value(self, node: torch.fx.Node) -> Any:
        if node.op == "placeholder":  # the examples, then forward()'s baked defaults (fx's concrete_args)
            return self._examples.pop(0) if self._examples else None
        if node.op == "get_attr":
            return _attr(self.root, str(node.target))
        args = map_aggregate(node.args, self._known)
        kwargs = map_aggregate(node.kwargs, self._known)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        if node.op == "call_module":
            return _run_unpatched(_attr(self.root, str(node.target)), args, kwargs)
        return None

    def proxy(self, node: torch.fx.Node) -> torch.fx.Proxy:
        with torch.no_grad():
            value = self._value(node)
        self._values[node] = value
        if self._depends_on_data(node):
            self._data.add(node)
        return _ConcreteProxy(node, self, value)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        if kind == "call_function" and _is_wrapped(target, self._wrapped):
            return target(*args, **kwargs)  # see through: run the body on the proxies
        return super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)

    def to_bool(self, obj: torch.fx.Proxy) -> bool:
        self.check_not_data(obj, "a Python branch (bool())")
        return bool(obj.value)

    def iter(self, obj: torch.fx.Proxy):
        return iter([obj[i] for i in range(len(obj.value))])


def concrete_trace(root: nn.Module, examples: Tuple[torch.Tensor, ...],
                   concrete_args: Optional[Dict[str, Any]] = None) -> torch.fx.Graph:
    """Trace ``root`` on ``examples`` seeing through ``torch.fx.wrap``-ped functions (module
    docstring); the nodes whose value nothing uses (a comparison only a Python branch read, the
    unpacked sizes a model ignores) are removed, as torch.jit's dead code elimination does.
    ``concrete_args``: forward() arguments traced as these values (fx's own ``concrete_args``; the
    placeholders fx makes for them hold their flattened values, in order).

    Raises:
        DataDependentBranch: a Python branch on the input's data (module docstring).
        whatever the model's forward raises on the example, or fx's TraceError.
    """
    baked = []  # type: List[Any]
    for value in (concrete_args or {}).values():
        baked.extend(torch.utils._pytree.tree_flatten(value)[0])
    tracer = ConcreteTracer(examples, tuple(baked))
    with recording_proxy_arguments():  # torch.arange(x.shape[2]) recorded in torch 1.13 as in torch 2
        graph = tracer.trace(root, concrete_args)
    for node in reversed(list(graph.nodes)):  # torch.jit's dead code elimination
        if not node.users and _pure(node):
            graph.erase_node(node)
        else:
            # torch.fx's wrapper marks the node a wrapped call returned (here: the body's last op,
            # e.g. torch.cat); code generation would then register that target as a wrapped function
            node.meta.pop("is_wrapped", None)
    return graph


def _pure(node: torch.fx.Node) -> bool:
    # a call without side effects: not an item assignment, not an in-place method (``fill_``)
    if node.op == "call_function":
        return node.target is not operator.setitem
    return node.op == "call_method" and not str(node.target).endswith("_")
