"""``x.expand(...)`` (``nndct_expand``): a float operator in nndct's warning, joining its parent's group."""
from .record import Absent, OpRecord, OpSpec

EXPAND = "nndct_expand"

RECORD = OpRecord(
    family="expand",
    specs={EXPAND: OpSpec("float", False, False, True)},
    methods={"expand": EXPAND},
    approximation=Absent("repeats values, computes none"),
    source="nndct_shared/base/key_names.py",
    xmodel={EXPAND: Absent("not written yet: the xmodel writer has no XIR form for it")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={},  # each type traced under its own name
)
