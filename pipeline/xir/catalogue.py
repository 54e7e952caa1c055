"""libxir's op catalogue (``op_defs``, ``serial_v2.Graph`` field 101) as the real quantizer's files carry it.

libxir's ``Graph::serialize`` (``serialize_v2.cpp``, ``get_op_defs``) writes one ``OpDef`` per op type its
process has registered (``OpDefFactoryImp::get_registered_ops``): XIR's built-in definitions
(``built_in_ops.cpp``, plus any an ``OPS_LIBRARY`` loads) and one definition per custom type the process
has met (``register_customized_operator_definition``, ``tool_function.cpp``: made when the first op of a
type XIR does not define is created). They come in the iteration order of the factory's
``std::unordered_map<std::string, OpDef>`` (``OpDefFactoryImp::store_``), after every other field of the file.
The text of the built-in definitions is XIR's own: the project does not carry it. It asks libxir for it
where libxir is installed (the ``xir`` Python module of the Vitis AI image): the catalogue of a graph
with no op, which libxir serializes like any other (:func:`builtin_op_defs`). Without libxir the project
writes no ``op_defs``, which libxir does not need to read a file (docs/xmodel.md#op_defs).

The custom definitions are a fixed template (:func:`custom_op_def`) placed where the map's order puts them
(:func:`with_customs`): with libstdc++, a key's bucket is ``std::hash<std::string>`` (:func:`libstdcxx_hash`)
modulo the bucket count, 127 for libxir's 106 built-ins (found from the real files: the only count from
107 to 761 that keeps each bucket's definitions together); the keys of one bucket are contiguous, and a
key inserted later goes first in its bucket's run, or first of all when its bucket was empty
(``_Hashtable::_M_insert_bucket_begin``). Past 127 keys the map rehashes into more buckets and every
position changes: not modelled, so no ``op_defs`` are written then (nor when libxir's own order does not
fit 127 buckets). Each file carries the custom types of its own ops, as a process that writes only that
file does; the real quantizer's process keeps every custom type it met, so its second file of a run
would also carry the first's (tests/data/refused_real/OP_DEFS.md).
"""
import os
import tempfile
from typing import Any, List, Optional, Sequence

from . import schema

BUCKETS = 127  # the bucket count of libxir's op-definition map holding the 106 built-ins (libstdc++)
CUSTOM_ANNOTATION = "This operator is not defined by XIR."
REPEATED = 2  # xir::OpArgDef::REPEATED
FLOAT = 4  # xir::DataType::FLOAT
_SHAPE_NOTE = "`Datatype`: `vector<int>`\n\nThe shape of the output tensor"
_DATA_TYPE_NOTE = ("`Datatype`: `string`\n\nThe data type of the data of output feature maps, we use FLOAT32 as "
                   "the default.")
_M64 = (1 << 64) - 1
_MUL = (0xc6a4a793 << 32) + 0x5bd1e995
_SEED = 0xc70f6907


def libstdcxx_hash(name: str) -> int:
    """``std::hash<std::string>`` of libstdc++ on a 64-bit platform: ``std::_Hash_bytes`` (MurmurHash64A
    over the UTF-8 bytes, seed ``0xc70f6907``), an unsigned 64-bit int."""
    data = name.encode("utf-8")
    h = _SEED ^ ((len(data) * _MUL) & _M64)
    aligned = len(data) & ~7

    def shift_mix(v: int) -> int:
        return v ^ (v >> 47)
    for i in range(0, aligned, 8):
        word = (shift_mix((int.from_bytes(data[i:i + 8], "little") * _MUL) & _M64) * _MUL) & _M64
        h = ((h ^ word) * _MUL) & _M64
    if len(data) & 7:
        h = ((h ^ int.from_bytes(data[aligned:], "little")) * _MUL) & _M64
    return shift_mix((shift_mix(h) * _MUL) & _M64)


def bucket(name: str) -> int:
    """The bucket of op type ``name`` in libxir's op-definition map (:data:`BUCKETS` buckets)."""
    return libstdcxx_hash(name) % BUCKETS


