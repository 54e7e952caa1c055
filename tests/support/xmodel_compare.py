"""Compares two xmodel files the way the real quantizer's own files compare to each other: as parsed
messages, ``op_defs`` aside (the references are stored without it) and maps sorted (the real files'
bytes differ between identical runs)."""
from pipeline.quantizers.sim.xmodel import schema


def differences(mine, real):
    """Readable differences between two parsed graphs: op order and names first, then per op."""
    a, b = [(o.op_name, o.op_type) for o in mine.op_node], [(o.op_name, o.op_type) for o in real.op_node]
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return ["op order/names differ from op %d: mine %s, real %s (%d vs %d ops)"
                % (first, a[first:first + 3], b[first:first + 3], len(a), len(b))]
    out = ["op %s differs" % x.op_name for x, y in zip(mine.op_node, real.op_node)
           if schema.canonical_op(x) != schema.canonical_op(y)]
    return out or ["graph fields other than the ops differ"]


def assert_same_xmodel(mine_path, real_path):
    """AssertionError listing the differences unless the two files hold the same graph."""
    with open(mine_path, "rb") as f:
        mine = schema.parse_graph(f.read())
    with open(real_path, "rb") as f:
        real = schema.parse_graph(f.read())
    del mine.op_defs[:]
    del real.op_defs[:]
    assert schema.canonical(mine) == schema.canonical(real), differences(mine, real)
