"""The nndct nodes of the rewritten fx graph (``capture``, step 4): ``NodeBuilder`` visits the fx
nodes in order and makes the ``SimNode``s nndct's parser makes (constants, sizes, chunk/split
pieces, parameters), before they are numbered (``naming``)."""
import operator
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx
from torch import nn

from ..errors import QuantizationError
from .. import ops as t
from .classify import classify, float_operand, getitem_kind, is_number, split_pieces
from .graph import SimNode
from ..ops import ARITHMETIC_TYPES, CONST, INPUT, PARAM_TYPES, SHAPE, STRIDED_SLICE
from .shape_tuples import ShapeTuples, is_access


# what a functional form's message asks for, by family
_OWN = {"layer_norm": ("weight and bias", "nn.LayerNorm, or F.layer_norm(x, shape, self.weight, self.bias, eps)"),
        "prelu": ("slopes", "nn.PReLU, or F.prelu(x, self.weight)")}


class NodeBuilder:
    """Turns the rewritten fx graph into SimNodes (nndct's nodes, in nndct's order)."""

    def __init__(self, root: nn.Module, class_name: str, shapes: ShapeTuples, strict: bool = True,
                 param_names: Optional[Dict[str, Dict[str, str]]] = None) -> None:
        self.root = root
        self.param_names = param_names or {}  # module path -> nndct param names (inlined attention)
        self.strict = strict
        self.class_name = class_name
        self.shapes = shapes
        self.size_nodes = {}  # type: Dict[Tuple[torch.fx.Node, int], SimNode]
        self.by_fx = {}  # type: Dict[torch.fx.Node, SimNode]
        self.helper_src = {}  # type: Dict[torch.fx.Node, List[SimNode]]
        self.pieces = {}  # type: Dict[torch.fx.Node, int]
        self.consts = []  # type: List[SimNode]
        self.nodes = []  # type: List[SimNode]
        self.steps = []  # type: List[Tuple[torch.fx.Node, Optional[SimNode]]]
        self.called = {}  # type: Dict[str, int]
        self.picks = {}  # type: Dict[torch.fx.Node, Tuple[SimNode, int]]
        self._state = None  # type: Optional[set]

    def resolve(self, fx_node: torch.fx.Node) -> List[SimNode]:
        if fx_node in self.by_fx:
            return [self.by_fx[fx_node]]
        return list(self.helper_src.get(fx_node, []))

    def resolve_all(self, fx_nodes) -> List[SimNode]:
        out = []  # type: List[SimNode]
        for n in fx_nodes:
            for s in self.resolve(n):
                if s not in out:
                    out.append(s)
        return out

    def operands(self, args: Any) -> List[SimNode]:
        """The producers of a call's operands in argument order (lists and tuples flattened), as nndct's
        ``in_nodes`` has them: a tensor given twice (``y * y``, ``torch.cat([y, y])``) is there twice (its
        node's output has two uses); what a helper (a size read, a getattr) stands for is added once."""
        def flat(items: Any) -> List[torch.fx.Node]:
            found = []  # type: List[torch.fx.Node]
            for a in items:
                found.extend(flat(a) if isinstance(a, (list, tuple)) else [a] if isinstance(a, torch.fx.Node) else [])
            return found
        out = []  # type: List[SimNode]
        for a in flat(args):
            out.extend(s for s in self.resolve(a) if a in self.by_fx or s not in out)
        return out

    def helper(self, fx_node: torch.fx.Node, sources: List[SimNode]) -> None:
        self.helper_src[fx_node] = sources
        self.steps.append((fx_node, None))

    def add(self, fx_node: Optional[torch.fx.Node], op: str, inputs: List[SimNode]) -> SimNode:
        node = SimNode("", op, fx_node)
        node.inputs = inputs
        node.shape_value = op == SHAPE or (bool(inputs) and all(i.shape_value for i in inputs)
                                           and not float_operand(fx_node)
                                           and not (fx_node is not None  # a tensor attribute (ViT's class token)
                                                    and any(a.op == "get_attr" for a in fx_node.all_input_nodes)))
        self.nodes.append(node)
        if fx_node is not None:
            self.by_fx[fx_node] = node
            self.steps.append((fx_node, node))
        return node

    def const(self, value: Any) -> SimNode:
        node = SimNode("", CONST, None)
        node.value = value
        node.shape_value = isinstance(value, int)
        self.consts.append(node)
        return node

    def visit(self, fx_node: torch.fx.Node) -> None:
        if fx_node.op == "placeholder":
            self.add(fx_node, INPUT, [])
        elif fx_node.op == "get_attr":
            self.helper(fx_node, [])
        elif fx_node in self.shapes.tuples:
            if is_access(fx_node):  # its nndct_shape nodes, made here in dimension order
                for d in self.shapes.read[fx_node]:
                    self.size_nodes[(fx_node, d)] = self.add(None, SHAPE, self.resolve(fx_node.args[0]))
            self.helper(fx_node, [self.size_nodes[e] for e in self.shapes.elements(fx_node) if e in self.size_nodes])
        elif fx_node in self.shapes.sizes:
            size = self.shapes.sizes[fx_node]
            self.helper(fx_node, [self.size_nodes[size]] if size in self.size_nodes else [])
        elif picked(fx_node) is not None and fx_node.args[0] in self.by_fx \
                and self.by_fx[fx_node.args[0]].outputs > 1:
            # one output of a node with several: no node of torch.jit's trace, the consumer reads it
            self.picks[fx_node] = (self.by_fx[fx_node.args[0]], picked(fx_node))
            self.helper(fx_node, [self.by_fx[fx_node.args[0]]])
        elif fx_node.op == "call_function" and fx_node.target is getattr:
            self.helper(fx_node, self.resolve(fx_node.args[0]))
        elif split_pieces(fx_node) is not None:
            self.pieces[fx_node] = split_pieces(fx_node)
            self.helper(fx_node, self.resolve(fx_node.args[0]))
        elif fx_node.op == "call_function" and fx_node.target is operator.getitem \
                and isinstance(fx_node.args[0], torch.fx.Node) and fx_node.args[0] in self.helper_src \
                and fx_node.args[0].op != "get_attr" and fx_node.args[0] not in self.picks:  # a picked output
            self.getitem(fx_node)
        elif fx_node.op == "call_function" and fx_node.target is operator.setitem:
            # x[idx] = v: torch traces a slice of x and its in-place fill_ (copy_ for a tensor v)
            piece = self.add(None, STRIDED_SLICE, self.resolve(fx_node.args[0]))
            if is_number(fx_node.args[2]):
                value = self.const(float(fx_node.args[2]))
                self.add(fx_node, t.FILL, [piece, value]).const_args = {2: value}
            else:
                self.add(fx_node, "aten::copy_", [piece] + self.resolve_all(fx_node.all_input_nodes[1:]))
        else:
            self.operator(fx_node)

    def getitem(self, fx_node: torch.fx.Node) -> None:
        base = fx_node.args[0]
        sources = self.helper_src[base]
        if base in self.pieces:
            inputs = list(sources)
            if fx_node.args[1] == self.pieces[base] - 1 and self.pieces[base] > 1:
                inputs.append(self.add(None, SHAPE, list(sources)))  # the end index of the last piece
            self.add(fx_node, STRIDED_SLICE, inputs)
        else:
            self.helper(fx_node, sources)

    def operator(self, fx_node: torch.fx.Node) -> None:
        op = classify(self.root, fx_node, self.strict)
        outputs = 1
        taken = [picked(u) for u in fx_node.users if picked(u) is not None]
        if taken and (op not in t.OPS or op in t.SEVERAL):  # a call returning several tensors, indexed
            op, outputs = t.SEVERAL.get(op, (op, max(2, 1 + max(taken))))
        elif op == STRIDED_SLICE and fx_node.target is operator.getitem:
            op = getitem_kind(fx_node.args[1])
        if op in ARITHMETIC_TYPES:
            inputs, consts = [], {}  # type: List[SimNode], Dict[int, SimNode]
            for i, a in enumerate(fx_node.args):
                if is_number(a):
                    consts[i] = self.const(a)
                    inputs.append(consts[i])
                elif isinstance(a, torch.fx.Node):  # a tensor given twice is two inputs (nndct's in_nodes)
                    inputs.extend(s for s in self.resolve(a) if a in self.by_fx or s not in inputs)
            kw = [v for v in fx_node.kwargs.values() if isinstance(v, torch.fx.Node)]
            inputs.extend(s for s in self.resolve_all(kw) if s not in inputs)
            if 0 in consts and op in (t.ADD, t.MULTIPLY, t.SUB) and len(inputs) == 2:
                # c + x, c * x, c - x: torch traces add(x, c), mul(x, c), rsub(x, c): the tensor first
                inputs = inputs[1:] + inputs[:1]
                op = t.RSUB if op == t.SUB else op
            node = self.add(fx_node, op, inputs)
            node.const_args = consts
        elif op in t.OPERAND_LIST_TYPES:
            node = self.add(fx_node, op, self.operands(list(fx_node.args) + list(fx_node.kwargs.values())))
        else:
            node = self.add(fx_node, op, self.resolve_all(fx_node.all_input_nodes) + self.prelude(fx_node))
        node.outputs = outputs
        if op in t.NORM_TYPES:
            self.norm_params(fx_node, node)
        elif t.spec(op).quantizable and op not in PARAM_TYPES:
            state = self.state_names()
            node.free_params = ["%s::%s" % (self.class_name, a.target) for a in fx_node.all_input_nodes
                                if a.op == "get_attr" and a.target in state]
        if op in PARAM_TYPES:
            self.called[fx_node.target] = self.called.get(fx_node.target, 0) + 1
            if self.called[fx_node.target] > 1 and self.strict:
                raise QuantizationError("module %r is called more than once; the sim quantizer "
                                        "needs one module per conv/linear/batch-norm use" % fx_node.target)
            m = self.root.get_submodule(fx_node.target)
            names = self.param_names.get(fx_node.target, {"weights": "%s.weight" % fx_node.target,
                                                          "bias": "%s.bias" % fx_node.target})
            node.param_names["weights"] = "%s::%s" % (self.class_name, names["weights"])
            if m.bias is not None:
                node.param_names["bias"] = "%s::%s" % (self.class_name, names["bias"])

    def prelude(self, fx_node: torch.fx.Node) -> List[SimNode]:
        """The nodes torch.jit traces in a module's forward before its own op (``record.Prelude``: an
        ``nn.LSTM``'s zero initial states), added before the module's node; returns those that feed it."""
        if fx_node.op != "call_module" or not fx_node.args or not isinstance(fx_node.args[0], torch.fx.Node):
            return []
        m = self.root.get_submodule(fx_node.target)
        make = t.PRELUDES.get(type(m))
        if make is None:
            return []
        first = self.resolve(fx_node.args[0])
        made, feeds = [], []  # type: List[SimNode], List[SimNode]
        for op, inputs, feeds_it in make(m, len(fx_node.args), lambda: self.shapes.rank_of(fx_node.args[0])):
            made.append(self.add(None, op, [s for i in inputs for s in (first if i < 0 else [made[i]])]))
            if feeds_it:
                feeds.append(made[-1])
        return feeds

    def state_names(self) -> set:
        """The state-dict names of the working copy (parameters and persistent buffers): the tensors
        nndct's parser makes graph parameters."""
        if self._state is None:
            self._state = set(self.root.state_dict(keep_vars=True))
        return self._state

    def norm_params(self, fx_node: torch.fx.Node, node: SimNode) -> None:
        """The weight and bias names of a node whose module quantizes its own parameters (a layer norm's
        gamma and beta, PReLU's slopes): the module's, or the tensors the functional form is given
        (``F.layer_norm(x, shape, weight, bias, eps)``, ``F.prelu(x, weight)``: the positions of the op's
        signature), which must be the model's own (a get_attr)."""
        if fx_node.op == "call_module":
            m = self.root.get_submodule(fx_node.target)
            given = [(k, fx_node.target + "." + a if getattr(m, a, None) is not None else None)
                     for k, a in (("weights", "weight"), ("bias", "bias"))]
        else:
            given = []
            names = t.SIGNATURES[node.op][0]  # every norm type's record gives its functional signature
            for k, a in (("weights", "weight"), ("bias", "bias")):
                if a not in names:
                    continue
                index = names.index(a)
                arg = fx_node.args[index] if len(fx_node.args) > index else fx_node.kwargs.get(a)
                if arg is not None and not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
                    family = t.RECORD_OF[node.op].family
                    what, how = _OWN.get(family, ("parameters", "the module, or the model's own tensor"))
                    raise QuantizationError(
                        "node %r (%s): its %s is computed in forward(); the real quantizer quantizes a "
                        "%s's %s as parameters of the model: pass the module's own parameter (%s)"
                        % (fx_node.name, family, a, family.replace("_", " "), what, how))
                given.append((k, None if arg is None else arg.target))
        for k, path in given:
            if path is not None:
                node.param_names[k] = "%s::%s" % (self.class_name, path)


# the attributes a call returning several tensors names them by (torch.return_types: max, min, topk, sort)
_NAMED_OUTPUTS = {"values": 0, "indices": 1}


def picked(fx_node: torch.fx.Node) -> Optional[int]:
    """The index of the output ``fx_node`` takes of its first argument's result, where it takes one by
    an int (``y[0]``) or by name (``.values``, ``.indices``); else None."""
    if fx_node.op != "call_function" or len(fx_node.args) != 2 or not isinstance(fx_node.args[0], torch.fx.Node):
        return None
    if fx_node.target is operator.getitem and isinstance(fx_node.args[1], int) \
            and not isinstance(fx_node.args[1], bool):
        return fx_node.args[1]
    if fx_node.target is getattr:
        return _NAMED_OUTPUTS.get(fx_node.args[1])
    return None
