"""The DPU and CPU subgraphs of an inspection, as the Vitis AI compiler forms them, and the fixes that
would move each CPU node to the DPU: the partition view of the inspect report (docs/targets.md#partition).

The rule (docs/targets.md#partition): nodes on the same device that are joined by an edge belong to
one subgraph, and a node on the other device splits them; two groups of DPU nodes joined only
through a CPU node are two DPU subgraphs. A subgraph never both feeds and reads the same other
subgraph (the compiler runs subgraphs one after another): each node gets a *stage*, the number of
device changes on the longest path from the graph inputs to it, and only nodes of one device and
one stage are joined. Sources: the compiled xmodel's root subgraph holds device subgraphs as
children (docs/xmodel.md, ``SubGraph``; ``xir subgraph`` and ``xdputil xmodel -s`` list them,
docs/compiler.md#outputs); ``vai_c_xir`` logs "Total device subgraph number T, DPU subgraph number
D" (Vitis-AI issues #320, #1358); users count these (issues #336, #449, #1214, #1501). The
compiler is closed source: how it groups CPU ops and which CPU subgraphs it adds (the input's,
the fix-to-float conversions at a DPU output, issue #821) is not known here, so the DPU count is
the number to compare with ``D``, and ``T`` is larger than the total here (:data:`CAVEATS`).
"""
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from pipeline.inspect.inspector import Inspection

RULE = ("nodes on the same device joined by an edge form one subgraph; a node on the other device splits "
        "them; groups are also split where joining them would make a subgraph both feed and read another "
        "(each node's stage: the device changes on the longest path from the inputs).")

CAVEATS = (
    "The Vitis AI compiler (vai_c_xir) is closed source; this partition follows the inspection's devices "
    "and the rule above, not the compiler itself.",
    "Compare the DPU count with vai_c_xir's 'DPU subgraph number'. Its 'Total device subgraph number' is "
    "larger: it also counts CPU subgraphs the compiler adds (the graph input's, the fix-to-float conversion "
    "of DPU outputs; a conv + ReLU alone compiles to 'Total device subgraph number 3, DPU subgraph number 1', "
    "Vitis-AI issues #821, #1358), and how it groups neighbouring CPU ops is not known here.",
)


@dataclass
class Subgraph:
    """One DPU or CPU subgraph of the model.

    Attributes:
        name: ``subgraph_<index>``, in topological order of the subgraphs.
        device: "DPU" or "CPU".
        nodes: the names of its nodes, in the inspection's topological order.
        inputs: the subgraphs (names) and graph inputs that feed it.
        outputs: the subgraphs (names) it feeds, and "output" when it gives a model output.
    """

    name: str
    device: str
    nodes: List[str]
    inputs: List[str]
    outputs: List[str]

    def to_json(self) -> Dict[str, Any]:
        """Plain JSON-ready data."""
        return {"name": self.name, "device": self.device, "nodes": list(self.nodes),
                "inputs": list(self.inputs), "outputs": list(self.outputs)}


def subgraphs(inspection: "Inspection") -> List[Subgraph]:
    """The DPU and CPU subgraphs of ``inspection`` by the rule of this module, in topological order.

    Returns:
        A list of :class:`Subgraph`; every node of ``inspection.nodes`` is in exactly one.
    """
    device = {n.name: n.device for n in inspection.nodes}
    stage = {}  # type: Dict[str, int]
    parent = {}  # type: Dict[str, str]

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for node in inspection.nodes:
        preds = [p for p in node.inputs if p in device]
        stage[node.name] = max([stage[p] + (device[p] != node.device) for p in preds] or [0])
        parent[node.name] = node.name
        for p in preds:
            if device[p] == node.device and stage[p] == stage[node.name]:
                parent[root(p)] = root(node.name)
    order, members = [], {}  # type: List[str], Dict[str, List[str]]
    for node in inspection.nodes:
        key = root(node.name)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(node.name)
    names = {key: "subgraph_{}".format(i) for i, key in enumerate(order)}
    of = {n: names[root(n)] for n in device}
    result = []
    for key in order:
        nodes = members[key]
        inputs, outputs = [], []  # type: List[str], List[str]
        for name in nodes:
            node = inspection.node(name)
            for p in node.inputs:
                source = of.get(p, p)
                if source != names[key] and source not in inputs:
                    inputs.append(source)
            for c in node.outputs:
                target = of.get(c, c)
                if target != names[key] and target not in outputs:
                    outputs.append(target)
        result.append(Subgraph(names[key], device[nodes[0]], nodes, inputs, outputs))
    return result


def count_line(parts: List[Subgraph]) -> str:
    """The count as users give it, e.g. ``3 subgraphs: 2 DPU, 1 CPU``."""
    dpu = sum(p.device == "DPU" for p in parts)
    return "{} subgraph{}: {} DPU, {} CPU".format(len(parts), "" if len(parts) == 1 else "s", dpu, len(parts) - dpu)


def partition_data(inspection: "Inspection") -> Dict[str, Any]:
    """The partition view as JSON-ready data (the ``partition`` key of ``inspect_<target>.json``).

    Returns:
        {"rule": str, "caveats": [str], "line": "3 subgraphs: 2 DPU, 1 CPU", "count": {"total",
        "dpu", "cpu"}, "subgraphs": [Subgraph.to_json()], "fixes": [{"node", "op", "device",
        "subgraph", "reasons", "fixes": [Fix.to_json()]}]} where ``fixes`` lists every CPU node (its
        fixes may be empty: none known) and every DPU node that has a fix (float/DPU parity, e.g.
        the LeakyReLU slope).
    """
    parts = subgraphs(inspection)
    of = {name: p.name for p in parts for name in p.nodes}
    dpu = sum(p.device == "DPU" for p in parts)
    rows = [{"node": n.name, "op": n.op, "device": n.device, "subgraph": of[n.name], "reasons": list(n.reasons),
             "fixes": [f.to_json() for f in n.fixes]}
            for n in inspection.nodes if n.device == "CPU" or n.fixes]
    return {"rule": RULE, "caveats": list(CAVEATS), "line": count_line(parts),
            "count": {"total": len(parts), "dpu": dpu, "cpu": len(parts) - dpu},
            "subgraphs": [p.to_json() for p in parts], "fixes": rows}


def partition_lines(inspection: "Inspection") -> List[str]:
    """The partition section of the text report: the count, the rule, each subgraph with its nodes,
    each CPU node with its reasons and fixes, then the caveats."""
    parts = subgraphs(inspection)
    out = ["partition: {} (rule: {})".format(count_line(parts), RULE)]
    for p in parts:
        out.append("  {} [{}] {} node{}: {}  <- {}".format(
            p.name, p.device, len(p.nodes), "" if len(p.nodes) == 1 else "s", ", ".join(p.nodes),
            ", ".join(p.inputs) or "-"))
    fixed = [n for n in inspection.nodes if n.device == "CPU" or n.fixes]
    if fixed:
        out += ["", "How to move each CPU node to the DPU (fixes):"]
    for n in fixed:
        head = "  {} ({}, {})".format(n.name, n.op, n.device)
        out.append(head + (": " + " ".join(n.reasons) if n.reasons else ""))
        out += ["    fix: " + f.line() for f in n.fixes] or ["    fix: none known here."]
    out += [""] + ["note: " + c for c in CAVEATS]
    return out
