"""An XIR graph in memory, built the way libxir builds one, and its serialized form.

The real quantizer writes an xmodel through libxir's Python API (``xir.Graph.create_op``,
``create_const_op``, ``serialize``). What lands in the file follows from how libxir stores the graph
(Vitis-AI 3.5, ``src/vai_runtime/xir``; docs/xmodel.md#how-libxir-orders-a-graph):

- ops are vertices of a ``boost::adjacency_list<listS, listS, bidirectionalS>`` in creation order;
  creating an op adds one edge per input, argument by argument in argument-name order (the inputs
  are a ``std::map``), ops in list order within an argument (``OpImp::set_input_ops``);
- an optional attribute the caller leaves out gets the op definition's default
  (``OpImp::set_attrs``); an attribute takes the kind its definition declares (``add_op`` in the
  Python wrapper casts to it); the output tensor's shape comes from the op type's shape inference;
- ``Graph::serialize`` writes the ops in ``boost::topological_sort`` order (a depth-first search
  over the vertices in creation order, out-edges in insertion order, ops listed in reverse finish
  order) and the root subgraph ``root``, a leaf listing every op in the same order.

:class:`XGraph` reproduces exactly that, so equal construction sequences give equal files.
"""
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import catalogue, opdefs, schema
from .errors import XGraphError

# every character outside [0-9A-Za-z] becomes "_" in op names (nndct_shared/compile/xgraph.py)
_NAME_PATTERN = re.compile(r"[^0-9A-Za-z]")
FLOAT32 = 4  # xir::DataType::Type FLOAT (data_type.hpp: INT, UINT, XINT, XUINT, FLOAT, BFLOAT, UNKNOWN)
FLOAT32_BITS = 32
INT = 0  # xir::DataType::Type INT
# the data types a const is written with: xir::DataType's name -> (numpy dtype of its bytes, type, bit width).
# nndct writes a parameter or buffer const in its own dtype (``XGraph.create_const_op``, ``xgraph.py``): float32,
# or int64 for an index buffer (observed: tests/data/refused_real/index_gather)
CONST_TYPES = {"float32": ("<f4", FLOAT32, 32), "int64": ("<i8", INT, 64)}
_TYPE_NAMES = {"INT": 0, "UINT": 1, "XINT": 2, "XUINT": 3, "FLOAT": 4, "BFLOAT": 5}
_DATA_TYPE = re.compile(r"([A-Za-z]+)([0-9]+)")


def parse_data_type(name: str) -> Optional[Tuple[int, int]]:
    """``(type, bit width)`` of a data type name as ``xir::DataType(std::string)`` parses it (``util/data_type.cpp``:
    a type name in upper or lower case, then the bit width: ``float32``, ``INT32``, ``int64``); None for a name it
    refuses or a type it sets to UNKNOWN."""
    match = _DATA_TYPE.fullmatch(name)
    if match is None:
        return None
    word = match.group(1)
    type_ = _TYPE_NAMES.get(word) if word.isupper() else _TYPE_NAMES.get(word.upper()) if word.islower() else None
    return None if type_ is None else (type_, int(match.group(2)))


def formal_name(name: str) -> str:
    """An nndct node or tensor name as an xmodel op name: every character outside [0-9A-Za-z]
    replaced by ``_`` (``ConvNet::ConvNet/Conv2d[conv1]/ret.1`` -> ``ConvNet__ConvNet_Conv2d_conv1__ret_1``)."""
    return _NAME_PATTERN.sub("_", name)


