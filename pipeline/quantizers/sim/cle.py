"""Cross-layer equalization as the real quantizer does it (option ``include_cle``, default on).

Re-implements ``OptimizeCommander.equalize_weights_cross_conv_layers`` of
``nndct_shared/optimization/commander.py`` (after Nagel et al. 2019, "Data-Free Quantization
through Weight Equalization and Bias Correction", arXiv:1906.04721):

1. Groups: a depth-first walk from each input collects chains of convolutions (conv2d,
   depthwise, transposed) joined only by ReLU or pooling (max, average, adaptive average) nodes
   with a single consumer. Any other node, or a node with several consumers, ends the chain.
   ReLU6 and LeakyReLU end it too (hence nndct's ReLU6 -> ReLU swap when CLE is on). Linear
   layers never take part.
2. Each pair of consecutive convolutions ``(c0, c1)`` in a chain is scaled once, in chain order:
   per channel k between them, ``r0[k]`` is the largest |weight| of c0's output channel k, also
   counting ``|bias[k]| / shrink`` (shrink 2..20 chosen from the bias/weight ratios), ``r1[k]`` the
   largest |weight| of c1 reading channel k; ``s = r0 / sqrt(r0 * r1)`` (1 where the root is 0 or
   ``r0 + r1 < 0.5``); then ``W0[k] /= s[k]``, ``b0[k] /= s[k]``, ``W1[:, k] *= s[k]``.

All arithmetic is numpy float32 in nndct's element order, so medians, means and the scaled
weights are bit-identical. Pairs nndct cannot handle either (a depthwise c0 with channel
multiplier > 1, grouped transposed convolutions) are skipped with a warning.
"""
import sys
import warnings
from typing import List, NamedTuple, Optional

import numpy as np
import torch

from ... import ops as g
from ...fx.graph import SimGraph, SimNode

CLE_TYPES = g.CONV_TYPES
ACT_TYPES = g.with_role("cle_act")  # the ops cle passes through between a pair's two layers
POOL_TYPES = g.with_role("cle_pool")


def _outs(node: SimNode) -> int:
    return len(node.users) + (1 if node.is_output else 0)


def collect_groups(graph: SimGraph) -> List[List[SimNode]]:
    """Conv chains in nndct's order (``_collect_layer_groups_recursion``); each has >= 2 convs."""
    groups = []  # type: List[List[SimNode]]
    visited = set()

    def gather(group: List[SimNode]) -> List[SimNode]:
        if len(group) > 1 and group not in groups:
            groups.append(group)
        return []

    def visit(node: SimNode, group: List[SimNode]) -> None:
        if not group:
            group = []
        if node.name in visited:
            return
        visited.add(node.name)
        if node.op in CLE_TYPES:
            group.append(node)
            if _outs(node) > 1:
                group = gather(group)
        elif node.op in ACT_TYPES or node.op in POOL_TYPES:
            if _outs(node) > 1:
                group = gather(group)
        else:
            group = gather(group)
        for child in node.users:
            visit(child, group)
        gather(group)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * len(graph.nodes) + 100))
    try:
        for node in graph.nodes:
            if node.op == g.INPUT:
                visited.clear()
                visit(node, [])
    finally:
        sys.setrecursionlimit(limit)
    return groups


class ClePair(NamedTuple):
    """One equalized pair: node names ``c0``, ``c1`` and ``scale``, float32 of shape (channels,):
    c0's output channel k was divided by ``scale[k]`` and c1's input channel k multiplied by it."""
    c0: str
    c1: str
    scale: np.ndarray


def equalize(graph: SimGraph) -> List[ClePair]:
    """Apply CLE to the conv modules of ``graph.root`` (new weight tensors, assigned); returns the scaled pairs, in order."""
    done = []
    for group in collect_groups(graph):
        for c0, c1 in zip(group[:-1], group[1:]):
            scale = _scale_pair(graph, c0, c1)
            if scale is not None:
                done.append(ClePair(c0.name, c1.name, scale))
    return done


def _rows(node: SimNode, m: torch.nn.Module, w: np.ndarray) -> Optional[np.ndarray]:
    """c0's weights as (out_channels, -1) rows in nndct's layout order, or None if unsupported."""
    if node.op == g.CONV2D:
        return w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1)  # OIHW -> OHWI
    if node.op == g.DEPTHWISE_CONV2D and m.out_channels == m.groups:  # channel multiplier 1
        return w.reshape(w.shape[0], -1)
    if node.op == g.CONVTRANSPOSE2D and m.groups == 1:
        return w.transpose(1, 2, 3, 0).reshape(w.shape[1], -1)  # (I, O, kh, kw) -> OHWI
    return None


