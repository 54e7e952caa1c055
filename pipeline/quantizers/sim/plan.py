"""Where the real quantizer puts its quantization points, and its fix_pos adjustments.

Re-implements, for the DPU path with the default strategy:

- quantization groups (``QuantInfoMgr.group_graph`` with the ``SoftFuse*`` commands of
  ``nndct_shared/quantization/commander.py``): a ReLU/ReLU6/LeakyReLU/Hardtanh, flatten, squeeze,
  permute, contiguous, ... node joins its parent's group when it is the parent's only child; a
  reshape joins its parent's group unconditionally. A group is quantized once, at its end.
- ``quant_output`` (``NndctGraphHolder.quant_output``): the node whose output carries a group's
  fix position: the group's last node, except that a node feeding only a concat, once (its output's
  one use: ``torch.cat([y, y])`` uses it twice), is quantized by the concat, and pure layout nodes (flatten, reshape, ...) defer to the node before them.
- which tensors get entries (``TorchNndctQstrategy.create_quant_config``): the parameters of
  every quantizable node, in node order: weights and bias of every conv/linear, weight and bias
  of every layer norm, and any state-dict tensor another quantizable node takes directly (an
  entry without a fix position: ``SimNode.free_params``); the quant output of every quantizable node (conv, linear, pools, add, mul,
  concat, resize, hswish, hsigmoid, input, ...); and the quant output of every parent of a
  quantizable node, except an input whose one consumer is a float operator nndct has no type for
  (``aten::<name>``, a CustomOp: the input is then left out of the quantized part). Nothing else is
  quantized; in particular a node's own output is quantized only if its name has an ``output`` entry
  (``need_quantize_tensor``).
- the export-time adjustments (``QuantizeFixPosChecker`` in ``torchquantizer.py`` and
  ``nndct_shared/quantization/fix_pos_adjust.py``; docs/arithmetic.md#export-time-adjustments): nearest
  resize takes its input's fix_pos, hsigmoid output >= 7, hsigmoid/hswish inputs >= 0, hswish output <=
  input + 7, and the conv/linear ``shift_cut`` / ``shift_bias`` ranges; optional concat/pool input
  alignment.
"""
from collections import OrderedDict
from typing import Dict, List, Optional

from ... import ops as g
from ...fx.graph import SimGraph, SimNode
from ...fx.naming import traced_constant
from .ops import adaptive_unquantized

POOL_TYPES = g.with_role("fix_align_pool")  # fix_pos_adjust: a pool's input takes its output's fix position


