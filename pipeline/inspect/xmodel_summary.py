"""``python -m pipeline xmodel summary FILE [--target NAME]``: what a quantized xmodel holds.

Ops by type, the input and output tensors with their dims and fix positions, the fix position of
every quantized tensor (a ``fix`` op: ``<producer>_fix`` in the quantizer's files), and for a target
the inspector's DPU/CPU forecast per op (``xmodel_dpu``).
"""
from collections import Counter
from typing import Any, Dict, List, Optional

from pipeline.inspect.xmodel_check import fix_attrs


def fix_points(msg: Any) -> Dict[str, int]:
    """op name -> fix_point, for every ``fix`` op of a parsed xmodel that has one."""
    found = {}
    for node in msg.op_node:
        if node.op_type == "fix":
            point = fix_attrs(node).get("fix_point")
            if point is not None:
                found[node.op_name] = point
    return found


def summarize(msg: Any, target: Optional[Any] = None, graph: Optional[Any] = None) -> Dict[str, Any]:
    """The summary of a parsed (and checked) xmodel.

    Args:
        msg: the ``serial_v2.Graph`` message; target: a :class:`DpuTarget` with engine parameters, or
            None; graph: ``reader.check(msg)``'s graph (needed with ``target``).

    Returns:
        ``{"graph", "ops", "op_types": {type: count}, "inputs": [{"name", "shape", "layout", "fix_pos"}],
        "outputs": [{"name", "type", "shape", "fix_pos"}], "fix_positions": [{"op", "of", "of_type",
        "fix_pos", "bit_width", "signed", "round_mode"}]}``; with a target also ``"target": {"name",
        "DPU": n, "CPU": m, "ops": [per-op rows of xmodel_dpu.verdicts]}``. Dims are the file's (NHWC
        for 4-D); ``fix_pos`` of an input is its ``fix`` op's, of an output its own when it is a ``fix``
        op (else null: a float output).
    """
    nodes = {n.op_name: n for n in msg.op_node}
    users = {}  # type: Dict[str, List[str]]
    for node in msg.op_node:
        for arg in node.args:
            for src in arg.arg_ops:
                users.setdefault(src, []).append(node.op_name)
    points = fix_points(msg)
    rows = []
    for node in msg.op_node:
        if node.op_type != "fix":
            continue
        srcs = [s for a in node.args for s in a.arg_ops]
        attrs = fix_attrs(node)
        rows.append({"op": node.op_name, "of": srcs[0] if srcs else None,
                     "of_type": nodes[srcs[0]].op_type if srcs and srcs[0] in nodes else None,
                     "fix_pos": attrs.get("fix_point"), "bit_width": attrs.get("bit_width"),
                     "signed": attrs.get("if_signed"), "round_mode": attrs.get("round_mode")})

    def dims(node: Any) -> List[int]:
        return [int(d) for d in node.output_tensor.tensor_dim]

    inputs = []
    for node in msg.op_node:
        if node.op_type == "data":
            fixes = [u for u in users.get(node.op_name, []) if u in points]
            inputs.append({"name": node.op_name, "shape": dims(node), "layout": "NHWC" if len(dims(node)) == 4
                           else "as the model", "fix_pos": points[fixes[0]] if fixes else None})
    outputs = [{"name": n.op_name, "type": n.op_type, "shape": dims(n), "fix_pos": points.get(n.op_name)}
               for n in msg.op_node if n.op_name not in users]
    report = {"graph": msg.graph_name, "ops": len(msg.op_node),
              "op_types": dict(sorted(Counter(n.op_type for n in msg.op_node).items())),
              "inputs": inputs, "outputs": outputs, "fix_positions": rows}  # type: Dict[str, Any]
    if target is not None:
        from pipeline.inspect.xmodel_dpu import device_counts, verdicts
        per_op = verdicts(graph, target)
        report["target"] = dict(name=target.name, ops=per_op, **device_counts(per_op))
    return report
