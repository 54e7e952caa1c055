"""The fix positions of ``python -m pipeline compare --xmodel FILE`` checked against the reference's own codes
(docs/xmodel.md#board-dumps): a reference folder's ``<node>_fix.bin`` holds the codes its float file had at
the fix positions of the xmodel it was made with; an xmodel of another calibration of the same model (the
same op names, other fix positions) would turn the reference's float files into other codes than the ones
the board computed, and a board that agrees with the reference byte for byte would be called diverged.
"""
import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from pipeline.inspect.compare_load import CompareError, DumpSet

AGREE = 0.99  # share of a tensor's codes within 1 of its float file's codes at a fix position


def fp_from_files(dump: DumpSet, node: str) -> Optional[int]:
    """The fix position a deploy-check folder implies for a node with both files: ``code = value * 2**fp``."""
    if node not in dump.codes or node not in dump.floats:
        return None
    codes, values = dump.read(node, True), dump.read(node, False)
    if codes.size != values.size:
        return None
    mask = (codes != 0) & (values != 0)
    if not mask.any():
        return None
    ratios = np.abs(codes[mask] / values[mask].astype(np.float64))
    fp = int(round(math.log2(float(np.median(ratios)))))
    return fp if abs(fp) < 64 else None


def _agreement(codes: np.ndarray, values: np.ndarray, fp: int, bits: int) -> float:
    """The share of ``codes`` within 1 of ``values`` quantized at ``fp`` (rounded half up, clamped): 1.0 for
    the fix position the codes were made with (1 below for a value dumped before its fix, truncated)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    again = np.clip(np.floor(values.astype(np.float64) * (2.0 ** fp) + 0.5), lo, hi)
    return float(np.mean(np.abs(again - codes) <= 1)) if codes.size else 1.0


def codes_agree(dump: DumpSet, node: str, fp: int, bits: int) -> Optional[bool]:
    """Whether ``dump``'s codes of ``node`` are its float file's at ``fp``; None when the folder lacks one of
    the two files or they differ in size."""
    if node not in dump.codes or node not in dump.floats:
        return None
    codes, values = dump.read(node, True), dump.read(node, False)
    if codes.size != values.size:
        return None
    return _agreement(codes, values, fp, bits) >= AGREE


def other_fix_positions(ref: DumpSet, fixes: Dict[str, Tuple[int, int]]) -> List[Tuple[str, int, int]]:
    """``[(node, the xmodel's fix position, the reference's)]`` for each node of ``ref`` whose codes were made
    at another fix position than ``fixes`` (the xmodel's) gives; a node is listed only where the reference's
    own fix position is certain: its codes agree with its float file there, and not at the xmodel's."""
    found = []  # type: List[Tuple[str, int, int]]
    for node in sorted(fixes):
        fp, bits = fixes[node]
        own = fp_from_files(ref, node)
        if own is None or own == fp:
            continue
        if codes_agree(ref, node, own, bits) and not codes_agree(ref, node, fp, bits):
            found.append((node, fp, own))
    return found


def check_calibration(ref: DumpSet, fixes: Dict[str, Tuple[int, int]], xmodel: Any) -> None:
    """Refuse an xmodel whose fix positions are not the ones REFERENCE's codes were made with.

    Raises:
        CompareError: naming the tensors, the xmodel's and the reference's fix positions, and what to do.
    """
    found = other_fix_positions(ref, fixes)
    if not found:
        return
    listed = ", ".join("%s: fix_pos %d in the xmodel, %d in the reference" % f for f in found[:4])
    raise CompareError(
        "--xmodel %s is another calibration than the reference's: %d tensor%s of REFERENCE %s %s codes made at "
        "other fix positions than the xmodel's (%s%s); the same op names, other fix positions: give the xmodel the "
        "reference came from (the one the board runs), or make the reference from this xmodel (python -m pipeline "
        "xmodel run FILE --input X.npy --dump DIR)"
        % (xmodel, len(found), "" if len(found) == 1 else "s", ref.folder, "has" if len(found) == 1 else "have",
           listed, ", ..." if len(found) > 4 else ""))


def board_calibration(board: DumpSet, fixes: Dict[str, Tuple[int, int]]) -> List[str]:
    """A line for a diverged report when BOARD is a deploy-check folder whose codes were made at other fix
    positions than the xmodel's (the board ran another calibration of the model), else none."""
    found = other_fix_positions(board, fixes)
    if not found:
        return []
    return ["the board's own files were made at other fix positions than the xmodel's (%s%s): the board ran "
            "another calibration of the model than the reference's xmodel; run the xmodel the reference came "
            "from on the board" % (", ".join("%s: fix_pos %d in the xmodel, %d on the board" % f for f in found[:3]),
                                   ", ..." if len(found) > 3 else "")]
