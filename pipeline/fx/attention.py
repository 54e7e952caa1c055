"""``nn.MultiheadAttention`` self-attention as the real quantizer's trace sees it.

torch.fx keeps an ``nn.MultiheadAttention`` call as one leaf node; the real quantizer's
``torch.jit.trace`` records every operation of ``nn.MultiheadAttention.forward`` and
``torch.nn.functional.multi_head_attention_forward`` (the path without attention weights, torch 2.x,
``need_weights=False``: ``_in_projection_packed``, then ``scaled_dot_product_attention``), and nndct
makes one node of each (``pytorch_nndct/parse``: ``linear`` with a parameter operand is an
``nndct_dense`` whose parameters keep their own names, ``in_proj_weight`` / ``in_proj_bias``; the
attention itself is the float operator ``aten::scaled_dot_product_attention``; ``embed_dim //
num_heads`` on a traced size is ``aten::div`` with ``rounding_mode="trunc"``).

``inline_attention`` replaces each such call by the same operations, in the order the trace
records them, so the capture names and numbers the nodes as nndct does and the simulation runs what
nndct's test-mode model runs::

    transpose(1, 0)  (batch_first only)
    size 0, 1, 2; aten::div(size 2, num_heads); size -1
    dense (in_proj) -> unflatten(-1, (3, E)) -> unsqueeze(0) -> transpose(0, -2) -> squeeze(-2)
      -> contiguous -> select 0 / 1 / 2
    q, k, v: view(len, bsz * num_heads, head_dim).transpose(0, 1) (size 0 of k and v first)
    size 1 of k; q, k, v .view(bsz, num_heads, len, head_dim)
    scaled_dot_product_attention(q, k, v, None, 0.0, False) -> permute(2, 0, 1, 3)
      -> reshape(bsz * tgt_len, embed_dim) -> dense (out_proj) -> view(tgt_len, bsz, size 1)
    transpose(1, 0)  (batch_first only)

Only self-attention (query, key and value the same node) with packed projections, no masks, no
``bias_k``/``bias_v``, no ``add_zero_attn`` and ``need_weights=False`` is inlined (torchvision's
``VisionTransformer``); any other call stays one generic float operator
``aten::multiheadattention``, as before.
"""
import logging
import operator
from typing import Dict

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from ..ops.shape import trunc_div

IN_PROJ = "in_proj"  # the packed input projection's nn.Linear, added to the attention module


def _private_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask=None,
                       dropout_p: float = 0.0, is_causal: bool = False) -> torch.Tensor:
    """torch 1.13's attention: the private ``torch._C._nn._scaled_dot_product_attention`` (its
    arguments end ``need_attn_weights, is_causal``; it returns ``(output, weights)``), under the public
    function's name and signature, so the captured node is named and lowered the same."""
    return torch._C._nn._scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, False, is_causal)[0]


_private_attention.__name__ = "scaled_dot_product_attention"
# ``F.scaled_dot_product_attention`` (torch >= 2.0), else torch 1.13's private kernel: the target of the
# attention node ``inline_attention`` emits, and the key every consumer of the graph looks it up by.
# Either is the float attention softmax(q k^T / sqrt(head_dim)) v on (bsz, heads, len, head_dim);
# they differ in the last bits (torch 2's CPU kernel is blocked, with an online softmax).
SCALED_DOT_PRODUCT_ATTENTION = getattr(F, "scaled_dot_product_attention", None) or _private_attention
_WARNED = []  # the attention warned about under torch 1.13 (inline_attention), once a process


def _call_kwarg(node: torch.fx.Node, name: str, index: int, default):
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default


def _inlinable(m: nn.MultiheadAttention, node: torch.fx.Node) -> bool:
    q, k, v = (_call_kwarg(node, n, i, None) for i, n in enumerate(("query", "key", "value")))
    return (isinstance(q, torch.fx.Node) and q is k and k is v and m._qkv_same_embed_dim
            and m.bias_k is None and m.bias_v is None and not m.add_zero_attn
            and _call_kwarg(node, "key_padding_mask", 3, None) is None
            and _call_kwarg(node, "need_weights", 4, True) is False
            and _call_kwarg(node, "attn_mask", 5, None) is None
            and _call_kwarg(node, "is_causal", 7, False) is False
            and all(u.op == "call_function" and u.target is operator.getitem
                    and (u.args[1] == 0 or not u.users) for u in node.users))


