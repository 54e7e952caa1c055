"""The xmodel file format: XIR's serialized graph (``serial_v2``), restated as protobuf descriptors.

An ``.xmodel`` file is one serialized protobuf message ``serial_v2.Graph`` (no header, magic number
or checksum). The messages below restate, field number for field number, XIR's
``src/xir/proto/graph_proto_v2.proto`` (Vitis-AI 3.5, ``src/vai_runtime/xir``); docs/xmodel.md
describes them. They are built in Python with ``descriptor_pb2`` into a private descriptor pool, so
nothing is generated at install time and the same code runs with protobuf 3.20 (the Vitis AI image)
and protobuf 4-7 (here).

Field 101 ``op_defs`` (XIR's own catalogue of op types, about 73 kB of documentation text in every
file the real quantizer writes) is declared, so a reader keeps it; the project writes it only where
libxir itself is installed, taking the text from libxir (``catalogue``): libxir reads files without
it (docs/xmodel.md#op_defs).
"""
from typing import Any, Dict, List, Optional, Tuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "serial_v2"

_T = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "bool": _T.TYPE_BOOL, "int32": _T.TYPE_INT32, "uint32": _T.TYPE_UINT32, "int64": _T.TYPE_INT64,
    "uint64": _T.TYPE_UINT64, "float": _T.TYPE_FLOAT, "double": _T.TYPE_DOUBLE, "string": _T.TYPE_STRING,
    "bytes": _T.TYPE_BYTES,
}

# (field name, number, type: a scalar name or a message name, label: "" | "repeated" | "map", oneof)
_Field = Tuple[str, int, str, str]

# AttrValue's variants, in field order: (field, number, type). The vector and map variants wrap
# the repeated/map field ``value`` in a message of their own.
ATTR_VARIANTS = [
    ("bool_value", 4, "bool"), ("int32_value", 5, "int32"), ("uint32_value", 6, "uint32"),
    ("int64_value", 7, "int64"), ("uint64_value", 8, "uint64"), ("float_value", 9, "float"),
    ("double_value", 10, "double"), ("string_value", 11, "string"), ("bytes_value", 12, "Bytes"),
    ("bool_vec_value", 13, "BoolVec"), ("int32_vec_value", 14, "Int32Vec"), ("uint32_vec_value", 15, "Uint32Vec"),
    ("int64_vec_value", 16, "Int64Vec"), ("uint64_vec_value", 17, "Uint64Vec"), ("float_vec_value", 18, "FloatVec"),
    ("double_vec_value", 19, "DoubleVec"), ("string_vec_value", 20, "StringVec"), ("bytes_vec_value", 21, "BytesVec"),
    ("map_string_2_int32_value", 22, "MapString2Int32"), ("map_string_2_uint32_value", 23, "MapString2Uint32"),
    ("map_string_2_int64_value", 24, "MapString2Int64"), ("map_string_2_uint64_value", 25, "MapString2Uint64"),
    ("map_string_2_string_value", 26, "MapString2String"), ("map_string_2_bytes_value", 27, "MapString2Bytes"),
    ("map_string_2_int32_vec_value", 28, "MapString2Int32Vec"),
    ("map_string_2_uint32_vec_value", 29, "MapString2Uint32Vec"),
    ("map_string_2_int64_vec_value", 30, "MapString2Int64Vec"),
    ("map_string_2_uint64_vec_value", 31, "MapString2Uint64Vec"),
    ("map_string_2_string_vec_value", 32, "MapString2StringVec"),
]

