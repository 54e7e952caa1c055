"""The verdict of the DPU assignment rules for one node, and the context the rules read
(``pipeline.inspect.rules``)."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from pipeline.targets import DpuTarget
from pipeline.inspect.trace import OpNode

DPU = "DPU"
CPU = "CPU"


@dataclass
class Verdict:
    """The decision for one node: device "DPU" or "CPU", the reasons it is not on the DPU
    (empty on the DPU), notes (fusions, layout changes, hints), the node it is fused into, if
    any, and the changes the quantizer makes or offers to make (LeakyReLU slope, conversions)."""

    device: str
    reasons: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    fused_into: Optional[str] = None
    changes: List[str] = field(default_factory=list)


@dataclass
class Context:
    """What the rules may read: the target, every node by name (graph inputs included), each
    node's consumers, and the verdicts decided so far."""

    target: DpuTarget  # with engine parameters (inspect_model checks)
    nodes: Dict[str, OpNode]
    consumers: Dict[str, List[str]]
    verdicts: Dict[str, Verdict]

    def producer(self, node: OpNode, index: int = 0) -> Optional[OpNode]:
        """The node feeding input ``index`` of ``node`` (None for a constant operand)."""
        return self.nodes[node.inputs[index]] if len(node.inputs) > index else None

    def on_dpu(self, name: str) -> bool:
        """Whether ``name``'s output lives on the DPU; a graph input counts (the load engine
        brings it in)."""
        verdict = self.verdicts.get(name)
        return verdict.device == DPU if verdict is not None else self.nodes[name].op == "input"


def cpu_verdict(*reasons: Optional[str], notes: Optional[List[str]] = None,
                changes: Optional[List[str]] = None) -> Verdict:
    """A CPU verdict: the given reasons (None ones dropped, in order), notes and changes (copied)."""
    return Verdict(CPU, [r for r in reasons if r], list(notes or []), None, list(changes or []))


def dpu_unless(reasons: List[Optional[str]], notes: Optional[List[str]] = None) -> Verdict:
    """DPU when every ``reasons`` entry is None (each a ``check_*`` result), else CPU with the
    reasons found; ``notes`` copied either way."""
    found = [r for r in reasons if r]
    return Verdict(CPU if found else DPU, found, list(notes or []))