def _in_projection(m: nn.MultiheadAttention) -> nn.Linear:
    """An ``nn.Linear`` holding the attention's own ``in_proj_weight`` / ``in_proj_bias`` (the same
    Parameter objects; made without initialising, so no random numbers are drawn)."""
    lin = torch.nn.utils.skip_init(nn.Linear, m.embed_dim, 3 * m.embed_dim, bias=m.in_proj_bias is not None)
    lin.weight = m.in_proj_weight
    if m.in_proj_bias is not None:
        lin.bias = m.in_proj_bias
    return lin


def inline_attention(root: nn.Module, graph: torch.fx.Graph) -> Dict[str, Dict[str, str]]:
    """Replace every inlinable ``nn.MultiheadAttention`` call of ``graph`` (see the module docstring).

    Args:
        root: the module the graph's targets are named in (capture's working copy); each inlined
            attention module gets an ``in_proj`` ``nn.Linear`` sharing its packed projection.
        graph: the fx graph, rewritten in place.

    Returns:
        The parameter names of the added projections: module path of the ``in_proj`` Linear ->
        ``{"weights": "<attention path>.in_proj_weight", "bias": "<attention path>.in_proj_bias"}``
        (bias only when there is one), as nndct names them.
    """
    names = {}  # type: Dict[str, Dict[str, str]]
    for node in list(graph.nodes):
        if node.op != "call_module":
            continue
        m = root.get_submodule(node.target)
        if type(m) is not nn.MultiheadAttention or not _inlinable(m, node):
            continue
        if SCALED_DOT_PRODUCT_ATTENTION is _private_attention and not _WARNED:
            _WARNED.append(node.target)  # once a process: each step and phase captures the model again
            logging.getLogger("pipeline").warning(
                "%s (nn.MultiheadAttention): simulated as the real quantizer traces it under torch 2; this torch "
                "(%s) has no F.scaled_dot_product_attention, and its own multi_head_attention_forward (bmm, "
                "softmax, bmm), which the real quantizer in the Vitis AI 3.5 image records, may place other "
                "quantization points: not checked against a real run on this torch", node.target, torch.__version__)
        path = "%s.%s" % (node.target, IN_PROJ)
        m.add_module(IN_PROJ, _in_projection(m))
        names[path] = {"weights": "%s.in_proj_weight" % node.target}
        if m.in_proj_bias is not None:
            names[path]["bias"] = "%s.in_proj_bias" % node.target
        with graph.inserting_before(node):
            out = _emit(graph, m, node.target, path, _call_kwarg(node, "query", 0, None))
        for user in list(node.users):
            if user.args[1] == 0:
                user.replace_all_uses_with(out)
            graph.erase_node(user)
        graph.erase_node(node)
    return names


def _emit(graph: torch.fx.Graph, m: nn.MultiheadAttention, path: str, in_proj: str,
          x: torch.fx.Node) -> torch.fx.Node:
    """The operations of one self-attention call, in trace order; returns its output node."""
    def method(name, *args):
        return graph.call_method(name, args)

    mul = operator.mul
    heads = m.num_heads
    if m.batch_first:
        x = method("transpose", x, 1, 0)
    tgt_len, bsz, embed = (method("size", x, i) for i in range(3))
    head_dim = graph.call_function(trunc_div, (embed, heads))
    e = method("size", x, -1)
    proj = graph.call_module(in_proj, (x,))
    proj = method("unflatten", proj, -1, (3, e))
    proj = method("squeeze", method("transpose", method("unsqueeze", proj, 0), 0, -2), -2)
    proj = method("contiguous", proj)
    q, k, v = (graph.call_function(torch.select, (proj, 0, i)) for i in range(3))
    q = method("transpose", method("view", q, tgt_len, graph.call_function(mul, (bsz, heads)), head_dim), 0, 1)
    kv = []
    for t in (k, v):
        length = method("size", t, 0)
        kv.append(method("transpose", method("view", t, length, graph.call_function(mul, (bsz, heads)), head_dim),
                         0, 1))
    k, v = kv
    src_len = method("size", k, 1)
    q = method("view", q, bsz, heads, tgt_len, head_dim)
    k = method("view", k, bsz, heads, src_len, head_dim)
    v = method("view", v, bsz, heads, src_len, head_dim)
    out = graph.call_function(SCALED_DOT_PRODUCT_ATTENTION, (q, k, v, None, 0.0, False))
    out = method("permute", out, 2, 0, 1, 3)
    out = method("reshape", out, graph.call_function(mul, (bsz, tgt_len)), embed)
    out = graph.call_module("%s.out_proj" % path, (out,))
    out = method("view", out, tgt_len, bsz, method("size", out, 1))
    if m.batch_first:
        out = method("transpose", out, 1, 0)
    return out
