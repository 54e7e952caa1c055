"""A stored digest of an xmodel, for references whose files are too big to keep whole (the torchvision
families' real xmodels, 0.3 to 28 MB): the sha256 of the canonical message and a small structural summary
that says where two files part.

Canonical message: the ``serial_v2.Graph`` with ``op_defs`` (field 101) removed, serialized with
protobuf's deterministic serialization (every map written in key order), so that two files hold the same
graph exactly when their canonical hashes are equal, whatever order libxir wrote their maps in. It is the
form ``tests/support/xmodel_compare.py`` compares (``schema.canonical``), as bytes.

Summary (``summary``): the graph's name, attributes and the sha256 of its root subgraph's canonical form, then per op in file order:
name, type, every argument with its input ops, every attribute (a ``const``'s ``data`` replaced by the
sha256, byte count, dtype and shape of its bytes), the output tensor's dims, data type, bit width and
attributes. The ``fix`` attributes of a quantized tensor are its ``fix`` op's attributes (``fix_point``,
``bit_width``, ``if_signed``, ``round_mode``). ``first_difference`` compares two summaries and says
where they first part, in words.

``python tests/support/xmodel_digest.py XMODEL OUT_DIR`` writes ``OUT_DIR/canonical.sha256`` and
``OUT_DIR/summary.json.gz`` for an xmodel file.
"""
import gzip
import hashlib
import json
import os
import sys
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from pipeline.xir import schema  # noqa: E402

SHA_FILE, SUMMARY_FILE = "canonical.sha256", "summary.json.gz"


def canonical_bytes(graph: Any) -> bytes:
    """The canonical message of a parsed ``serial_v2.Graph`` as bytes: ``repr`` of
    ``schema.canonical(graph)`` (nested tuples and lists, every map sorted by key, ``op_defs`` left
    out), UTF-8. Not protobuf's own ``SerializeToString(deterministic=True)``: its map order depends on
    the protobuf implementation (protobuf 3.20's C++ one, the torch 1.13 env's, writes ``data_type``
    before ``data``; 7.x's upb the other way round), where this form is the same under both."""
    return repr(schema.canonical(graph)).encode("utf-8")


def canonical_sha256(graph: Any) -> str:
    """sha256 (hex) of ``canonical_bytes(graph)``."""
    return hashlib.sha256(canonical_bytes(graph)).hexdigest()