class XOp:
    """One op of an XGraph.

    Attributes:
        name: the op name (also its output tensor's name).
        type: the XIR op type (``conv2d``, ``fix``, ``const``, ``aten::silu``, ...).
        attrs: attribute name -> ``(kind, value)``; kind as in ``schema.KIND_FIELDS``; values are
            Python ints, floats, bools, strs, lists of them, or ``bytes`` (``const.data``).
        inputs: argument name -> input ops, in order.
        shape: the output tensor's dims (list of ints).
        tensor_attrs: the output tensor's attributes, ``(kind, value)`` per name (``shape_info``).
        index: creation index (the vertex's position in libxir's vertex list).
        data_type: the output tensor's ``(type, bit width)`` (``OpImp::create_output_tensor_``: an op without
            ``input`` takes its ``data_type`` attribute's, any other its first ``input``'s; FLOAT 32 but for an
            int64 const and what reshapes it).
    """

    def __init__(self, name: str, type_: str, attrs: Dict[str, Tuple[str, Any]],
                 inputs: Dict[str, List["XOp"]], index: int) -> None:
        self.name = name
        self.type = type_
        self.attrs = attrs
        self.inputs = inputs
        self.shape = []  # type: List[int]
        self.tensor_attrs = {}  # type: Dict[str, Tuple[str, Any]]
        self.index = index
        self.data_type = (FLOAT32, FLOAT32_BITS)  # type: Tuple[int, int]

    def attr(self, name: str, default: Any = None) -> Any:
        """The value of attribute ``name`` (without its kind), or ``default``."""
        return self.attrs[name][1] if name in self.attrs else default

    def input_list(self) -> List["XOp"]:
        """Every input op, argument by argument in argument-name order (libxir's edge order)."""
        return [op for arg in sorted(self.inputs) for op in self.inputs[arg]]

    def data(self) -> np.ndarray:
        """A const op's data as a float32 array of its shape (a copy; an int64 const's values converted)."""
        dtype = CONST_TYPES.get(str(self.attr("data_type", "float32")).lower(), CONST_TYPES["float32"])[0]
        return np.frombuffer(self.attr("data"), dtype=dtype).reshape(self.shape).astype(np.float32)

    def __repr__(self) -> str:
        return "XOp(%s: %s %s)" % (self.name, self.type, self.shape)


def output_data_type(op: XOp) -> Tuple[int, int]:
    """The data type of ``op``'s output tensor as libxir gives it (``OpImp::create_output_tensor_``): an op with no
    ``input`` takes its ``data_type`` attribute's, any other its first ``input``'s; libxir's shape inference keeps
    it (a ``reshape``'s output has its input's type)."""
    inputs = op.inputs.get("input")
    if inputs and op.type != "cast":  # a cast's output has the type it names
        return inputs[0].data_type
    parsed = parse_data_type(str(op.attr("data_type", "")))
    if parsed is None:
        raise XGraphError("op %r (%s): data_type %r is no data type libxir reads" % (op.name, op.type,
                                                                                   op.attr("data_type")))
    return parsed


