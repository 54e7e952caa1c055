"""Softmax (``nndct_softmax``): a quantized float operator."""
import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec

SOFTMAX = "nndct_softmax"

RECORD = OpRecord(
    family="softmax",
    specs={SOFTMAX: OpSpec("float", True, False, False)},
    modules={nn.Softmax: SOFTMAX},
    functions={torch.softmax: SOFTMAX, F.softmax: SOFTMAX},
    methods={"softmax": SOFTMAX},
    signatures={SOFTMAX: (("input", "dim"), {"dim": None})},
    approximation=Absent("a float operator on the CPU: torch's own call"),
    source="nndct_shared/base/key_names.py",
)