_MESSAGES = {
    "Graph": [("graph_name", 1, "string", ""), ("op_node", 5, "OPNode", "repeated"), ("subg_root", 10, "SubGraph", ""),
              ("graph_attr", 11, "AttrValue", "map"), ("op_defs", 101, "OpDef", "repeated")],
    "OPNode": [("op_name", 1, "string", ""), ("op_type", 2, "string", ""), ("op_attr", 3, "AttrValue", "map"),
               ("args", 4, "OpArg", "repeated"), ("output_tensor", 5, "Tensor", "")],
    "OpArg": [("arg_name", 1, "string", ""), ("arg_ops", 2, "string", "repeated")],
    "Tensor": [("tensor_name", 1, "string", ""), ("tensor_dim", 2, "uint32", "repeated"), ("data_type", 5, "int32", ""),
               ("tensor_bit_width", 6, "int32", ""), ("tensor_attr", 10, "AttrValue", "map")],
    "SubGraph": [("subgraph_name", 1, "string", ""), ("op_name", 3, "string", "repeated"),
                 ("subg_attr", 5, "AttrValue", "map"), ("subg_child", 10, "SubGraph", "repeated")],
    "OpDef": [("name", 1, "string", ""), ("input_args", 2, "OpArgDef", "repeated"), ("attrs", 3, "AttrDef", "repeated"),
              ("annotation", 4, "string", "")],
    "AttrDef": [("name", 1, "string", ""), ("occur_type", 3, "int32", ""), ("default_value", 4, "AttrValue", ""),
                ("list_length", 6, "int32", ""), ("annotation", 7, "string", "")],
    "OpArgDef": [("name", 1, "string", ""), ("occur_type", 2, "int32", ""), ("data_type", 3, "int32", ""),
                 ("annotation", 4, "string", "")],
    "Bytes": [("value", 1, "bytes", "")],
}
for _name, _elem in [("BoolVec", "bool"), ("Int32Vec", "int32"), ("Uint32Vec", "uint32"), ("Int64Vec", "int64"),
                     ("Uint64Vec", "uint64"), ("FloatVec", "float"), ("DoubleVec", "double"),
                     ("StringVec", "string"), ("BytesVec", "Bytes")]:
    _MESSAGES[_name] = [("value", 1, _elem, "repeated")]
for _name, _elem in [("MapString2Int32", "int32"), ("MapString2Uint32", "uint32"), ("MapString2Int64", "int64"),
                     ("MapString2Uint64", "uint64"), ("MapString2Bytes", "Bytes"), ("MapString2String", "string"),
                     ("MapString2Int32Vec", "Int32Vec"), ("MapString2Uint32Vec", "Uint32Vec"),
                     ("MapString2Int64Vec", "Int64Vec"), ("MapString2Uint64Vec", "Uint64Vec"),
                     ("MapString2BytesVec", "BytesVec"), ("MapString2StringVec", "StringVec")]:
    _MESSAGES[_name] = [("value", 1, _elem, "map")]
# AttrDef.occur_type and OpArgDef.occur_type are enums in XIR's file; an enum travels as a varint,
# so int32 reads and writes the same bytes.


def _set_type(field: Any, type_name: str) -> None:
    if type_name in _SCALARS:
        field.type = _SCALARS[type_name]
    else:
        field.type = _T.TYPE_MESSAGE
        field.type_name = ".%s.%s" % (PACKAGE, type_name)


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
    fp = descriptor_pb2.FileDescriptorProto(name="vitis_pipeline_xir_serial_v2.proto", package=PACKAGE,
                                            syntax="proto3")
    for msg_name, fields in _MESSAGES.items():
        msg = fp.message_type.add(name=msg_name)
        for name, number, type_name, label in fields:
            field = msg.field.add(name=name, number=number)
            if label == "map":
                entry_name = "".join(p.capitalize() for p in name.split("_")) + "Entry"
                entry = msg.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                key = entry.field.add(name="key", number=1, label=_T.LABEL_OPTIONAL)
                key.type = _T.TYPE_STRING
                value = entry.field.add(name="value", number=2, label=_T.LABEL_OPTIONAL)
                _set_type(value, type_name)
                field.label = _T.LABEL_REPEATED
                field.type = _T.TYPE_MESSAGE
                field.type_name = ".%s.%s.%s" % (PACKAGE, msg_name, entry_name)
            else:
                field.label = _T.LABEL_REPEATED if label == "repeated" else _T.LABEL_OPTIONAL
                _set_type(field, type_name)
    attr = fp.message_type.add(name="AttrValue")
    attr.oneof_decl.add(name="value")
    for name, number, type_name in ATTR_VARIANTS:
        field = attr.field.add(name=name, number=number, label=_T.LABEL_OPTIONAL, oneof_index=0)
        _set_type(field, type_name)
    return fp


def message_classes(pool: Any, full_names: List[str]) -> List[Any]:
    """The generated message classes of ``full_names`` (``"package.Message"``) in descriptor ``pool``,
    in order: ``message_factory.GetMessageClass`` (protobuf >= 4.21), else one
    ``MessageFactory(pool).GetPrototype`` for them all (protobuf 3.20, the Vitis AI 3.5 image's), so
    a message field holds the very class of its type. Raises KeyError for a name not in the pool."""
    descs = [pool.FindMessageTypeByName(name) for name in full_names]
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:
        get_class = message_factory.MessageFactory(pool).GetPrototype
    return [get_class(desc) for desc in descs]


def _message_classes() -> Dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_proto())
    names = list(_MESSAGES) + ["AttrValue"]
    return dict(zip(names, message_classes(pool, ["%s.%s" % (PACKAGE, name) for name in names])))