class XGraph:
    """An XIR graph built op by op, as ``xir.Graph`` builds one.

    Attributes:
        name: the graph name (the model's class name).
        ops: the ops in creation order.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.ops = []  # type: List[XOp]
        self._by_name = {}  # type: Dict[str, XOp]
        self._fanout = {}  # type: Dict[str, List[XOp]]

    def get_op(self, name: str) -> Optional[XOp]:
        """The op named ``name``, or None."""
        return self._by_name.get(name)

    def create_op(self, name: str, type_: str, attrs: Optional[Dict[str, Any]] = None,
                  inputs: Optional[Dict[str, Sequence[XOp]]] = None) -> XOp:
        """Add an op as ``xir.Graph.create_op(name, type, attrs, input_ops)`` does.

        Args:
            name: unique op name.
            type_: XIR op type; a type XIR does not define is a custom op (``opdefs.custom_def``).
            attrs: attribute name -> Python value; each is cast to the kind its definition declares
                (an attribute the definition does not know keeps the kind of its Python type).
            inputs: argument name -> input ops.

        Returns:
            The new op, with its output shape inferred.

        Raises:
            XGraphError: a duplicate name, an input op of another graph, a missing required
                attribute or argument, or an argument the op type does not have.
        """
        if name in self._by_name:
            raise XGraphError("op %r is defined twice" % name)
        definition = opdefs.get(type_)
        inputs = {k: list(v) for k, v in (inputs or {}).items()}
        for arg, ops in inputs.items():
            for op in ops:
                if self._by_name.get(op.name) is not op:
                    raise XGraphError("op %r: input %r is not an op of this graph" % (name, op.name))
        typed = opdefs.typed_attrs(definition, name, attrs or {})
        opdefs.check_args(definition, name, inputs)
        op = XOp(name, type_, typed, inputs, len(self.ops))
        op.shape, op.tensor_attrs = opdefs.infer_shape(definition, op)  # raises before the graph changes
        op.data_type = output_data_type(op)
        for in_op in op.input_list():
            self._fanout[in_op.name].append(op)
        self.ops.append(op)
        self._by_name[name] = op
        self._fanout[name] = []
        return op

    def create_const_op(self, name: str, data: np.ndarray) -> XOp:
        """Add a ``const`` op holding ``data`` as ``xir.Graph.create_const_op`` does: ``data`` the
        array's bytes in C order, ``data_type`` from its dtype (float32 or int64 here: ``CONST_TYPES``),
        ``shape`` its shape (a 0-d array must be made 1-d by the caller, as nndct does)."""
        array = np.ascontiguousarray(data)
        name_of = {np.dtype(np.float32): "float32", np.dtype(np.int64): "int64"}
        if array.dtype not in name_of:
            raise XGraphError("const op %r: only float32 and int64 data are written, got %s" % (name, array.dtype))
        type_name = name_of[array.dtype]
        return self.create_op(name, "const", {"data": array.astype(CONST_TYPES[type_name][0]).tobytes(),
                                              "data_type": type_name, "shape": [int(d) for d in array.shape]})

    def fanout(self, op: XOp) -> List[XOp]:
        """The ops that take ``op``'s output, one entry per edge, in edge-insertion order."""
        return list(self._fanout[op.name])

    def toposort(self) -> List[XOp]:
        """The ops in ``boost::topological_sort`` order over libxir's vertex and edge lists (the
        order of ``op_node`` in the file and of the root subgraph's ``op_name``)."""
        white, gray, black = 0, 1, 2
        color = {op.name: white for op in self.ops}
        finished = []  # type: List[XOp]
        for root in self.ops:
            if color[root.name] != white:
                continue
            color[root.name] = gray
            stack = [(root, iter(self._fanout[root.name]))]
            while stack:
                op, edges = stack[-1]
                for target in edges:
                    if color[target.name] == white:
                        color[target.name] = gray
                        stack.append((target, iter(self._fanout[target.name])))
                        break
                    if color[target.name] == gray:
                        raise XGraphError("the graph has a cycle through %r" % target.name)
                else:
                    stack.pop()
                    color[op.name] = black
                    finished.append(op)
        return finished[::-1]

    def to_message(self) -> Any:
        """The ``serial_v2.Graph`` message libxir's ``serialize`` writes for this graph (no graph
        attributes: the real quantizer sets none). ``op_defs`` where libxir is installed, as a process
        that writes only this graph has them (``catalogue.file_op_defs``); none without it."""
        msg = schema.Graph(graph_name=self.name)
        order = self.toposort()
        for op in order:
            node = msg.op_node.add(op_name=op.name, op_type=op.type)
            for key, (kind, value) in op.attrs.items():
                node.op_attr[key].CopyFrom(schema.attr_value(kind, value))
            for arg in opdefs.get(op.type).args:  # every argument of the definition, in its order
                node.args.add(arg_name=arg.name, arg_ops=[i.name for i in op.inputs.get(arg.name, [])])
            tensor = node.output_tensor
            tensor.tensor_name = op.name
            tensor.tensor_dim.extend(op.shape)
            tensor.data_type, tensor.tensor_bit_width = op.data_type
            for key, (kind, value) in op.tensor_attrs.items():
                tensor.tensor_attr[key].CopyFrom(schema.attr_value(kind, value))
        root = msg.subg_root
        root.subgraph_name = "root"
        root.op_name.extend(op.name for op in order)
        op_defs = catalogue.file_op_defs([op.type for op in self.ops])
        if op_defs:
            msg.op_defs.extend(op_defs)
        return msg

    def serialize(self) -> bytes:
        """The file's bytes (maps written in key order, so equal graphs give equal bytes here)."""
        return self.to_message().SerializeToString(deterministic=True)
