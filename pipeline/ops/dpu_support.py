"""The vocabulary of the DPU-support rules (``record.OpRecord.dpu_rule``): a node's :class:`Verdict`
(DPU or CPU, the reasons, the notes, the :class:`Fix` rewrites of the float model), built by the rule
of the op's unit, and the verdicts every family falls back on (:func:`unknown`, :func:`tail_fix`,
:func:`constant_fold_fix`). Plain data and pure functions: a support module of ``pipeline/ops/`` (it
defines no record). The inspector (``pipeline.inspect``) calls the rules with its nodes and its graph
context (``ctx``: ``target``, ``nodes``, ``consumers``, ``verdicts``, ``producer(node, i)``,
``on_dpu(name)``); messages reuse the real Inspector's wording where one exists
(docs/targets.md#dpuczdx8g-operator-limits)."""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

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


def follows(name: str, what: str = "its input") -> Fix:
    """The fix of a node that is on the CPU only because ``name`` (``what``) is: fix that node."""
    return Fix("fix {} {!r} first: this node then goes to the DPU with it.".format(what, name), follows=name)


def tail_fix(node: Any, ctx: Any) -> Optional[Fix]:
    """For a CPU node that only the model's output reads: leave it out of the model and apply it on
    the host after the DPU (the same values; the CPU subgraph at the end disappears). None when
    another node reads it."""
    if ctx.consumers.get(node.name):
        return None
    return Fix("only the model's output reads it: return its input from forward() and apply the {} on the host "
               "after the DPU (VART or the Vitis AI Library), one CPU subgraph less.".format(node.op),
               "return {}(y) -> return y  # apply {} after the DPU".format(node.op, node.op))


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


# the inspector's names of the layers a constant can be folded into (``conv.RECORD``, ``dense.RECORD``)
_FOLDS_CONSTANT = ("conv2d", "depthwise_conv2d", "conv_transpose2d", "dense")


def constant_fold_fix(node: Any, ctx: Any) -> Optional[Fix]:
    """``conv(x) + c``, ``conv(x) * c``, ``conv(x) / c`` with a Python number c, the conv read by nothing
    else: fold c into the conv's bias (and weights for * and /); the same values, one CPU op less."""
    c, src = node.attrs.get("constant"), ctx.producer(node)
    if (c is None or node.attrs.get("tensor_operands") != 1 or src is None or len(ctx.consumers[src.name]) != 1
            or src.op not in _FOLDS_CONSTANT):
        return None
    fold = {"add": "conv.bias += {c}", "mul": "conv.weight *= {c}; conv.bias *= {c}",
            "truediv": "conv.weight /= {c}; conv.bias /= {c}", "div": "conv.weight /= {c}; conv.bias /= {c}"}
    if node.op not in fold:
        return None
    return Fix("fold the constant {} into {} {!r} (with torch.no_grad(), once, after loading the weights) and drop "
               "the {}.".format(c, src.op, src.name, node.op), fold[node.op].format(c=c))


def unknown(node: Any, ctx: Any, what: Optional[str] = None) -> Verdict:
    """An op with no DPU rule (``Absent`` in its record, or no record): expected on the CPU, said honestly."""
    return cpu_verdict("{} ({}) is not in the CPU inspector's operator table: expect it on the CPU; the "
                       "real Inspector in the Vitis AI image gives the final answer.".format(
                           what or node.op, node.source), fixes=[constant_fold_fix(node, ctx), tail_fix(node, ctx)])