class QuantPlan:
    """The quantization points of a SimGraph.

    Attributes:
        graph: the SimGraph.
        groups: node name -> list of node names of its group (topological order).
        param_order: nndct param names in quant_info order.
        unquantized_params: the names of ``param_order`` that nndct registers without ever
            quantizing them (``SimNode.free_params``): their entry is ``[[bit_width, null]]``.
        output_order: node names (no class prefix) that carry an ``output`` entry, in order.
        unquantized_outputs: the names of ``output_order`` of quantizable-type nodes computing
            integer sizes (``(4 - W % 4)``, ``B * num_windows``): torch.jit traces them as int64
            tensors, which nndct registers but never quantizes (its warning
            ``QUANTIZER_TORCH_TENSOR_TYPE_NOT_QUANTIZABLE``): ``[[bit_width, null]]``; and adaptive
            average pools whose output size does not divide their input size on the example
            (``ops.adaptive_unquantized``), which nndct leaves unscaled and never quantizes.
        may_stay_null: the names of ``output_order`` calibration may leave without a fix position (null
            entry, no error): ``unquantized_outputs`` and every adaptive average pool (uneven in every batch).
        output_entries: node name -> the pairs of its ``output`` entry, for the quantizable nodes with
            several outputs (``SimNode.outputs``: nndct enters each of their ``out_tensors``; the first
            carries the fix position). A float operator's entry (its outputs feeding a quantizable
            node) holds its float outputs only: the first (the values of ``topk``).
    """

    def __init__(self, graph: SimGraph) -> None:
        self.graph = graph
        self.groups = _make_groups(graph)
        self.param_order = []  # type: List[str]
        self.output_order = []  # type: List[str]
        self.unquantized_outputs = []  # type: List[str]
        self._create_config()
        self.output_entries = {n.name: n.outputs for n in graph.nodes
                               if n.outputs > 1 and n.name in self.output_order and self.quantizable(n)}
        quantized = set(p for n in graph.nodes if self.quantizable(n) for p in n.param_names.values())
        self.unquantized_params = [p for p in self.param_order if p not in quantized]

    def quantizable(self, node: SimNode) -> bool:
        """True for node types the real quantizer quantizes (QUANTIZABLE_OPS; the op table's
        ``quantizable``), shape arithmetic excepted, in a quantized part (``SimNode.in_quant_part``:
        ``NndctGraphHolder.is_node_quantizable``)."""
        return g.spec(node.op).quantizable and not node.shape_value and node.in_quant_part

    def quant_output(self, node: SimNode) -> SimNode:
        """The node whose output carries ``node``'s fix position (``quant_output`` in nndct); a node
        outside the quantized parts is its own."""
        if not node.in_quant_part:
            return node
        group = self.groups[node.name]
        by_name = self.graph.by_name
        end = by_name[group[-1]]
        if len(end.users) == 1 and end.users[0].op == g.CONCAT and not end.is_output:
            return end.users[0]
        idx = -1
        while g.spec(end.op).layout:
            idx -= 1
            if -idx > len(group):
                break
            end = by_name[group[idx]]
        while g.spec(end.op).layout and end.inputs:
            end = end.inputs[0]
        return end

    def _create_config(self) -> None:
        outputs = OrderedDict()  # type: Dict[str, None]
        for node in self.graph.nodes:
            if node.shape_value and g.spec(node.op).quantizable and node.op != g.SHAPE:
                outputs.setdefault(node.name, None)
                self.unquantized_outputs.append(node.name)
            if not self.quantizable(node):
                continue
            for name in list(node.param_names.values()) + node.free_params:
                if name not in self.param_order:
                    self.param_order.append(name)
            outputs.setdefault(self.quant_output(node).name, None)
        for node in self.graph.nodes:
            if not self.quantizable(node) or node.op in (g.INPUT, g.CONCAT) or node.op in g.QUANT_START_TYPES:
                continue
            for parent in node.inputs:
                end = self.quant_output(parent)
                if not end.shape_value and not traced_constant(end):
                    outputs.setdefault(end.name, None)
        for node in self.graph.nodes:
            # an input whose one consumer is a float operator nndct has no type for (a CustomOp: aten::<name>,
            # e.g. a padding='same' conv's aten::_convolution_mode) loses its entry (create_quant_config, the
            # loop that checks the input fix of the quantized ops)
            consumers = set(node.users)
            if node.op == g.INPUT and len(consumers) == 1 and next(iter(consumers)).op.startswith("aten::"):
                outputs.pop(self.quant_output(node).name, None)
        self.output_order = list(outputs)
        self.unquantized_outputs.extend(n.name for n in self.graph.nodes if n.op == g.ADAPTIVEAVGPOOL2D
                                        and n.name in outputs and adaptive_unquantized(self.graph, n))
        # nndct decides an adaptive pool per forward: one uneven in every calibration batch never gets a fix
        # position, whatever the example's size (docs/arithmetic.md#adaptive-average-pool-that-does-not-divide)
        self.may_stay_null = set(self.unquantized_outputs) | set(
            n.name for n in self.graph.nodes if n.op == g.ADAPTIVEAVGPOOL2D and n.name in outputs)


def _make_groups(graph: SimGraph) -> Dict[str, List[str]]:
    groups = {n.name: [n.name] for n in graph.nodes}  # type: Dict[str, List[str]]
    order = {n.name: i for i, n in enumerate(graph.nodes)}

    def glue(start: str, member: str) -> None:
        members = groups[start]
        for name in groups[member]:
            if name not in members:
                members.append(name)
        for name in members:
            groups[name] = members

    changed = True
    while changed:
        changed = False
        for n in graph.nodes:
            if groups[n.name][0] != n.name or not n.in_quant_part:  # group_up: the quantized parts only
                continue
            if g.spec(n.op).group_up and len(n.inputs) == 1:
                parent = n.inputs[0]
                if len(parent.users) == 1 and not parent.is_output:
                    glue(groups[parent.name][0], n.name)
                    changed = True
            elif n.op == g.RESHAPE:
                for parent in n.inputs:
                    if _is_reshape_parent(parent):
                        glue(groups[parent.name][0], n.name)
                        changed = True
                        break
    return {k: sorted(v, key=order.__getitem__) for k, v in groups.items()}


def _is_reshape_parent(node: SimNode) -> bool:
    # commander.py SoftFuseReshape: a shape node never, a mul if its first parent qualifies
    if node.op == g.SHAPE:
        return False
    if node.op == g.MULTIPLY:
        return bool(node.inputs) and _is_reshape_parent(node.inputs[0])
    return True