_CLASSES = _message_classes()
Graph = _CLASSES["Graph"]
AttrValue = _CLASSES["AttrValue"]
OpDef = _CLASSES["OpDef"]
OP_DEFS_FIELD = 101

# attribute kinds this project writes and reads: kind -> AttrValue field; the vector kinds' elements
# sit in the wrapper message's ``value`` field
KIND_FIELDS = {name[:-len("_value")]: name for name, _, _ in ATTR_VARIANTS}


def attr_value(kind: str, value: Any) -> Any:
    """An ``AttrValue`` message holding ``value`` as the variant ``kind`` (a key of KIND_FIELDS,
    e.g. ``"int32"``, ``"int32_vec"``, ``"bytes"``, ``"float_vec"``).

    Raises:
        ValueError: an unknown kind, or a value the kind cannot hold (protobuf's own range checks).
    """
    if kind not in KIND_FIELDS:
        raise ValueError("unknown XIR attribute kind %r; known: %s" % (kind, ", ".join(sorted(KIND_FIELDS))))
    msg = AttrValue()
    field = KIND_FIELDS[kind]
    if kind == "bytes":
        getattr(msg, field).value = bytes(value)
    elif kind.endswith("_vec"):
        sub = getattr(msg, field)
        if kind == "bytes_vec":
            for v in value:
                sub.value.add().value = bytes(v)
        else:
            sub.value.extend(list(value))
        if not len(value):
            sub.SetInParent()  # an empty vector is still this variant
    elif kind.startswith("map_"):
        raise ValueError("map attributes are not written by this project (%s)" % kind)
    else:
        setattr(msg, field, value)
    return msg


def attr_python(msg: Any) -> Tuple[Optional[str], Any]:
    """``(kind, value)`` of an ``AttrValue`` message: scalars as Python values, vectors as lists,
    ``bytes`` as ``bytes``, maps as dicts; ``(None, None)`` for an unset one."""
    field = msg.WhichOneof("value")
    if field is None:
        return None, None
    kind = field[:-len("_value")]
    value = getattr(msg, field)
    if kind == "bytes":
        return kind, bytes(value.value)
    if kind == "bytes_vec":
        return kind, [bytes(v.value) for v in value.value]
    if kind.endswith("_vec"):
        return kind, list(value.value)
    if kind.startswith("map_"):
        inner = {}  # type: Dict[str, Any]
        for k, v in value.value.items():
            if hasattr(v, "value") and not isinstance(v, (bytes, str)):
                inner[k] = bytes(v.value) if kind == "map_string_2_bytes" else list(v.value)
            else:
                inner[k] = v
        return kind, inner
    return kind, value


def parse_graph(data: bytes) -> Any:
    """Parse the bytes of an .xmodel file into a ``serial_v2.Graph`` message.

    Raises:
        ValueError: the bytes are not a serialized Graph message.
    """
    msg = Graph()
    try:
        msg.ParseFromString(data)
    except Exception as e:  # protobuf raises DecodeError (a Message.Error subclass) and others
        raise ValueError("not an XIR graph (serial_v2.Graph): %s" % e)
    return msg


def _repeated(fd: Any) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 6; older ones have ``label`` only
    return bool(flag) if flag is not None else fd.label == _T.LABEL_REPEATED


def _canonical(m: Any, skip: Tuple[str, ...] = ()) -> Any:
    out = []  # type: List[Tuple[str, Any]]
    for fd in m.DESCRIPTOR.fields:
        if fd.name in skip:
            continue
        value = getattr(m, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value = [(k, _canonical(v) if hasattr(v, "DESCRIPTOR") else v) for k, v in sorted(value.items())]
        elif _repeated(fd):
            value = [_canonical(v) if hasattr(v, "DESCRIPTOR") else v for v in value]
        elif fd.containing_oneof is not None and m.WhichOneof(fd.containing_oneof.name) != fd.name:
            continue
        elif fd.message_type is not None:
            if fd.containing_oneof is None and not m.HasField(fd.name):
                continue
            value = _canonical(value)
        out.append((fd.name, value))
    return tuple(out)


def canonical(msg: Any) -> Any:
    """A comparable form of a Graph message: nested tuples and lists with every map sorted by key and
    ``op_defs`` left out. Two files hold the same graph when their canonical forms are equal
    (libxir writes protobuf maps in no fixed order, so the bytes of two equal graphs may differ)."""
    return _canonical(msg, skip=("op_defs",))


def canonical_op(op: Any) -> Any:
    """The comparable form of one ``OPNode`` (maps sorted), to say which ops of two graphs differ."""
    return _canonical(op)