def _value(v: Any) -> Any:
    """A protobuf value as JSON: scalars as they are, bytes by digest, messages field by field."""
    if isinstance(v, bytes):
        return {"sha256": hashlib.sha256(v).hexdigest(), "bytes": len(v)}
    if not hasattr(v, "DESCRIPTOR"):
        return v
    if v.DESCRIPTOR.name == "AttrValue":
        which = v.WhichOneof("value")
        return None if which is None else {which: _value(getattr(v, which))}
    out = {}  # type: Dict[str, Any]
    for fd in v.DESCRIPTOR.fields:
        x = getattr(v, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            out[fd.name] = {k: _value(x[k]) for k in sorted(x)}
        elif schema._repeated(fd):
            out[fd.name] = [_value(y) for y in x]
        else:
            out[fd.name] = _value(x)
    return out


def _attrs(op: Any) -> Dict[str, Any]:
    attrs = {k: _value(op.op_attr[k]) for k in sorted(op.op_attr)}
    if op.op_type == "const" and "data" in attrs:
        data = attrs["data"]
        data["dtype"] = attrs.get("data_type")
        data["shape"] = attrs.get("shape")
    return attrs


def summary(graph: Any) -> Dict[str, Any]:
    """The structural summary of a parsed ``serial_v2.Graph`` (module docstring): a JSON-ready dict
    ``{"graph": {...}, "ops": [{name, type, args, attrs, dims, data_type, bit_width, tensor_attrs}]}``."""
    root = repr(schema.canonical_op(graph.subg_root)).encode("utf-8") if graph.HasField("subg_root") else b""
    ops = []  # type: List[Dict[str, Any]]
    for op in graph.op_node:
        t = op.output_tensor
        ops.append({"name": op.op_name, "type": op.op_type,
                    "args": [[a.arg_name, list(a.arg_ops)] for a in op.args], "attrs": _attrs(op),
                    "tensor": t.tensor_name, "dims": list(t.tensor_dim), "data_type": t.data_type,
                    "bit_width": t.tensor_bit_width,
                    "tensor_attrs": {k: _value(t.tensor_attr[k]) for k in sorted(t.tensor_attr)}})
    return {"graph": {"name": graph.graph_name,
                      "attrs": {k: _value(graph.graph_attr[k]) for k in sorted(graph.graph_attr)},
                      "subg_root_sha256": hashlib.sha256(root).hexdigest()},
            "ops": ops}


def _short(v: Any) -> str:
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= 300 else s[:300] + "..."


def first_difference(mine: Dict[str, Any], real: Dict[str, Any]) -> Optional[str]:
    """Where two summaries first part, in words (``op 17 'name' (conv2d): attrs.kernel: ours [3, 3],
    real [1, 1]``), or None when they are equal. Ops are compared position by position, field by field
    (name, type, args, each attribute, the output tensor), then the op counts, then the graph fields."""
    for i, (a, b) in enumerate(zip(mine["ops"], real["ops"])):
        if a == b:
            continue
        where = "op %d %r (%s)" % (i, b["name"], b["type"])
        for key in ("name", "type", "args"):
            if a[key] != b[key]:
                return "%s: %s: ours %s, real %s" % (where, key, _short(a[key]), _short(b[key]))
        for key in sorted(set(a["attrs"]) | set(b["attrs"])):
            if a["attrs"].get(key) != b["attrs"].get(key):
                return "%s: attr %s: ours %s, real %s" % (where, key, _short(a["attrs"].get(key, "(absent)")),
                                                         _short(b["attrs"].get(key, "(absent)")))
        for key in ("tensor", "dims", "data_type", "bit_width", "tensor_attrs"):
            if a[key] != b[key]:
                return "%s: output %s: ours %s, real %s" % (where, key, _short(a[key]), _short(b[key]))
    if len(mine["ops"]) != len(real["ops"]):
        n = min(len(mine["ops"]), len(real["ops"]))
        extra = (mine if len(mine["ops"]) > n else real)["ops"][n]
        return "ours has %d ops, real %d; the first op only %s has: %d %r (%s)" % (
            len(mine["ops"]), len(real["ops"]), "ours" if len(mine["ops"]) > n else "real", n, extra["name"],
            extra["type"])
    for key in sorted(set(mine["graph"]) | set(real["graph"])):
        if mine["graph"].get(key) != real["graph"].get(key):
            return "graph %s: ours %s, real %s" % (key, _short(mine["graph"].get(key)), _short(real["graph"].get(key)))
    return None


def write(graph: Any, out_dir: str) -> None:
    """Write ``canonical.sha256`` and ``summary.json.gz`` (gzip without a timestamp, so the same graph
    gives the same bytes) for a parsed graph into ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, SHA_FILE), "w") as f:
        f.write(canonical_sha256(graph) + "\n")
    text = json.dumps(summary(graph), sort_keys=True, separators=(",", ":")).encode()
    with open(os.path.join(out_dir, SUMMARY_FILE), "wb") as f:
        f.write(gzip.compress(text, 9, mtime=0) if sys.version_info >= (3, 8) else gzip.compress(text, 9))


def read(ref_dir: str) -> Dict[str, Any]:
    """``{"sha256": ..., "summary": ...}`` of a folder ``write`` made."""
    with open(os.path.join(ref_dir, SHA_FILE)) as f:
        sha = f.read().strip()
    with gzip.open(os.path.join(ref_dir, SUMMARY_FILE), "rt") as f:
        return {"sha256": sha, "summary": json.load(f)}


if __name__ == "__main__":
    from tests.support import xmodel_compare
    write(xmodel_compare.load(sys.argv[1]), sys.argv[2])
