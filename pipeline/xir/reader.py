"""Read an ``.xmodel`` file and check it the way a loader would, without libxir.

:func:`read_xmodel` parses the bytes (``schema.parse_graph``); :func:`check` verifies the parsed graph
against XIR's op definitions (``opdefs``) by replaying it op by op through :class:`xgraph.XGraph`, as
libxir rebuilds a graph it deserializes, and returns the rebuilt graph; :func:`describe` summarizes a
file for reports.

What :func:`check` verifies (every problem is collected, each naming its op, and one ``ExportError``
lists them all):

- ``op_node`` is a topological order: every name an op's arguments list is the name of an op that
  comes EARLIER in ``op_node`` (a later op, a missing op and the op itself are each reported);
- op names are non-empty and unique;
- every argument is one the op type's definition has, with an input count its occurrence allows;
  no argument is listed twice;
- every attribute the definition REQUIRES is present, and every attribute the definition declares
  has the definition's kind (attributes the definition does not declare are allowed);
- ``fix`` ops: a ``round_mode`` XIR knows (``DPU_ROUND``, ``STD_ROUND``, ``PY3_ROUND``) and a
  ``bit_width`` from 1 to 32 (the kinds are the definition's: int32 ``fix_point`` and ``bit_width``,
  bool ``if_signed``, string ``round_mode``);
- ``const`` ops: ``data`` holds 4 bytes per element of ``shape`` (float32), 8 for an int64 const;
- the output tensor: named like its op, the data type libxir gives it (``xgraph.output_data_type``: FLOAT 32
  but for an int64 const and what reshapes it), dims equal to the
  dims XIR's shape inference gives for the op (recomputed from its inputs and attributes), and the
  tensor attributes (``shape_info``) shape inference leaves;
- the root subgraph is named ``root`` and lists exactly the ops of ``op_node``, in the same order.

Downstream ops are checked against the inferred dims (not the file's), so a wrong dim is reported
once, at the op that has it; an op that has a problem stands in for itself with the file's dims and
attributes, so the ops after it are still checked in full.
"""
import math
import os
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple, Union

from ..errors import ExportError
from . import opdefs, schema
from .xgraph import CONST_TYPES, FLOAT32, XGraph, XGraphError, XOp

ROUND_MODES = ("DPU_ROUND", "STD_ROUND", "PY3_ROUND")  # XIR's fix op definition
ROOT = "root"


