"""``x.expand(...)`` (``nndct_expand``): a float operator in nndct's warning, joining its parent's group."""
from .record import Absent, OpRecord, OpSpec

EXPAND = "nndct_expand"

RECORD = OpRecord(
    family="expand",
    specs={EXPAND: OpSpec("float", False, False, True)},
    methods={"expand": EXPAND},
    approximation=Absent("repeats values, computes none"),
    source="nndct_shared/base/key_names.py",
    dpu_rule={EXPAND: Absent("a float operator of the quantizer")},
)
