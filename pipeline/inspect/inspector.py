"""DPU inspection on the CPU: which node of a float model runs on the DPU of a target, and why not.

A CPU stand-in for the real Inspector (``pytorch_nndct.apis.Inspector``), which needs the Vitis AI
image (docs/targets.md#inspector). It traces the model with torch.fx, applies the rules of
:mod:`pipeline.inspect.rules` (each op's DPU-support rule, in its unit of :mod:`pipeline.ops`) with the
engine parameters of :mod:`pipeline.targets`, and
writes ``inspect_<target>.txt``/``.json``/``.gv``/``.svg`` (the picture drawn here: no graphviz
needed, :mod:`pipeline.inspect.svg`) in the spirit of the real Inspector's output. The real Inspector, run with the same
target in the Vitis AI image, gives the final answer.

Usage::

    inspection = inspect_model(model, example, "DPUCZDX8G_ISA1_B4096")
    paths = write_reports(inspection, out_dir)
    print(inspection.summary_line())          # DPU: 14 nodes, CPU: 0 nodes
"""

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn

from pipeline import fileio
from pipeline.errors import ConfigError, DataError, PipelineError
from pipeline.targets import TARGETS, DpuTarget, get_target
from pipeline.inspect.render import render_dot, render_text
from pipeline.inspect.rules import decide
from pipeline.inspect.svg import render_svg
from pipeline.inspect.trace import trace_model
from pipeline.inspect.partition import Subgraph, count_line, partition_data, subgraphs
from pipeline.inspect.verdict import CPU, DPU, Context, Fix


@dataclass
class InspectedNode:
    """One operation of the model and where it runs.

    Attributes:
        name: fx node name (unique); ``module`` in ``source`` gives the module path.
        op: the inspector's name of the op (conv2d, depthwise_conv2d, dense, relu, max_pool2d, flatten, ...:
            its record's ``dpu_rule`` names, ``pipeline.ops``).
        device: "DPU" or "CPU".
        reasons: why it is not on the DPU (hardware constraints); empty on the DPU.
        notes: node messages: quantizer changes (LeakyReLU slope, offered conversions), fusions,
            layout permutes, hints on what to change.
        shape: output shape as PyTorch gives it (NCHW for 4-D), or None when not one tensor.
        inputs: names of the nodes (or graph inputs) it reads.
        outputs: names of the nodes that read it, plus "output" when it is a graph output.
        source: what the model called (``nn.Conv2d 'features.0'``, ``torch.flatten``).
        attrs: op attributes (kernel_size, stride, pad as [left, right, top, bottom], ...).
        fused_into: the node it is fused or folded into, if any.
        changes: the subset of ``notes`` that the quantizer makes or offers to make to the model.
        xmodel_op: the op the quantized xmodel holds for this node (docs/xmodel.md#names), e.g.
            ``Net__Net_SiLU_act__ret_5``; None for a node that becomes none (a folded BatchNorm, a
            dropout, a pad folded into its conv) or when the names could not be traced.
        fixes: rewrites of the float model that would put it on the DPU (on a DPU node: make float
            and DPU agree), from the rule that decided it (:class:`pipeline.ops.dpu_support.Fix`).
    """

    name: str
    op: str
    device: str
    reasons: List[str]
    notes: List[str]
    shape: Optional[Tuple[int, ...]]
    inputs: List[str]
    outputs: List[str]
    source: str
    attrs: Dict[str, Any] = field(default_factory=dict)
    fused_into: Optional[str] = None
    changes: List[str] = field(default_factory=list)
    xmodel_op: Optional[str] = None
    fixes: List[Fix] = field(default_factory=list)

    @property
    def xir_shape(self) -> Optional[Tuple[int, ...]]:
        """The output shape in XIR's NHWC layout for 4-D outputs, else as in PyTorch."""
        if self.shape is not None and len(self.shape) == 4:
            n, c, h, w = self.shape
            return (n, h, w, c)
        return self.shape


