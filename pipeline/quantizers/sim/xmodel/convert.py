"""Deploy graph -> XIR graph: the ops the real quantizer creates for each nndct node, in its order.

Restates ``XirCompiler.do_compile`` (``nndct_shared/compile/xir_compiler.py``); the per-type creators
of ``nndct_shared/compile/xop_creator.py`` are the records' (``OpRecord.xmodel``, each in its unit under
``pipeline/ops/``; a type no record holds is a custom op) (Vitis-AI 3.5; docs/xmodel.md#ops): first one
``const`` + ``fix`` pair per parameter, node by node (a transposed conv's weights flipped in H and
W), then every node in deploy-graph order. A tensor with a fix position gets a ``fix`` op named
``<op>_fix`` (``fix_point`` = its fix_pos, ``bit_width``, ``if_signed`` true, ``round_mode``
"DPU_ROUND"); op names are the nndct names with every character outside [0-9A-Za-z] made ``_``.
"""
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ....errors import ExportError
from .... import fixpoint
from .... import ops as t
from .devgraph import Graph, Node
from ....xir.xgraph import XGraph, XOp, formal_name

FixTable = Dict[str, Tuple[int, int]]  # nndct tensor or node name -> (bit_width, fix_pos)


class _Writer:
    def __init__(self, graph: Graph, params: FixTable, outputs: FixTable) -> None:
        self.graph = graph
        self.params = params
        self.outputs = outputs
        self.x = XGraph(graph.name)

    # ---------------------------------------------------------------- helpers (xgraph.py in nndct)
    def fix(self, op: XOp, key: str, table: FixTable) -> XOp:
        if key not in table:
            return op
        bit_width, fix_pos = table[key]
        return self.fix_op(op, bit_width, fix_pos)

    def fix_op(self, op: XOp, bit_width: int, fix_pos: int) -> XOp:
        """The ``fix`` op ``<op>_fix`` of ``op`` (signed, DPU_ROUND)."""
        return self.x.create_op(op.name + "_fix", "fix", {"fix_point": fix_pos, "bit_width": bit_width,
                                                          "round_mode": "DPU_ROUND", "if_signed": True},
                                {"input": [op]})

    def fixed_const(self, name: str, data: np.ndarray) -> XOp:
        data = np.asarray(data)  # float32, or an index buffer's int64 (XmodelForm.param_operands)
        op = self.x.create_const_op(formal_name(name), data if data.dtype == np.int64 else data.astype(np.float32))
        return self.fix(op, name, _merged(self.params, self.outputs))

    def fixed_op(self, name: str, type_: str, attrs: Optional[Dict[str, Any]] = None,
                 inputs: Optional[Dict[str, List[XOp]]] = None) -> XOp:
        op = self.x.create_op(formal_name(name), type_, attrs, inputs)
        return self.fix(op, name, _merged(self.params, self.outputs))

    def op_of(self, name: str) -> XOp:
        """The op standing for an nndct node or tensor: its fix op if it has one (``get_op_by_name``)."""
        formal = formal_name(name)
        op = self.x.get_op(formal + "_fix") or self.x.get_op(formal)
        if op is None:
            raise ExportError("xmodel: %r has no op yet (the deploy graph is out of order)" % name)
        return op

    def data_inputs(self, node: Node) -> List[XOp]:
        """The ops of the node's data inputs, in order; a parameter operand (a tensor no node makes) is its
        const, by the parameter's name (``xop_creator.binary_op``)."""
        return [self.op_of(tensor.name if tensor.node is None else tensor.node.name) for tensor in node.in_tensors]

    def with_params(self, node: Node, type_: str, attrs: Dict[str, Any]) -> None:
        """Op ``type_`` of the node with its parameters (``weights``, ``bias``) and data inputs as arguments."""
        inputs = {kind: [self.op_of(tensor.name)] for kind, tensor in node.params.items()}
        inputs["input"] = self.data_inputs(node)
        self.fixed_op(node.name, type_, attrs, inputs)

    def custom(self, node: Node, attrs: Optional[Dict[str, Any]] = None) -> None:
        """A custom op (a type XIR does not define): the node's type, ``attrs`` (the node's attributes
        nndct's ``custom_xop`` writes for its type: a layer norm's; none by default), its output shape and
        data type; its inputs every input tensor in order, a parameter tensor as its const (nndct's
        ``custom_xop``: ``aten::_convolution_mode`` takes x, weight, bias; one among the inputs in argument
        order, ``XmodelForm.param_operands``, is written there). ``attrs`` may name another ``data_type``
        (``nndct_shape``: INT32); a bool output (a comparison: ``nndct_equal``, ``aten::ne``) is ``bool``."""
        params = [self.op_of(tensor.name) for tensor in node.params.values()
                  if not any(tensor is i for i in node.in_tensors)]
        written = dict(attrs or {})
        # custom_xop: the output tensor's dtype as to_xir_dtype_by_string gives it (float32: FLOAT32, bool as is)
        default = "bool" if node.out.dtype == "bool" else "FLOAT32"
        written.update({"shape": list(node.out.shape or [1]), "data_type": written.get("data_type", default)})
        self.fixed_op(node.name, node.type, written, {"input": self.data_inputs(node) + params})

    # ---------------------------------------------------------------- the graph
    def write(self) -> XGraph:
        for node in self.graph.nodes:
            for kind, tensor in node.params.items():
                if self.x.get_op(formal_name(tensor.name) + "_fix") or self.x.get_op(formal_name(tensor.name)):
                    continue
                data = tensor.data
                form = t.xmodel_form(node.type)
                if kind == "weights" and form is not None and form.const_weights is not None:
                    data = form.const_weights(data)  # a transposed conv's, flipped (the record's)
                self.fixed_const(tensor.name, data)
        for node in self.graph.nodes:
            form = t.xmodel_form(node.type)  # the op's record; none: a custom op (aten::*)
            if form is not None:
                form.create(self, node)
            else:
                self.custom(node)
        return self.x


def _merged(params: FixTable, outputs: FixTable) -> FixTable:
    merged = dict(params)
    merged.update(outputs)
    return merged


def write(graph: Graph, params: FixTable, outputs: FixTable) -> XGraph:
    """The XGraph the real quantizer builds from a deploy graph.

    Args:
        graph: the optimized deploy graph (``deploy.optimize``).
        params: parameter tensor name (``<Class>::conv1.weight``) -> (bit_width, fix_pos).
        outputs: nndct node name -> (bit_width, fix_pos) for every quantized node output.

    Raises:
        ExportError: the graph refers to an op before creating it.
        xir.errors.XGraphError: an op XIR's definitions refuse (a missing attribute, a shape mismatch).
    """
    return _Writer(graph, params, outputs).write()