def adjust_fix_pos(plan: QuantPlan, param_fp: Dict[str, int], output_fp: Dict[str, int],
                   change_concat_input_fix: bool = False, change_pool_input_fix: bool = False,
                   warn=None) -> List[str]:
    """Apply the real quantizer's export-time fix_pos adjustments in place (docs/arithmetic.md#export-time-adjustments).

    Args:
        plan: the QuantPlan.
        param_fp: nndct param name -> fix_pos (modified in place).
        output_fp: node name (no class prefix) -> fix_pos (modified in place).
        change_concat_input_fix, change_pool_input_fix: the quant_config_file switches.
        warn: optional callable taking a message for every adjustment made.

    Returns:
        The list of adjustment messages (nndct prints them as warnings).
    """
    notes = []  # type: List[str]

    def note(msg: str) -> None:
        notes.append(msg)
        if warn is not None:
            warn(msg)

    def key(node: SimNode) -> str:
        # get/set_quant_config: a node's own entry if it has one, else its quant output's
        return node.name if node.name in output_fp else plan.quant_output(node).name

    def get_out(node: SimNode) -> Optional[int]:
        return output_fp.get(key(node))

    def set_out(node: SimNode, fp: int) -> None:
        name = key(node)
        if name in output_fp:
            output_fp[name] = fp

    nodes = plan.graph.nodes
    for node in reversed(nodes):
        if not plan.quantizable(node):
            continue
        if (node.op == g.CONCAT and change_concat_input_fix) or (node.op in POOL_TYPES and change_pool_input_fix):
            fp = get_out(node)
            if fp is not None:
                for parent in node.inputs:
                    set_out(parent, fp)

    for node in nodes:
        if not plan.quantizable(node):
            continue
        if node.op == g.RESIZE and _is_nearest(plan.graph, node) and plan.quant_output(node).op != g.CONCAT:
            fp = get_out(node.inputs[0])
            if fp is not None:
                set_out(node, fp)
        if node.op in (g.HSIGMOID, g.HSWISH):
            if node.op == g.HSIGMOID:
                fp = get_out(node)
                if fp is not None and fp < 7:
                    set_out(node, 7)
            for parent in node.inputs:
                fp = get_out(parent)
                if fp is not None and fp < 0:
                    set_out(parent, 0)
            if node.op == g.HSWISH:
                fi, fo = get_out(node.inputs[0]), get_out(node)
                if fi is not None and fo is not None and fi + 7 < fo:
                    set_out(node, fi + 7)
        if node.op in g.BIAS_CORR_TYPES:  # conv and dense (shift_cut / shift_bias)
            _shift_cut_bias(plan, node, param_fp, get_out, set_out, note)
    return notes


def _is_nearest(graph: SimGraph, node: SimNode) -> bool:
    fx_node = node.fx_node
    if fx_node.op == "call_module":
        return graph.module(node).mode == "nearest"
    mode = fx_node.kwargs.get("mode", fx_node.args[3] if len(fx_node.args) > 3 else "nearest")
    return mode == "nearest"


def _shift_cut_bias(plan, node, param_fp, get_out, set_out, note) -> None:
    fi = get_out(node.inputs[0])
    fo = get_out(node)
    wname = node.param_names["weights"]
    fw = param_fp.get(wname)
    if fi is None or fo is None or fw is None:
        return
    shift_cut = fw + fi - fo
    if shift_cut < 0:
        note("output %s value is too small, so adjust the fix position from %d to %d"
             % (plan.quant_output(node).name, fo, fo + shift_cut))
        set_out(node, fo + shift_cut)
    elif shift_cut > 16:
        note("weight %s value is too small, so adjust the fix position from %d to %d"
             % (node.name, fw, fw - shift_cut + 16))
        fw = fw - shift_cut + 16
        param_fp[wname] = fw
    bname = node.param_names.get("bias")
    if bname is None or bname not in param_fp:
        return
    fb = param_fp[bname]
    shift_bias = fw + fi - fb
    shift_bias_min = min(0, -(24 - (8 + shift_cut)))
    if shift_bias < shift_bias_min:
        note("bias %s value is too small, so adjust the fix position from %d to %d"
             % (bname, fb, fb + shift_bias - shift_bias_min))
        param_fp[bname] = fb + shift_bias - shift_bias_min
    elif shift_bias > 16:
        note("weight %s value is too small, so adjust the fix position from %d to %d"
             % (wname, fw, fw - shift_bias + 16))
        param_fp[wname] = fw - shift_bias + 16
