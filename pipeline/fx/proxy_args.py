"""torch.fx records a torch function given a traced value as a number or size, in every torch.

``torch.arange(x.shape[2])``, ``torch.zeros(n, 4)``, ``torch.full((x.shape[0], 2), 1.0)``,
``torch.reshape(x, (x.shape[0], -1))``: the traced size is a ``torch.fx.Proxy``. torch 2's argument
parser hands an object with ``__torch_function__`` in a number or size argument to that
``__torch_function__`` (``torch/csrc/utils/python_arg_parser.cpp``), so fx's
``Proxy.__torch_function__`` records the call as a ``call_function`` node. torch 1.13's parser does
so only for tensor arguments and raises ``TypeError`` ("arange(): argument 'end' (position 1) must
be Number, not Proxy"). The real quantizer's ``torch.jit.trace`` records such calls in both, so the
capture must too.

``recording_proxy_arguments()`` closes the gap for the duration of a trace where this torch has it
(``proxy_arguments_recorded()``: a probe of what torch does, not its version): every public builtin
function of the ``torch`` namespace (``torch._C._VariableFunctions``: the factories, ``reshape``,
``narrow``, ...) is replaced by a wrapper that, when any argument (nested in lists, tuples or dicts)
is a Proxy, records the call as torch 2's ``Proxy.__torch_function__`` does (the function itself
as the target, the node named after it, the arguments as given), and otherwise calls it. Python
functions of the namespace (``torch.meshgrid``, ``torch.split``) dispatch on their tensor
arguments themselves and are left alone. Where torch records such calls (torch 2) nothing is patched.
"""
import contextlib
import functools
import types
from typing import Any, Callable, Dict, Iterator, List

import torch
import torch.fx
from torch.fx.node import map_aggregate

_ACTIVE = []  # type: List[bool]   # one entry per open recording_proxy_arguments() that patched


@functools.lru_cache(maxsize=None)
def proxy_arguments_recorded() -> bool:
    """True when this torch records ``torch.arange(proxy)`` through ``Proxy.__torch_function__``
    (torch 2), False when its argument parser refuses a Proxy as a number (torch 1.13). Probed once,
    on a throwaway graph; must not run while the torch namespace is patched (it is cached before)."""
    graph = torch.fx.Graph()
    end = torch.fx.Proxy(graph.placeholder("end"), torch.fx.proxy.GraphAppendingTracer(graph))
    try:
        torch.arange(end)
    except TypeError:
        return False
    return True


def _first_proxy(args: Any, kwargs: Any) -> Any:
    found = []  # type: List[torch.fx.Proxy]

    def look(a: Any) -> Any:
        if not found and isinstance(a, torch.fx.Proxy):
            found.append(a)
        return a
    map_aggregate(args, look)
    map_aggregate(kwargs, look)
    return found[0] if found else None


def _recording(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        proxy = _first_proxy(args, kwargs)
        if proxy is None:
            return fn(*args, **kwargs)
        tracer = proxy.tracer
        return tracer.create_proxy("call_function", fn, args, kwargs, name=tracer.graph._target_to_str(fn.__name__))
    return call


@contextlib.contextmanager
def recording_proxy_arguments() -> Iterator[None]:
    """Within the block, a builtin ``torch.<function>`` called with a Proxy anywhere in its arguments
    is recorded as a ``call_function`` node of that function (module docstring); a no-op where
    ``proxy_arguments_recorded()`` (torch 2) and inside an enclosing block. The namespace is restored
    on exit, also when the trace raises."""
    if _ACTIVE or proxy_arguments_recorded():
        yield
        return
    saved = {name: value for name, value in vars(torch).items()
             if not name.startswith("_") and isinstance(value, types.BuiltinFunctionType)}  # type: Dict[str, Any]
    for name, value in saved.items():
        setattr(torch, name, _recording(value))
    _ACTIVE.append(True)
    try:
        yield
    finally:
        _ACTIVE.pop()
        for name, value in saved.items():
            setattr(torch, name, value)