@dataclass
class Inspection:
    """The result of :func:`inspect_model`: every node with its device, reasons and notes.

    ``nodes`` are in topological order; graph inputs are in ``inputs`` as (name, shape) and are
    not nodes; ``outputs`` names the nodes whose results the model returns.
    """

    target: DpuTarget
    model_name: str
    inputs: List[Tuple[str, Optional[Tuple[int, ...]]]]
    outputs: List[str]
    nodes: List[InspectedNode]

    def count(self, device: str) -> int:
        """Number of nodes assigned to ``device`` ("DPU" or "CPU")."""
        return sum(node.device == device for node in self.nodes)

    def summary_line(self) -> str:
        """One line, e.g. ``DPU: 14 nodes, CPU: 0 nodes``."""
        return "DPU: {} nodes, CPU: {} nodes".format(self.count(DPU), self.count(CPU))

    def subgraphs(self) -> List[Subgraph]:
        """The DPU and CPU subgraphs as the compiler forms them (:mod:`pipeline.inspect.partition`)."""
        return subgraphs(self)

    def partition_line(self) -> str:
        """The subgraph count as users give it, e.g. ``3 subgraphs: 2 DPU, 1 CPU``."""
        return count_line(subgraphs(self))

    def partition(self) -> Dict[str, Any]:
        """The partition view as JSON-ready data: rule, caveats, count, subgraphs, and each CPU node's
        reasons and fixes (:func:`pipeline.inspect.partition.partition_data`)."""
        return partition_data(self)

    def node(self, name: str) -> InspectedNode:
        """The node called ``name``; KeyError when there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError("no node {!r}; nodes are {}".format(name, [n.name for n in self.nodes]))

    def to_text(self) -> str:
        """The text report (``inspect_<target>.txt``), in the spirit of the real Inspector's."""
        return render_text(self)

    def to_dot(self) -> str:
        """The graph in graphviz DOT: DPU nodes blue, CPU nodes red, as the real Inspector draws."""
        return render_dot(self)

    def to_svg(self) -> str:
        """The same graph as an SVG picture, laid out here (:mod:`pipeline.inspect.svg`; no graphviz)."""
        return render_svg(self)

    def to_json(self) -> Dict[str, Any]:
        """The report as plain JSON-ready data (``inspect_<target>.json``)."""
        return {
            "tool": "pipeline.inspect (CPU inspection; the real Inspector in the Vitis AI image "
                    "gives the final answer)",
            "target": self.target.name,
            "family": self.target.family,
            "model": self.model_name,
            "summary": {"dpu_nodes": self.count(DPU), "cpu_nodes": self.count(CPU),
                        "line": self.summary_line()},
            "inputs": [{"name": name, "shape": list(shape) if shape else None}
                       for name, shape in self.inputs],
            "outputs": list(self.outputs),
            "nodes": [{
                "name": n.name, "op": n.op, "source": n.source, "device": n.device,
                "reasons": list(n.reasons), "notes": list(n.notes), "changes": list(n.changes),
                "shape": list(n.shape) if n.shape else None,
                "xir_shape": list(n.xir_shape) if n.xir_shape else None,
                "inputs": list(n.inputs), "outputs": list(n.outputs),
                "attrs": n.attrs, "fused_into": n.fused_into, "xmodel_op": n.xmodel_op,
                "fixes": [f.to_json() for f in n.fixes],
            } for n in self.nodes],
            "partition": self.partition(),
        }


