"""The compiled ``<net>.xmodel`` that ``vai_c_xir`` leaves, checked before the compile step calls it compiled.

``vai_c_xir`` can exit 0 after an aborted compilation (docs/compiler.md#exit-status) and leave an empty
or unfinished file. The compiled model is an XIR graph (one ``serial_v2.Graph`` message, the format the
quantized xmodel has) whose root subgraph is split into child subgraphs, each with a ``device``
attribute; the part VART runs on the DPU is a subgraph whose ``device`` is ``"DPU"``, carrying the
``dpu_fingerprint`` of the DPU it was compiled for (VART compares it with the board's, "CHECK
fingerprint fail!"). :func:`problems` checks just that, without libxir: the bytes parse as a graph
with ops, at least one subgraph is a DPU subgraph, and a DPU subgraph that names its fingerprint names
the target's. It does not replay the graph through XIR's op definitions (``pipeline xmodel check``
does that for the quantized xmodel): the compiled graph holds the compiler's own op types
(``conv2d-fix``, ``upload``, ...) and machine code this project does not model.
"""
from typing import Any, Dict, List, Optional, Tuple

DPU = "DPU"


def _subgraphs(sub: Any) -> List[Any]:
    """``sub`` and every subgraph under it, depth first."""
    found = [sub]
    for child in sub.subg_child:
        found.extend(_subgraphs(child))
    return found


def _attr(sub: Any, name: str) -> Any:
    from ..xir import schema
    if name not in sub.subg_attr:
        return None
    return schema.attr_python(sub.subg_attr[name])[1]


def problems(data: bytes, fingerprint: Optional[int] = None) -> Tuple[Optional[str], Dict[str, Any]]:
    """Check the bytes of a compiled xmodel.

    Args:
        data: the file's bytes.
        fingerprint: the target DPU's fingerprint (the arch.json's), or None: not compared.

    Returns:
        ``(what is wrong, or None when the file passes, summary)``: the summary holds ``graph`` (its
        name), ``ops`` (op count) and ``dpu_subgraphs`` (their names) for a file that parses, else is
        empty. What is wrong is one phrase naming what came (``"an empty file (0 bytes)"``, ``"37 bytes
        that do not parse as an XIR graph"``, ``"an XIR graph without a DPU subgraph"``, ...).
    """
    from ..xir import schema
    if not data:
        return "an empty file (0 bytes)", {}
    try:
        msg = schema.parse_graph(data)
    except ValueError as e:
        return "%d bytes that do not parse as an XIR graph (%s)" % (len(data), str(e)[:200]), {}
    if not msg.op_node:
        return "%d bytes that hold no XIR op (random bytes, a truncated file or another format)" % len(data), {}
    dpu = [s for s in _subgraphs(msg.subg_root) if _attr(s, "device") == DPU]
    summary = {"graph": msg.graph_name, "ops": len(msg.op_node),
               "dpu_subgraphs": [s.subgraph_name for s in dpu]}  # type: Dict[str, Any]
    if not dpu:
        devices = sorted({str(_attr(s, "device")) for s in _subgraphs(msg.subg_root)
                          if _attr(s, "device") is not None})
        return ("an XIR graph %r of %d ops without a DPU subgraph (subgraph devices: %s): nothing in it runs "
                "on the DPU" % (msg.graph_name, len(msg.op_node), ", ".join(devices) or "none, the graph is not "
                                "partitioned: not a compiled model"), summary)
    if fingerprint is not None:
        other = sorted({int(f) for f in (_attr(s, "dpu_fingerprint") for s in dpu) if f is not None}
                       - {int(fingerprint)})
        if other:
            return ("an XIR graph whose DPU subgraph is compiled for fingerprint %s, not the target's 0x%016x"
                    % (", ".join("0x%016x" % f for f in other), int(fingerprint)), summary)
    return None, summary
