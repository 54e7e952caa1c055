"""The simulation's quantized model as the ``<Model>_int.xmodel`` the real quantizer writes.

``export_xmodel`` of the real quantizer (``pytorch_nndct/qproc/base.py`` ``dump_xmodel``) builds
a deploy graph from its test-mode graph, rewrites it (``deploy``), maps its quant_info onto the
deploy graph's node names and creates the XIR ops (``convert``), then libxir serializes them
(``xgraph``). :func:`build_xgraph` does the same from the simulation's lowered test-mode model.
"""
from typing import Any, Dict, List, Sequence, Tuple

import torch

from .... import ops as t
from ....fx.graph import SimGraph, SimNode
from ....fx.rewrites import swap_modules
from ....fx.work_copy import work_copy
from . import convert, deploy
from .devgraph import Graph, quant_parts
from .lower import deploy_graph
from .names import node_names
from ....xir.xgraph import XGraph


def _fix_tables(session: Any, dev: Graph, info: Dict[str, Any],
                names: Dict[str, str]) -> Tuple[convert.FixTable, convert.FixTable]:
    """quant_info's entries keyed by the deploy graph's names, as the real exporter sees them.

    A Hardswish without an entry of its own takes its quantization group's (``FixPosInserter``,
    ``nndct_shared/quantization/fix_pos_adjust.py``). Then ``get_deploy_graph_infos``: an output
    entry of a node the deploy graph no longer has (a fused pad, a contiguous) moves up a one-input
    chain to the first node it still has, unless that node has an entry of its own."""
    graph, plan = session.graph, session.plan  # type: SimGraph, Any
    params = {k: (int(v[0][0]), int(v[0][1])) for k, v in info["param"].items()
              if v and v[0][0] is not None and v[0][1] is not None}
    prefix = graph.class_name + "::"
    found = {}  # type: Dict[str, Tuple[int, int]]
    for key, value in info["output"].items():
        if key.startswith(prefix) and value and value[0][0] is not None and value[0][1] is not None \
                and key[len(prefix):] in graph.by_name:
            found[key[len(prefix):]] = (int(value[0][0]), int(value[0][1]))
    for node in graph.nodes:
        end = plan.quant_output(node) if node.op == t.HSWISH and node.name not in found else None
        if end is not None and end.name in found:
            found[node.name] = found[end.name]
    outputs = {}  # type: convert.FixTable
    moved = []  # type: list
    for name, entry in found.items():
        node = graph.by_name[name]
        if names.get(node.name) in dev:
            outputs[names[node.name]] = entry
        else:
            moved.append((node, entry))
    for node, entry in moved:
        parent = _surviving_parent(node, dev, names)
        if parent is not None and parent not in outputs:
            outputs[parent] = entry
    return params, outputs


def _surviving_parent(node: SimNode, dev: Graph, names: Dict[str, str]) -> Any:
    while len(node.inputs) == 1:
        node = node.inputs[0]
        if names.get(node.name) in dev:
            return names[node.name]
    return None


def build_xgraph(session: Any, lowered: torch.fx.GraphModule, examples: Sequence[torch.Tensor]) -> XGraph:
    """The XIR graph alone of a model without QuantStub parts; see :func:`build`."""
    graphs = build(session, lowered, examples)[0]
    if len(graphs) != 1:
        raise ValueError("build_xgraph: the model has %d quantized parts (QuantStub), one XIR graph each"
                         % len(graphs))
    return graphs[0]


def build(session: Any, lowered: torch.fx.GraphModule,
          examples: Sequence[torch.Tensor]) -> Tuple[List[XGraph], Dict[str, str]]:
    """The XIR graphs the real quantizer exports for the same model and calibration (one, named after the
    model's class; or one per quantized part of a model with QuantStub/DeQuantStub, ``<Class>_<n>``:
    ``devgraph.quant_parts``, nndct's ``partition_by_quant_part``), and the nndct name of each simulation
    node (``names.node_names``) they were built with.

    Args:
        session: the ``SimSession`` the test-mode model was built by (the float model, its capture
            and config); nothing in it is modified.
        lowered: the sim's test-mode model (``SimSession.load_test``): quantized parameters and
            ``quant_info``.
        examples: one batch-1 float32 NCHW tensor per model input (the first test-mode forward's).

    Raises:
        lower.XmodelUnsupported: a node the xmodel cannot carry (the message names it).
        ExportError / xir.errors.XGraphError: the graph cannot be built as XIR defines its ops.
    """
    graph = session.graph  # type: SimGraph
    swapped = work_copy(session.model)
    swap_modules(swapped, session.cfg.rewrites())
    examples = tuple(e.detach().cpu().float().clone() for e in examples)  # a model may write its input in place
    names = node_names(graph, swapped, examples)
    dev = deploy_graph(graph, lowered, names, examples)
    deploy.optimize(dev)
    params, outputs = _fix_tables(session, dev, lowered.quant_info, names)
    return [convert.write(part, params, outputs) for part in quant_parts(dev, t.QUANT_START_TYPES)], names
