"""Views as torch.jit records them and nndct's parser keeps them (``capture``'s rewrites of views).

- a registered buffer read in ``forward`` (Swin's ``relative_position_index``): torch.fx does not proxy it, so
  fx records it as a constant attribute (``_tensor_constant0``), where torch.jit reads the buffer by its name
  (the xmodel's const is named after it). :func:`unfold_buffer_views` reads it by its name again.
- ``self.idx.view(-1)`` of a registered buffer: the view runs while tracing and fx records its result as a
  constant attribute too;
  torch.jit records the buffer and an ``aten::view`` of it, which nndct's parser keeps as a reshape node
  (numbered before the node that uses it: Swin's relative position index,
  ``tests/data/refused_real/index_gather``). :func:`unfold_buffer_views` puts the view back.
(A ``view`` that keeps its input's shape, which nndct's parser removes: ``redundant_view.py``, run after
:func:`unfold_buffer_views`, whose views it then sees too.)
"""
from typing import Any, Dict, Optional, Tuple

import torch
import torch.fx
from torch import nn
from torch.overrides import TorchFunctionMode


def _buffer_viewed(root: nn.Module, value: torch.Tensor) -> Optional[str]:
    """The name of the registered buffer ``value`` is, or is a reshaped view of (the same storage, offset and
    element count, both contiguous), or None."""
    if not isinstance(value, torch.Tensor) or not value.is_contiguous():
        return None
    for name, buffer in root.named_buffers():
        if buffer is None or not buffer.is_contiguous():
            continue
        if buffer.numel() == value.numel() and buffer.data_ptr() == value.data_ptr() \
                and buffer.dtype == value.dtype and buffer.device == value.device:
            return name
    return None


class _ViewCalls(TorchFunctionMode):
    """Records the arguments of every ``view`` of a registered buffer: (buffer name, result shape) -> the
    arguments after ``self``, as the model wrote them (``view(-1)``)."""

    def __init__(self, buffers: Dict[int, str]) -> None:
        super().__init__()
        self.buffers = buffers
        self.calls = {}  # type: Dict[Tuple[str, Tuple[int, ...]], Tuple[Any, ...]]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") == "view" and args and id(args[0]) in self.buffers \
                and isinstance(result, torch.Tensor) and not kwargs:
            self.calls.setdefault((self.buffers[id(args[0])], tuple(result.shape)), tuple(args[1:]))
        return result


def _view_arguments(root: nn.Module, examples: Tuple[torch.Tensor, ...]) -> Dict[Tuple[str, Tuple[int, ...]], Any]:
    """The arguments of the buffer views the model's forward makes on the example (``_ViewCalls``); {} when the
    forward fails (capture's own run reports it)."""
    mode = _ViewCalls({id(b): name for name, b in root.named_buffers() if b is not None})
    try:
        with torch.no_grad(), mode:
            root(*[e.detach().cpu().clone() for e in examples])
    except Exception:
        return {}
    return mode.calls


def unfold_buffer_views(root: nn.Module, graph: torch.fx.Graph, examples: Tuple[torch.Tensor, ...]) -> None:
    """Each constant attribute torch.fx made of a registered buffer (``_buffer_viewed``) becomes a ``get_attr``
    of the buffer by its name, and one made of a reshaped view of it that ``get_attr`` and a ``view`` of it, as
    torch.jit records the read and the view. fx
    does not record the view's arguments (``view(-1)``, which nndct's reshape writes as given): they are taken
    from a run of the model on the example (``_view_arguments``, only when there is such a constant), else the
    constant's shape."""
    state = {name for name, _ in root.named_parameters()} | {name for name, _ in root.named_buffers()}
    found = []  # type: List[Tuple[torch.fx.Node, str, torch.Tensor]]
    views = False
    for node in graph.nodes:
        if node.op != "get_attr" or node.target in state:
            continue
        try:
            value = _attribute(root, node.target)
        except AttributeError:
            continue
        name = _buffer_viewed(root, value)
        if name is not None:
            found.append((node, name, value))
            views = views or tuple(value.shape) != tuple(_attribute(root, name).shape)
    if not found:
        return
    calls = _view_arguments(root, examples) if views else {}
    for node, name, value in found:
        shape = tuple(int(d) for d in value.shape)
        if shape == tuple(_attribute(root, name).shape):  # the buffer itself: read by its name
            node.target = name
            continue
        with graph.inserting_before(node):
            source = graph.get_attr(name)
            view = graph.call_method("view", (source,) + tuple(calls.get((name, shape), (shape,))))
        node.replace_all_uses_with(view)
        graph.erase_node(node)


def _attribute(root: nn.Module, target: str) -> torch.Tensor:
    value = root
    for part in target.split("."):
        value = getattr(value, part)
    return value