def read_xmodel(path_or_bytes: Union[str, os.PathLike, bytes, bytearray, memoryview]) -> Any:
    """Parse an ``.xmodel`` file (a path) or its bytes into a ``serial_v2.Graph`` message.

    Returns:
        The parsed message (``op_defs``, field 101, kept when the file has it).

    Raises:
        ExportError: the file cannot be read, or the bytes are not an XIR graph: not a protobuf
            ``serial_v2.Graph`` message, or one without a single op (empty or unrelated bytes parse
            as an empty message; protobuf keeps unknown fields, so random bytes may parse too).
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data, what = bytes(path_or_bytes), "the given bytes"
    else:
        what = os.fspath(path_or_bytes)
        try:
            with open(what, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ExportError("xmodel: cannot read %s: %s" % (what, e)) from e
    try:
        msg = schema.parse_graph(data)
    except ValueError as e:
        raise ExportError("xmodel: %s (%d bytes) are not an XIR .xmodel file: %s" % (what, len(data), e)) from e
    if not msg.op_node:
        raise ExportError("xmodel: %s (%d bytes) are not an XIR .xmodel file: no op in it (a serialized "
                          "serial_v2.Graph lists its ops in field 5)" % (what, len(data)))
    return msg


def _file_attrs(node: Any) -> Dict[str, Tuple[Optional[str], Any]]:
    return {k: schema.attr_python(v) for k, v in node.op_attr.items()}


def _check_args(node: Any, definition: opdefs.OpDef, index: Dict[str, int], position: int,
                problems: List[str]) -> None:
    name = node.op_name
    declared = {a.name: a for a in definition.args}
    seen = set()  # type: set
    for arg in node.args:
        if arg.arg_name in seen:
            problems.append("op %r (%s): argument %r is listed twice" % (name, node.op_type, arg.arg_name))
        seen.add(arg.arg_name)
        if arg.arg_name not in declared:
            problems.append("op %r (%s): the type has no argument %r (it has: %s)" % (
                name, node.op_type, arg.arg_name, ", ".join(sorted(declared)) or "none"))
        for src in arg.arg_ops:
            where = index.get(src)
            if src == name:
                problems.append("op %r (%s): argument %r names the op itself" % (name, node.op_type, arg.arg_name))
            elif where is None:
                problems.append("op %r (%s): argument %r names op %r, which is not in the file"
                                % (name, node.op_type, arg.arg_name, src))
            elif where > position:
                problems.append("op %r (%s): argument %r names op %r, which comes later in op_node (%d > %d): "
                                "the ops are not in a topological order"
                                % (name, node.op_type, arg.arg_name, src, where, position))
    for arg in definition.args:
        count = sum(len(a.arg_ops) for a in node.args if a.arg_name == arg.name)
        if not opdefs._OCCURS[arg.occur](count):
            problems.append("op %r (%s): argument %r is %s but has %d inputs"
                            % (name, node.op_type, arg.name, arg.occur.upper(), count))


def _check_attrs(node: Any, definition: opdefs.OpDef, attrs: Dict[str, Tuple[Optional[str], Any]],
                 problems: List[str]) -> None:
    name = node.op_name
    for attr in definition.attrs:
        kind = attrs.get(attr.name, (None, None))[0]
        if attr.name not in attrs or kind is None:
            if attr.required:
                problems.append("op %r (%s): required attribute %r is missing" % (name, node.op_type, attr.name))
        elif kind != attr.kind:
            problems.append("op %r (%s): attribute %r is stored as %s, the definition says %s"
                            % (name, node.op_type, attr.name, kind, attr.kind))
    for key, (kind, _) in attrs.items():
        if kind is None:
            problems.append("op %r (%s): attribute %r holds no value" % (name, node.op_type, key))
    if node.op_type == "fix":
        mode = attrs.get("round_mode", (None, None))
        if mode[0] == "string" and mode[1] not in ROUND_MODES:
            problems.append("op %r (fix): round_mode %r is none of %s" % (name, mode[1], ", ".join(ROUND_MODES)))
        width = attrs.get("bit_width", (None, None))
        if width[0] == "int32" and not 1 <= width[1] <= 32:
            problems.append("op %r (fix): bit_width %d is not in 1..32" % (name, width[1]))
    if node.op_type == "const":
        data, shape = attrs.get("data", (None, None)), attrs.get("shape", (None, None))
        if data[0] == "bytes" and shape[0] == "int32_vec":
            count = math.prod(shape[1]) if shape[1] else 0
            type_name = attrs.get("data_type", (None, "float32"))[1]
            width = CONST_TYPES[type_name][2] // 8 if type_name in CONST_TYPES else 4
            if len(data[1]) != width * count:
                problems.append("op %r (const): data holds %d bytes, shape %s needs %d (%d per %s value)"
                                % (name, len(data[1]), list(shape[1]), width * count, width,
                                   type_name if type_name in CONST_TYPES else "float32"))


def _check_tensor(node: Any, problems: List[str]) -> None:
    tensor, name = node.output_tensor, node.op_name
    if tensor.tensor_name != name:
        problems.append("op %r (%s): output tensor is named %r, not like its op" % (name, node.op_type,
                                                                                  tensor.tensor_name))


def _infer(graph: XGraph, node: Any, attrs: Dict[str, Tuple[Optional[str], Any]], inputs: Dict[str, List[XOp]],
           problems: List[str]) -> Optional[XOp]:
    """The op created as the file has it (in ``graph`` when every input is an op of it, else as a
    stand-in), its inferred output compared with the file's; None when it cannot be created."""
    name, values = node.op_name, {k: v for k, (_, v) in attrs.items()}
    try:
        if all(graph.get_op(i.name) is i for ops in inputs.values() for i in ops):
            op = graph.create_op(name, node.op_type, values, inputs)
        else:  # an input had a problem: infer from its stand-in, outside the graph
            definition = opdefs.get(node.op_type)
            op = XOp(name, node.op_type, opdefs.typed_attrs(definition, name, values), inputs, -1)
            opdefs.check_args(definition, name, inputs)
            op.shape, op.tensor_attrs = opdefs.infer_shape(definition, op)
    except XGraphError as e:
        problems.append(str(e))
        return None
    for key, entry in attrs.items():  # an undeclared attribute keeps the kind the file stores it as
        op.attrs[key] = entry
    found = (node.output_tensor.data_type, node.output_tensor.tensor_bit_width)
    if found != tuple(op.data_type):
        problems.append("op %r (%s): output tensor has data_type %d with bit width %d, expected %d with %d (%s)"
                        % (name, node.op_type, found[0], found[1], op.data_type[0], op.data_type[1],
                           "FLOAT" if op.data_type[0] == FLOAT32 else "its data type as libxir gives it"))
    dims = [int(d) for d in node.output_tensor.tensor_dim]
    if op.shape != dims:  # downstream ops see the inferred dims
        problems.append("op %r (%s): output dims %s, but XIR's shape inference gives %s"
                        % (name, node.op_type, dims, op.shape))
    tensor_attrs = {k: schema.attr_python(v) for k, v in node.output_tensor.tensor_attr.items()}
    if tensor_attrs != op.tensor_attrs:
        problems.append("op %r (%s): output tensor attributes %s, but XIR's shape inference leaves %s"
                        % (name, node.op_type, tensor_attrs, op.tensor_attrs))
    return op


