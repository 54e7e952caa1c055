"""The verdict of the DPU assignment rules for one node, and the context the rules read
(``pipeline.inspect.rules``)."""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from pipeline.targets import DpuTarget
from pipeline.inspect.trace import OpNode

DPU = "DPU"
CPU = "CPU"


@dataclass
class Fix:
    """A rewrite of the float model that puts a node on the DPU (or, on the DPU, makes float and
    DPU agree), given by the rule that decided the node, next to the constraint it answers.

    Attributes:
        message: what to change, in one or two sentences.
        code: the exact code change (a PyTorch snippet, ``old -> new``), or None where none can be
            written without knowing more of the model than the graph shows.
        exact: True when the rewrite computes the same values in float (a reordering, a split, an
            equivalent module); False when the values change (retrain or fine-tune, check accuracy).
        follows: the node whose own fix this one waits for (this node is on the CPU only because
            its input is), else None.
    """

    message: str
    code: Optional[str] = None
    exact: bool = True
    follows: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        """Plain JSON-ready data: {"message", "code", "exact", "follows"}."""
        return {"message": self.message, "code": self.code, "exact": self.exact, "follows": self.follows}

    def line(self) -> str:
        """One line for the text report: the message, ``(values change: retrain)`` when not
        exact, and the code after ``code:``."""
        text = self.message + ("" if self.exact else " (values change: retrain or fine-tune, check the accuracy)")
        return text + ("  code: " + self.code if self.code else "")


def follows(name: str, what: str = "its input") -> Fix:
    """The fix of a node that is on the CPU only because ``name`` (``what``) is: fix that node."""
    return Fix("fix {} {!r} first: this node then goes to the DPU with it.".format(what, name), follows=name)


def tail_fix(node: OpNode, ctx: "Context") -> Optional[Fix]:
    """For a CPU node that only the model's output reads: leave it out of the model and apply it on
    the host after the DPU (the same values; the CPU subgraph at the end disappears). None when
    another node reads it."""
    if ctx.consumers.get(node.name):
        return None
    return Fix("only the model's output reads it: return its input from forward() and apply the {} on the host "
               "after the DPU (VART or the Vitis AI Library), one CPU subgraph less.".format(node.op),
               "return {}(y) -> return y  # apply {} after the DPU".format(node.op, node.op))


@dataclass
class Verdict:
    """The decision for one node: device "DPU" or "CPU", the reasons it is not on the DPU
    (empty on the DPU), notes (fusions, layout changes, hints), the node it is fused into, if
    any, the changes the quantizer makes or offers to make (LeakyReLU slope, conversions), and
    the fixes: rewrites of the float model that would put it on the DPU (:class:`Fix`)."""

    device: str
    reasons: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    fused_into: Optional[str] = None
    changes: List[str] = field(default_factory=list)
    fixes: List[Fix] = field(default_factory=list)


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
                changes: Optional[List[str]] = None, fixes: Optional[List[Optional[Fix]]] = None) -> Verdict:
    """A CPU verdict: the given reasons (None ones dropped, in order), notes, changes and fixes
    (copied, None fixes dropped)."""
    return Verdict(CPU, [r for r in reasons if r], list(notes or []), None, list(changes or []),
                   [f for f in (fixes or []) if f])


def dpu_unless(checks: List[Any], notes: Optional[List[str]] = None) -> Verdict:
    """DPU when every ``checks`` entry holds, else CPU with the reasons found and their fixes.

    Each entry is a ``check_*`` result (a reason string, or None when the constraint holds), or a
    pair ``(reason, fix)`` where ``fix`` is a :class:`Fix`, or a callable returning one (called only
    when the reason is not None), or None. ``notes`` are copied either way."""
    reasons, fixes = [], []  # type: List[str], List[Fix]
    for check in checks:
        reason, fix = check if isinstance(check, tuple) else (check, None)
        if not reason:
            continue
        reasons.append(reason)
        fix = fix() if callable(fix) else fix
        if fix is not None:
            fixes.append(fix)
    return Verdict(CPU if reasons else DPU, reasons, list(notes or []), None, [], fixes)
