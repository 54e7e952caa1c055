"""NaN and inf in the verification of an export: the one rule the ONNX and the xmodel checks follow.

Every export of the simulation is verified by running the file on an input and comparing its outputs
with the simulation's on the same input (``export/verify.py``: ONNX Runtime; ``xmodel/verify.py``: the
xmodel interpreter). NaN and inf pass through a file and through the simulation alike (a NaN input
gives NaN after every conv, and NaN has the same bits on both sides), so a comparison of them proves
nothing about the file. The rule:

1. The input a verification runs on must be finite. An input holding NaN or inf is refused before
   anything runs (:func:`check_inputs`): :class:`ExportError` with the count per input and what to do.
   The run's own data never gets there (the data feed refuses a non-finite batch, public case P07);
   the drop-in API's first test-mode forward, the batch-1 example the xmodel is checked on, can.
2. An output element that is NaN or inf on one side only, NaN on one side and inf on the other, or
   +inf against -inf, is a mismatch (:func:`agreement`).
3. An output element non-finite alike on both sides (NaN and NaN, or the same infinity) is not
   compared: it is counted as ``nonfinite``, never as agreement. It comes from a float operator of the
   model (a log, a sqrt or a division by zero on finite data), which the file then reproduces.
4. A verification that compared no element is refused (:func:`check_compared`): a report never says
   "verified" of a comparison that compared nothing finite.
5. Otherwise the report gives the elements compared (``elements``) and those not compared
   (``nonfinite``); the backend's verification warns when there are any (:func:`note`).
"""
from typing import Any, Dict, NamedTuple, Optional, Sequence

import torch

from ...errors import ExportError


class Agreement(NamedTuple):
    """One output compared: elements compared, those of them that differ, elements not compared (non-finite
    alike on both sides) and the largest absolute difference over the compared ones (inf where one side
    only is non-finite; 0.0 when none differ)."""
    elements: int
    mismatches: int
    nonfinite: int
    max_abs_diff: float


def check_inputs(inputs: Sequence[torch.Tensor], what: str, fix: str) -> None:
    """Refuse a verification input holding NaN or inf (rule 1).

    Args:
        inputs: the tensors the file and the simulation are about to run on (one per model input).
        what: what is verified, leading the message (``"xmodel"``, ``"onnx_exact"``).
        fix: what to do, ending the message.

    Raises:
        ExportError: an input holds NaN or inf: each such input with its counts.
    """
    bad = []
    for i, x in enumerate(inputs):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            continue
        nan, inf = int(torch.isnan(x).sum()), int(torch.isinf(x).sum())
        if nan or inf:
            bad.append("input %d holds %d NaN and %d inf of %d values" % (i, nan, inf, x.numel()))
    if bad:
        raise ExportError("%s: the input it is verified on is not finite (%s): NaN and inf pass through the file "
                          "and the simulation alike, so their agreement proves nothing and the file would be "
                          "verified on nothing; %s" % (what, "; ".join(bad), fix))


def agreement(mine: torch.Tensor, reference: torch.Tensor, bits: bool) -> Agreement:
    """Compare two outputs of one shape element by element (rules 2 and 3).

    Args:
        mine: the file's output; reference: the simulation's. Any float dtype; read, never written.
        bits: compare float32 bit patterns (the xmodel's bit-for-bit check: -0.0 differs from 0.0);
            False compares values (ONNX Runtime's check: exact in float64).
    """
    a, b = mine.detach().float().contiguous(), reference.detach().float().contiguous()
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    finite = fa & fb
    alike = ~fa & ~fb & ((torch.isnan(a) & torch.isnan(b)) | (a == b))  # NaN and NaN, the same infinity
    one_sided = ~finite & ~alike
    if bits:
        differ = (a.view(torch.int32) != b.view(torch.int32)) & finite
    else:
        differ = (a.double() != b.double()) & finite
    nonfinite = int(alike.sum())
    mismatches = int(differ.sum()) + int(one_sided.sum())
    if bool(one_sided.any()):
        max_abs = float("inf")
    elif bool(differ.any()):
        max_abs = float((a.double() - b.double()).abs()[differ].max())
    else:
        max_abs = 0.0
    return Agreement(a.numel() - nonfinite, mismatches, nonfinite, max_abs)


def check_compared(what: str, elements: int, nonfinite: int, where: str, after: str = "") -> None:
    """Refuse a verification that compared no element (rule 4).

    Args:
        what: what was verified (``"xmodel"``, ``"ONNX (exact flavour)"``); elements: elements compared;
        nonfinite: elements not compared; where: the input it ran on; after: what follows, for the message.

    Raises:
        ExportError: ``elements`` is 0.
    """
    if elements:
        return
    if nonfinite:
        raise ExportError("%s: the verification compared nothing finite: all %d output elements are NaN or inf in "
                          "the simulation and in the file alike on %s, so nothing was verified. The model computes "
                          "NaN or inf from finite data (a division by zero, a log or a sqrt): fix the model or its "
                          "input range%s" % (what, nonfinite, where, after))
    raise ExportError("%s: the verification compared nothing: the model's outputs on %s have no elements%s"
                      % (what, where, after))


def note(what: str, report: Optional[Dict[str, Any]]) -> Optional[str]:
    """The warning for a verification report (``elements``, ``nonfinite``) that left elements out (rule 5),
    or None."""
    skipped = int((report or {}).get("nonfinite") or 0)
    if not skipped:
        return None
    compared = int(report.get("elements") or 0)
    return ("%s: %d of %d output elements are NaN or inf in the simulation and in the file alike and were not "
            "compared; the verification covers the other %d. The model computes NaN or inf there from finite "
            "data (a division by zero, a log or a sqrt)" % (what, skipped, skipped + compared, compared))