def _stand_in(node: Any, attrs: Dict[str, Tuple[Optional[str], Any]], inputs: Dict[str, List[XOp]]) -> XOp:
    """An op that had a problem, as the file has it (its dims, attributes and tensor attributes), for
    checking the ops that take it as input."""
    known = {arg: [i for i in ops if i is not None] for arg, ops in inputs.items()}
    op = XOp(node.op_name, node.op_type, {k: v for k, v in attrs.items() if v[0] is not None}, known, -1)
    op.shape = [int(d) for d in node.output_tensor.tensor_dim]
    op.tensor_attrs = {k: schema.attr_python(v) for k, v in node.output_tensor.tensor_attr.items()}
    return op


def _check_root(msg: Any, names: List[str], problems: List[str]) -> None:
    root = msg.subg_root
    if root.subgraph_name != ROOT:
        problems.append("root subgraph: named %r, expected %r" % (root.subgraph_name, ROOT))
    listed = list(root.op_name)
    if listed == names:
        return
    listed_set, names_set = set(listed), set(names)
    for name in names:
        if name not in listed_set:
            problems.append("op %r: missing from the root subgraph %r" % (name, root.subgraph_name))
    for name in listed:
        if name not in names_set:
            problems.append("op %r: listed by the root subgraph %r but not in op_node" % (name, root.subgraph_name))
    in_file = Counter(names)
    for name, count in Counter(listed).items():
        if count > max(1, in_file[name]):
            problems.append("op %r: listed %d times by the root subgraph %r" % (name, count, root.subgraph_name))
    if listed_set == names_set and len(listed) == len(names):
        problems.append("root subgraph %r: lists the ops in another order than op_node (first difference at "
                        "position %d: %r instead of %r)" % (root.subgraph_name,
                                                            *next((i, a, b) for i, (a, b) in
                                                                  enumerate(zip(listed, names)) if a != b)))


def check(msg: Any) -> XGraph:
    """Verify a parsed xmodel (see the module docstring for every check) and rebuild it.

    Args:
        msg: a ``serial_v2.Graph`` message (:func:`read_xmodel`); not modified.

    Returns:
        The graph as an :class:`XGraph` named like the file's graph, its ops created in ``op_node``
        order (``graph.ops`` is the file's order), each with the file's attributes (and kinds), the
        defaults of optional attributes the file leaves out, its inputs and its output dims.

    Raises:
        ExportError: one or more problems; the message lists all of them, each naming its op.
    """
    problems = []  # type: List[str]
    graph = XGraph(msg.graph_name)
    names = [node.op_name for node in msg.op_node]
    index = {}  # type: Dict[str, int]
    built = {}  # type: Dict[str, XOp]  # name -> the op rebuilt, or a stand-in when it had a problem
    for position, name in enumerate(names):
        index.setdefault(name, position)
    if not msg.graph_name:
        problems.append("graph: has no name")
    for position, node in enumerate(msg.op_node):
        name = node.op_name
        if not name:
            problems.append("op #%d (%s): has no name" % (position, node.op_type))
            continue
        if index[name] != position:
            problems.append("op %r (%s): defined twice in op_node (positions %d and %d)"
                            % (name, node.op_type, index[name], position))
            continue
        try:
            definition = opdefs.get(node.op_type)
        except XGraphError as e:
            problems.append("op %r: %s" % (name, e))
            built[name] = _stand_in(node, _file_attrs(node), {})
            continue
        before = len(problems)
        attrs = _file_attrs(node)
        _check_args(node, definition, index, position, problems)
        _check_attrs(node, definition, attrs, problems)
        _check_tensor(node, problems)
        inputs = {a.arg_name: [built.get(src) for src in a.arg_ops] for a in node.args if a.arg_ops}
        op = None
        if len(problems) == before and all(i is not None for ops in inputs.values() for i in ops):
            op = _infer(graph, node, attrs, inputs, problems)
        built[name] = op if op is not None else _stand_in(node, attrs, inputs)
    _check_root(msg, names, problems)
    if problems:
        raise ExportError("xmodel check: %d problem%s in graph %r:\n- %s" % (
            len(problems), "" if len(problems) == 1 else "s", msg.graph_name, "\n- ".join(problems)))
    return graph


def describe(msg: Any) -> Dict[str, Any]:
    """A summary of a parsed xmodel for reports (no check: see :func:`check`).

    Returns:
        ``{"graph": name, "ops": op count, "op_types": {type: count} (sorted by type),
        "fix_ops": count of fix ops, "inputs": [{"name", "shape"}] (the data ops, in file order),
        "outputs": [{"name", "type", "shape"}] (the ops no other op takes as input, in file order)}``.
    """
    consumed = {src for node in msg.op_node for arg in node.args for src in arg.arg_ops}
    types = Counter(node.op_type for node in msg.op_node)
    return {
        "graph": msg.graph_name,
        "ops": len(msg.op_node),
        "op_types": dict(sorted(types.items())),
        "fix_ops": types.get("fix", 0),
        "inputs": [{"name": node.op_name, "shape": [int(d) for d in node.output_tensor.tensor_dim]}
                   for node in msg.op_node if node.op_type == "data"],
        "outputs": [{"name": node.op_name, "type": node.op_type,
                     "shape": [int(d) for d in node.output_tensor.tensor_dim]}
                    for node in msg.op_node if node.op_name not in consumed],
    }
