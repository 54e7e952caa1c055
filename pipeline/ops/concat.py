"""Concatenation along one axis (``nndct_concat``): ``torch.cat``."""
import torch

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import XmodelForm, simple

CONCAT = "nndct_concat"


def _lower_concat(lo, node) -> dict:
    """The concatenated dimension (``axis``, as the call gives it; ``deploy`` makes it positive)."""
    return {"axis": lo.call_args(node)["dim"]}


RECORD = OpRecord(
    family="concat",
    specs={CONCAT: OpSpec("dpu", True, False, False)},
    functions={torch.cat: CONCAT},
    signatures={CONCAT: (("tensors", "dim"), {"dim": 0})},
    approximation=Absent("copies codes (inputs aligned to the output's fix position)"),
    source="nndct_shared/base/key_names.py",
    xmodel={CONCAT: XmodelForm(_lower_concat, simple("concat", ("axis",)))},
)
