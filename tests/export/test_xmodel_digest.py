"""The xmodel digests of tests/support/xmodel_digest.py (the stored form of the torchvision families' real
files), on a real file: the canonical hash does not depend on the order the maps were written in, and
the hash and the summary see a changed constant, fix position, attribute, edge, name or shape, the
summary saying where."""
import gzip
import json

import pytest

from pipeline.xir import schema
from tests.support import xmodel_compare as xc
from tests.support import xmodel_digest as xd
from tests.support.xmodel_golden_helper import golden_file

REAL = golden_file("golden", "resblock", "default")


def _copy(graph):
    copy = type(graph)()
    copy.CopyFrom(graph)
    return copy


def _varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(message, name, payload):
    """One length-delimited field of `message`'s type, on the wire: tag, length, bytes."""
    number = message.DESCRIPTOR.fields_by_name[name].number
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _op_with_maps_reversed(op):
    """The op's bytes with its attribute map's entries written in reverse key order. Messages of one type
    concatenated parse as one message, so each entry is serialized alone and appended by hand; letting
    protobuf re-serialize a rebuilt map would write whatever order its hash table iterates in."""
    bare = _copy(op)
    bare.op_attr.clear()
    out = bare.SerializeToString(deterministic=True)
    for key in sorted(op.op_attr, reverse=True):
        one = type(op)()
        one.op_attr[key].CopyFrom(op.op_attr[key])
        out += one.SerializeToString()
    return out


def test_the_hash_is_the_canonical_form_and_ignores_map_order():
    real = xc.load(REAL)
    assert xd.canonical_bytes(real) == repr(schema.canonical(real)).encode("utf-8")
    bare = _copy(real)
    del bare.op_node[:]
    shuffled = bare.SerializeToString(deterministic=True) + b"".join(
        _field(real, "op_node", _op_with_maps_reversed(op)) for op in real.op_node)
    assert any(len(op.op_attr) > 1 for op in real.op_node)
    assert shuffled != real.SerializeToString(deterministic=True)  # the maps' bytes in another order
    again = xc.load(shuffled)
    assert xd.canonical_sha256(again) == xd.canonical_sha256(real)
    assert xd.first_difference(xd.summary(again), xd.summary(real)) is None


@pytest.mark.parametrize("change, words", [
    ("constant", "attr data"), ("fix_point", "attr fix_point"), ("edge", "args"), ("name", "name"),
    ("dims", "output dims"), ("count", "ours has"),
])
def test_a_change_is_seen_and_located(change, words):
    real = xc.load(REAL)
    mine = _copy(real)
    if change == "constant":
        i, op = next((i, op) for i, op in enumerate(mine.op_node) if op.op_type == "const")
        data = bytearray(op.op_attr["data"].bytes_value.value)
        data[0] ^= 1
        op.op_attr["data"].bytes_value.value = bytes(data)
    elif change == "fix_point":
        i, op = next((i, op) for i, op in enumerate(mine.op_node) if op.op_type == "fix")
        op.op_attr["fix_point"].int32_value += 1
    elif change == "edge":
        i, op = next((i, op) for i, op in enumerate(mine.op_node) if op.op_type == "add")
        op.args[0].arg_ops[0] = mine.op_node[0].op_name
    elif change == "name":
        i = 3
        xc.rename_ops(mine, [n + ("x" if k == i else "") for k, n in enumerate(xc.op_names(mine))])
    elif change == "dims":
        i = 5
        mine.op_node[i].output_tensor.tensor_dim[0] += 1
    else:
        i = len(mine.op_node) - 1
        del mine.op_node[-1]
    assert xd.canonical_sha256(mine) != xd.canonical_sha256(real)
    where = xd.first_difference(xd.summary(mine), xd.summary(real))
    assert where is not None and words in where
    if change != "count":
        assert where.startswith("op %d %r" % (i, real.op_node[i].op_name))


def test_write_and_read_give_the_same_digest(tmp_path):
    real = xc.load(REAL)
    xd.write(real, str(tmp_path))
    first = (tmp_path / xd.SUMMARY_FILE).read_bytes()
    xd.write(real, str(tmp_path))
    assert (tmp_path / xd.SUMMARY_FILE).read_bytes() == first  # no timestamp in the gzip header
    got = xd.read(str(tmp_path))
    assert got["sha256"] == xd.canonical_sha256(real)
    assert got["summary"] == json.loads(gzip.decompress(first).decode())
    assert xd.first_difference(got["summary"], xd.summary(real)) is None
    assert [op["name"] for op in got["summary"]["ops"]] == xc.op_names(real)