def custom_op_def(type_: str) -> Any:
    """The ``OpDef`` message libxir writes for op type ``type_`` that XIR does not define: one REPEATED FLOAT
    argument ``input``; REQUIRED ``shape`` (an empty int32 vector as its default, list length 0) and
    ``data_type`` (an empty string, list length 1), each with its annotation; the annotation
    :data:`CUSTOM_ANNOTATION` (``register_customized_operator_definition``, ``util/tool_function.cpp``;
    the same bytes but the name for every custom type in the real files)."""
    op_def = schema.OpDef(name=type_, annotation=CUSTOM_ANNOTATION)
    op_def.input_args.add(name="input", occur_type=REPEATED, data_type=FLOAT)
    op_def.attrs.add(name="shape", default_value=schema.attr_value("int32_vec", []), annotation=_SHAPE_NOTE)
    op_def.attrs.add(name="data_type", default_value=schema.attr_value("string", ""), list_length=1,
                     annotation=_DATA_TYPE_NOTE)
    return op_def


def _is_custom(op_def: Any) -> bool:
    return op_def.SerializeToString() == custom_op_def(op_def.name).SerializeToString()


def _from_libxir() -> Optional[List[Any]]:
    """The ``OpDef`` messages libxir writes into a file of an empty graph in this process, in its order, or
    None when the ``xir`` module is not importable or fails."""
    try:
        import xir  # the Vitis AI image's libxir binding
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "catalogue.xmodel")
            xir.Graph("catalogue").serialize(path)
            with open(path, "rb") as f:
                data = f.read()
    except Exception:  # ImportError where libxir is absent; anything else: libxir unusable here
        return None
    return [d for d in schema.parse_graph(data).op_defs if not _is_custom(d)]


_CACHE = []  # type: List[Optional[List[Any]]]


def builtin_op_defs() -> Optional[List[Any]]:
    """libxir's built-in op definitions (``OpDef`` messages, in its map's order), asked of libxir once per
    process; None without libxir. The custom types this process met before (their definitions are the
    template of :func:`custom_op_def`) are left out: removing a key changes no other key's order."""
    if not _CACHE:
        _CACHE.append(_from_libxir())
    return _CACHE[0]


def fits_buckets(names: Sequence[str]) -> bool:
    """Whether ``names`` (a map's iteration order) keeps each bucket's keys together under :data:`BUCKETS`
    buckets, as libstdc++'s map does with that many buckets."""
    seen = set()
    last = None
    for name in names:
        b = bucket(name)
        if b != last and b in seen:
            return False
        seen.add(b)
        last = b
    return True


def with_customs(builtins: Sequence[Any], op_types: Sequence[str]) -> Optional[List[Any]]:
    """The ``op_defs`` of a file whose ops have ``op_types`` (in creation order), as a fresh process writes it.

    Args:
        builtins: libxir's built-in ``OpDef`` messages in its order (:func:`builtin_op_defs`).
        op_types: the file's op types in op creation order; a type without a built-in definition is custom
            and gets :func:`custom_op_def`, inserted when its first op is met: first in its bucket's run, or
            first of all in an empty bucket.

    Returns:
        The ``OpDef`` messages in file order (the built-ins are the given messages themselves), or None
        where the order cannot be told: more than :data:`BUCKETS` keys (the map rehashes) or built-ins
        whose order does not fit :data:`BUCKETS` buckets.
    """
    names = [d.name for d in builtins]
    customs = []  # type: List[str]
    known = set(names)
    for type_ in op_types:
        if type_ not in known:
            known.add(type_)
            customs.append(type_)
    if len(names) + len(customs) > BUCKETS or not fits_buckets(names):
        return None
    order = list(builtins)
    buckets = [bucket(n) for n in names]
    for type_ in customs:
        b = bucket(type_)
        at = buckets.index(b) if b in buckets else 0
        order.insert(at, custom_op_def(type_))
        buckets.insert(at, b)
    return order


def file_op_defs(op_types: Sequence[str]) -> Optional[List[Any]]:
    """The ``op_defs`` the writer puts in a file whose ops have ``op_types`` (creation order): libxir's
    built-ins with the custom types' definitions (:func:`with_customs`); None without libxir or where the
    order cannot be told (the file then has no ``op_defs``)."""
    builtins = builtin_op_defs()
    return None if builtins is None else with_customs(builtins, op_types)
