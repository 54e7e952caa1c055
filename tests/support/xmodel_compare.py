"""Compares two xmodel files the way the real quantizer's own files compare to each other: as parsed
messages, ``op_defs`` aside (the references are stored without it) and maps sorted (the real files'
bytes differ between identical runs).

Op names and the torch that made them. An xmodel op is named after the debug name of the value
``torch.jit``'s tracer gave the traced op (``MLP__MLP_Flatten_flatten__ret_1``, ``FloatOps__1122``;
docs/xmodel.md#names), and the tracer numbers values as it creates them, which depends on the torch
version: the real quantizer run with torch 1.13.1 (the Vitis AI 3.5 image) writes ``..._ret_3`` and
``FloatOps__1181`` where the stored references, made with torch 2.13.0 (``REFERENCE_TORCH``;
tests/data/README.md), have ``..._ret_1`` and ``FloatOps__1122``. The simulation names ops from a trace
of the same kind, so under this torch it names them as the real quantizer would under this torch.

The rule, in one place (``numbering_matches_references``, by ``tests.support.torch_line_of_references``):
a torch of the references' major version numbers trace values as they do (2.13.0 made them; 2.14.1 and 2.15.0 were reported to give the same
names), and is compared exactly. Under another (torch 1.13) two files hold the same graph when

(a) they have the same number of ops and each op's name equals the other's at the same position except
    for its runs of digits (``names_differ_only_in_numbers``), and
(b) after renaming each op of one file to the name of the op at the same position of the other (and
    every reference to it: the inputs' ``arg_ops``, its output tensor's name, the root subgraph's op
    lists; ``rename_ops``), the two canonical messages are equal: the same op types, attributes,
    constants, fix positions, shapes and edges, in the same order.

Measured on torch 1.13.1 against every stored reference (golden_xmodel, corpus_real, attention_real):
the names differ in numbers only, every other byte of the canonical message is equal.
"""
import hashlib
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from pipeline.xir import schema
from tests.support import REFERENCE_TORCH, torch_line_of_references

_DIGITS = re.compile(r"[0-9]+")


def numbering_matches_references(version: Optional[str] = None) -> bool:
    """True when torch ``version`` (this torch's by default) numbers ``torch.jit`` trace values as
    ``REFERENCE_TORCH`` did, so that op names are compared exactly: the same major version (module
    docstring). False for torch 1.x, whose files are compared by the rule (a) + (b)."""
    return torch_line_of_references(version)


def numbering_note() -> str:
    """One line saying how op names are compared under this torch (for assertion messages)."""
    if numbering_matches_references():
        return "op names compared exactly (torch %s numbers trace values as %s did)" % (torch.__version__,
                                                                                       REFERENCE_TORCH)
    return ("op names compared up to their runs of digits and renamed by position (torch %s numbers trace "
            "values otherwise than %s, which made the references)" % (torch.__version__, REFERENCE_TORCH))


def load(path_or_bytes: Any) -> Any:
    """The ``serial_v2.Graph`` message of an xmodel file (a path or its bytes), ``op_defs`` removed."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        data = bytes(path_or_bytes)
    else:
        with open(path_or_bytes, "rb") as f:
            data = f.read()
    graph = schema.parse_graph(data)
    del graph.op_defs[:]
    return graph


def op_names(graph: Any) -> List[str]:
    """The graph's op names in file order."""
    return [op.op_name for op in graph.op_node]


def names_differ_only_in_numbers(mine: Sequence[str], real: Sequence[str]) -> List[str]:
    """Rule (a): the positions where two op name lists differ other than in runs of digits, as
    readable lines (empty when none; a different count is one line)."""
    if len(mine) != len(real):
        return ["%d ops vs %d ops" % (len(mine), len(real))]
    return ["op %d: %r vs %r differ in more than numbers" % (i, a, b) for i, (a, b) in enumerate(zip(mine, real))
            if _DIGITS.sub("0", a) != _DIGITS.sub("0", b)]


def rename_ops(graph: Any, names: Sequence[str]) -> Any:
    """Rule (b): rename, IN PLACE, op ``i`` of ``graph`` to ``names[i]`` and every reference to it: the
    ``arg_ops`` of every input, an output tensor named after an op, the op lists of the root subgraph
    and its children. Returns ``graph``. Raises ValueError when the counts differ or the new names
    are not unique."""
    old = op_names(graph)
    if len(old) != len(names) or len(set(names)) != len(names):
        raise ValueError("rename_ops: %d ops, %d names (%d distinct)" % (len(old), len(names), len(set(names))))
    new = dict(zip(old, names))  # type: Dict[str, str]
    for op in graph.op_node:
        op.op_name = new[op.op_name]
        if op.output_tensor.tensor_name in new:
            op.output_tensor.tensor_name = new[op.output_tensor.tensor_name]
        for arg in op.args:
            arg.arg_ops[:] = [new.get(n, n) for n in arg.arg_ops]

    def subgraph(sub: Any) -> None:
        sub.op_name[:] = [new.get(n, n) for n in sub.op_name]
        for child in sub.subg_child:
            subgraph(child)
    if graph.HasField("subg_root"):
        subgraph(graph.subg_root)
    return graph


