"""How much of the board's dumps ``python -m pipeline compare`` could pair with the reference's tensors
(docs/xmodel.md#board-dumps). Tensors meet by name only; a verdict on the few that meet says nothing of the
rest. Two exports of one model under different torch versions (or of a model edited since) name the same
tensors with other trace numbers: ``..._ReLU_2__ret_5`` in one, ``..._ReLU_2__ret_7`` in the other (the
last ``__`` part of a sanitised name holds the trace's value name; the module path before it does not
change). Such names are told, never paired: which of them are the same tensor is not certain.
"""
import re
from typing import Any, Dict, List, Tuple

_DIGITS = re.compile(r"[0-9]+")
TO_DO = ("the reference and the board's files come from different exports of the model (torch versions, or a model "
         "edited since): make both from the one xmodel the board runs (the reference with python -m pipeline xmodel "
         "run FILE --input X.npy --dump DIR)")
OTHER_XMODEL = ("the board ran another xmodel than the one the reference was made from: make the reference from the "
                "xmodel the board runs (python -m pipeline xmodel run FILE --input X.npy --dump DIR)")


def trace_skeleton(name: str) -> str:
    """``name`` with the runs of digits of its last ``__`` part (the trace's value name) as ``#``."""
    head, sep, last = name.rpartition("__")
    return head + sep + _DIGITS.sub("#", last)


def renumbered(ref_only: List[str], board_only: List[str]) -> List[Tuple[str, List[str]]]:
    """``[(board tensor, [reference tensors it differs from only in trace numbers])]`` for the board's tensors
    the reference lacks, among the reference's tensors the board lacks."""
    by_skeleton = {}  # type: Dict[str, List[str]]
    for name in ref_only:
        by_skeleton.setdefault(trace_skeleton(name), []).append(name)
    return [(name, by_skeleton[trace_skeleton(name)]) for name in board_only if trace_skeleton(name) in by_skeleton]


def pairing(ref_only: List[str], board_only: List[str], compared: int) -> Dict[str, Any]:
    """``{"board_tensors", "paired", "board_only", "renumbered", "complete", "why"}``: ``complete`` is False
    when names differ only in trace numbers, or when no more of the board's tensors were paired than not;
    ``why`` says so and what to do (None when complete)."""
    again = renumbered(ref_only, board_only)
    total = compared + len(board_only)
    out = {"board_tensors": total, "paired": compared, "board_only": len(board_only),
           "renumbered": [[b, r] for b, r in again], "complete": True, "why": None}  # type: Dict[str, Any]
    if not again and (not board_only or len(board_only) < compared):
        return out
    out["complete"] = False
    why = "only %d of the board's %d tensors %s in the reference (%d only on the board)" % (
        compared, total, "is" if compared == 1 else "are", len(board_only))
    if again:
        board, refs = again[0]
        why += ("; %d of the board's tensor names differ from the reference's only in torch's trace numbers (the "
                "board's %s, the reference's %s): %s" % (len(again), board, " or ".join(refs[:3]), TO_DO))
    else:
        why += ": " + OTHER_XMODEL
    out["why"] = why
    return out