def inspect_model(model: nn.Module, example: Any, target: Union[str, DpuTarget]) -> Inspection:
    """Assign every operation of ``model`` to the DPU of ``target`` or to the CPU, with reasons.

    Args:
        model: the float model; not modified (a deep copy is traced in eval mode).
        example: an input batch as the model takes it (a tensor, or a tuple with one tensor per
            forward argument; any batch size; shapes are reported with it); not modified.
        target: a DPU target name of docs/targets.md#names-and-fingerprints, e.g. "DPUCZDX8G_ISA1_B4096" (see
            :data:`pipeline.targets.TARGETS`; it needs one with engine parameters), or its resolved
            :class:`DpuTarget` (``LoadedConfig.target``: the pipeline's inspect step).

    Returns:
        An :class:`Inspection`.

    Raises:
        ConfigError: unknown target name (the message names the closest), or a target without
            engine parameters (the message lists those that have them).
        DataError: ``example`` is not a tensor.
        PipelineError: torch.fx cannot trace the model, or the model fails on the example.
    """
    hardware = target if isinstance(target, DpuTarget) else get_target(target)
    if hardware.engines is None:
        raise ConfigError("inspection has no engine parameters for {} (family {}); it can inspect for {}".format(
            hardware.name, hardware.family, ", ".join(n for n, t in TARGETS.items() if t.engines is not None)))
    examples = tuple(example) if isinstance(example, (tuple, list)) else (example,)
    if not examples or not all(isinstance(e, torch.Tensor) for e in examples):
        raise DataError("inspection needs an example input tensor (N, C, H, W) for the model; got "
                        "{}".format(type(example).__name__))
    traced = trace_model(model, example)
    by_name = {n.name: n for n in traced.inputs + traced.nodes}
    consumers = {name: [] for name in by_name}  # type: Dict[str, List[str]]
    for node in traced.nodes:
        for name in node.inputs:
            consumers[name].append(node.name)
    context = Context(hardware, by_name, consumers, {})
    for node in traced.nodes:
        context.verdicts[node.name] = decide(node, context)
    xmodel_ops = _xmodel_ops(model, examples)
    nodes = []
    for node in traced.nodes:
        verdict = context.verdicts[node.name]
        outputs = consumers[node.name] + (["output"] if node.name in traced.outputs else [])
        nodes.append(InspectedNode(node.name, node.op, verdict.device, verdict.reasons,
                                   verdict.changes + verdict.notes, node.shape, node.inputs,
                                   outputs, node.source, node.attrs, verdict.fused_into,
                                   verdict.changes, xmodel_ops.get(node.name), list(verdict.fixes)))
    return Inspection(hardware, traced.model_name, [(n.name, n.shape) for n in traced.inputs],
                      traced.outputs, nodes)


def _xmodel_ops(model: nn.Module, examples: Tuple[torch.Tensor, ...]) -> Dict[str, str]:
    """fx node name -> its op in the quantized xmodel (default quantizer config); empty when the
    model cannot be traced the way the real quantizer traces it (inspection does not need it)."""
    from pipeline.quantizers.sim.xmodel.names import xmodel_op_names
    try:
        return xmodel_op_names(model, tuple(e.detach().cpu().float().clone() for e in examples))
    except (PipelineError, RuntimeError, TypeError, ValueError):  # torch.jit raises RuntimeError and others
        return {}


def write_reports(inspection: Inspection, out_dir: str) -> Dict[str, str]:
    """Write ``inspect_<target>.txt``, ``.json``, ``.gv`` (graphviz's DOT source) and ``.svg`` (the
    picture, drawn here without graphviz: :mod:`pipeline.inspect.svg`) into ``out_dir`` (created if
    missing). Each file appears complete or not at all (:mod:`pipeline.fileio`).

    Returns:
        {"txt": path, "json": path, "gv": path, "svg": path}.
    """
    stem = os.path.join(str(out_dir), "inspect_" + inspection.target.name)
    return {"txt": fileio.write_text(stem + ".txt", inspection.to_text()),
            "json": fileio.write_json(stem + ".json", inspection.to_json()),
            "gv": fileio.write_text(stem + ".gv", inspection.to_dot()),
            "svg": fileio.write_text(stem + ".svg", inspection.to_svg())}