def differences(mine: Any, real: Any) -> List[str]:
    """Readable differences between two parsed graphs: op order and names first, then per op."""
    a, b = [(o.op_name, o.op_type) for o in mine.op_node], [(o.op_name, o.op_type) for o in real.op_node]
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return ["op order/names differ from op %d: mine %s, real %s (%d vs %d ops)"
                % (first, a[first:first + 3], b[first:first + 3], len(a), len(b))]
    out = ["op %s differs" % x.op_name for x, y in zip(mine.op_node, real.op_node)
           if schema.canonical_op(x) != schema.canonical_op(y)]
    return out or ["graph fields other than the ops differ"]


def assert_same_xmodel(mine_path: Any, real_path: Any, exact_names: Optional[bool] = None) -> None:
    """AssertionError listing the differences unless the two files hold the same graph.

    Args:
        mine_path, real_path: xmodel files (paths or bytes); ``real_path`` the stored reference.
        exact_names: compare op names exactly (True) or by the rule (a) + (b) of the module docstring
            (False); None: ``numbering_matches_references()`` decides.
    """
    mine, real = load(mine_path), load(real_path)
    if exact_names is None:
        exact_names = numbering_matches_references()
    if not exact_names:
        problems = names_differ_only_in_numbers(op_names(mine), op_names(real))
        assert not problems, problems[:5] + [numbering_note()]
        rename_ops(mine, op_names(real))
    assert schema.canonical(mine) == schema.canonical(real), differences(mine, real) + [numbering_note()]


def digest(path_or_bytes: Any) -> Tuple[List[str], str]:
    """What is stored of a real file too large to keep (torchvision's VGG-11: 515 MB): its op names in
    file order, and the sha256 of the ``repr`` of its canonical message (``schema.canonical``) with
    every op renamed to its position (``op_<i>``, ``rename_ops``) and every bytes value (weights,
    constants) replaced by its own sha256. ``assert_same_digest`` compares a file with them."""
    graph = load(path_or_bytes)
    names = op_names(graph)
    rename_ops(graph, ["op_%d" % i for i in range(len(names))])
    return names, hashlib.sha256(repr(_hashed_bytes(schema.canonical(graph))).encode("utf-8")).hexdigest()


def _hashed_bytes(value: Any) -> Any:
    if isinstance(value, bytes):
        return "sha256:" + hashlib.sha256(value).hexdigest()
    if isinstance(value, (tuple, list)):
        return type(value)(_hashed_bytes(v) for v in value)
    return value


def assert_same_digest(mine_path: Any, names: Sequence[str], sha256: str, exact_names: Optional[bool] = None) -> None:
    """AssertionError unless the file ``mine_path`` holds the graph whose ``digest`` is ``(names, sha256)``:
    the op names equal (``exact_names``; None: ``numbering_matches_references()`` decides) or equal up to
    their runs of digits (rule (a)), and the positional digests equal (rule (b))."""
    mine_names, mine_sha256 = digest(mine_path)
    if exact_names is None:
        exact_names = numbering_matches_references()
    if exact_names:
        assert mine_names == list(names), names_differ_only_in_numbers(mine_names, names)[:5] or "op counts differ"
    else:
        problems = names_differ_only_in_numbers(mine_names, names)
        assert not problems, problems[:5] + [numbering_note()]
    assert mine_sha256 == sha256, "the graphs differ beyond their op names (ops, attributes, constants or edges)"


def reference_for_this_torch(real_path: Any, mine_path: Any, exact_names: Optional[bool] = None) -> bytes:
    """The bytes of the reference file ``real_path`` with its ops named as this torch names them.

    Where this torch numbers trace values as the references' torch (``exact_names`` None and
    ``numbering_matches_references()``, or True), the file's bytes unchanged. Otherwise each op of the
    reference (and every reference to it) is renamed to the name of the op at the same position of
    ``mine_path`` (this torch's file of the same model: the simulation's), after checking rule (a)
    and that the op types agree position by position (AssertionError otherwise). A copy: the file
    is not written.
    """
    if exact_names is None:
        exact_names = numbering_matches_references()
    if exact_names:
        if isinstance(real_path, (bytes, bytearray)):
            return bytes(real_path)
        with open(real_path, "rb") as f:
            return f.read()
    real, mine = load(real_path), load(mine_path)
    problems = names_differ_only_in_numbers(op_names(mine), op_names(real))
    assert not problems, problems[:5] + [numbering_note()]
    types = [(i, a.op_type, b.op_type) for i, (a, b) in enumerate(zip(mine.op_node, real.op_node))
             if a.op_type != b.op_type]
    assert not types, ["op %d: type %s vs %s" % t for t in types[:5]] + [numbering_note()]
    return rename_ops(real, op_names(mine)).SerializeToString(deterministic=True)
