"""The context the DPU-support rules read (``record.OpRecord.dpu_rule``, called by
``pipeline.inspect.rules.decide``), and the verdict vocabulary they build, re-exported from
``pipeline.ops.dpu_support`` where it lives (plain data: the op units build verdicts without the
inspector)."""
from dataclasses import dataclass
from typing import Dict, List, Optional

from pipeline.ops.dpu_support import (CPU, DPU, Fix, Verdict, constant_fold_fix, cpu_verdict, dpu_unless, follows,
                                      tail_fix, unknown)
from pipeline.targets import DpuTarget
from pipeline.inspect.trace import OpNode

__all__ = ["CPU", "DPU", "Context", "Fix", "Verdict", "constant_fold_fix", "cpu_verdict", "dpu_unless", "follows",
           "tail_fix", "unknown"]


@dataclass
class Context:
    """What the rules may read, handed to each rule at call time: the target, every node by name
    (graph inputs included), each node's consumers, and the verdicts decided so far."""

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