def _input_ranges(node: SimNode, m: torch.nn.Module, w: np.ndarray) -> Optional[np.ndarray]:
    """max |weight| per input channel of c1, or None if unsupported. (A maximum is exact in any
    order: reduced over the output channels first, a contiguous pass, then over the kernel.)"""
    if node.op in (g.CONV2D, g.DEPTHWISE_CONV2D):
        v = np.abs(w.reshape(m.groups, w.shape[0] // m.groups, *w.shape[1:])).max(axis=1)  # (groups, in/g, kh, kw)
        return v.reshape(v.shape[0] * v.shape[1], -1).max(axis=1)
    if node.op == g.CONVTRANSPOSE2D and m.groups == 1:
        return np.abs(w).reshape(w.shape[0], -1).max(axis=1)
    return None


def _scale_inputs(node: SimNode, m: torch.nn.Module, w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    if node.op == g.CONVTRANSPOSE2D:
        return w * scale.reshape(-1, 1, 1, 1)
    v = w.reshape(m.groups, w.shape[0] // m.groups, *w.shape[1:])
    return (v * scale.reshape(m.groups, 1, w.shape[1], 1, 1)).reshape(w.shape)


def _combine_weight_and_bias(rows: np.ndarray, bias: Optional[np.ndarray]) -> np.ndarray:
    if bias is None:
        return rows
    bias_clamp = bias.copy().reshape(-1, 1)
    clamp = rows.copy()
    if np.count_nonzero(rows) != rows.size:
        for ch in range(clamp.shape[0]):
            nonzero = np.count_nonzero(clamp[ch])
            if nonzero == 0:
                bias_clamp[ch] = 0.0
                clamp[ch] = 1e-7
            elif nonzero != clamp[ch].size:
                minval = np.min(np.fabs(np.ma.masked_where(clamp[ch] == 0.0, clamp[ch])))
                clamp[ch] = np.where(clamp[ch] == 0.0, minval, clamp[ch])
    clamp = np.where(np.fabs(clamp) < 1e-7, np.float32(1e-7), clamp).astype(np.float32)
    factor = np.fabs(bias_clamp) / np.fabs(clamp)
    bias_max = np.fabs(bias).max()
    if bias_max < 10 and bias_max / np.fabs(clamp).max() < 20:
        shrink = 5 if (np.median(factor) > 100 or factor.mean() > 1000) else 2
    elif np.median(factor) > 30 or factor.mean() > 500:
        shrink = 20
    elif np.median(factor) > 15 or factor.mean() > 100:
        shrink = 10
    else:
        shrink = 5
    return np.concatenate((rows, bias_clamp / np.float32(shrink)), axis=1)


def _scale_pair(graph: SimGraph, c0: SimNode, c1: SimNode) -> Optional[np.ndarray]:
    m0, m1 = graph.module(c0), graph.module(c1)
    w0 = m0.weight.detach().numpy().astype(np.float32)
    w1 = m1.weight.detach().numpy().astype(np.float32)
    b0 = None if m0.bias is None else m0.bias.detach().numpy().astype(np.float32)
    rows = _rows(c0, m0, w0)
    range_1 = _input_ranges(c1, m1, w1)
    if rows is None or range_1 is None or range_1.shape[0] != rows.shape[0]:
        warnings.warn("CLE: skipping pair (%s, %s): layout not supported (the real quantizer "
                      "cannot equalize it either)" % (c0.name, c1.name))
        return None
    weight_bias = _combine_weight_and_bias(rows, b0)
    range_0 = np.max(np.fabs(weight_bias), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.sqrt(range_0 * range_1)
        scale = np.where(root != 0, range_0 / root, np.ones_like(range_0))
    scale = np.where((range_0 + range_1) < 0.5, np.float32(1), scale).astype(np.float32)
    if c0.op == g.CONVTRANSPOSE2D:
        new_w0 = w0 / scale.reshape(1, -1, 1, 1)
    else:
        new_w0 = w0 / scale.reshape(-1, 1, 1, 1)
    m0.weight.data = torch.from_numpy(np.ascontiguousarray(new_w0))
    if b0 is not None:
        m0.bias.data = torch.from_numpy(b0 / scale)
    m1.weight.data = torch.from_numpy(np.ascontiguousarray(_scale_inputs(c1, m1, w1, scale)))
    return scale
