"""Dropout and Identity (``identity``): the quantizer's rewrites remove them; the inspector sees them
before that."""
from .onnx_form import alias
from .record import Absent, OpRecord, OpSpec
from .sim_support import TORCH

IDENTITY = "identity"

RECORD = OpRecord(
    family="identity",
    specs={IDENTITY: OpSpec("layout", False, True, False)},
    approximation=Absent("removed before quantization"),
    source="pytorch_nndct/parse/parse_utils.py (dropout removed)",
    onnx={IDENTITY: alias},
    dpu_rule={IDENTITY: Absent("removed before deployment: the inspector re-links its readers to its input")},
    xmodel={IDENTITY: Absent("not written yet: the xmodel writer has no XIR form for it")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={},  # each type traced under its own name
    refusals={},
    sim={IDENTITY: TORCH},
)
