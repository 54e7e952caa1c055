"""Constant (zero) padding (``nndct_pad_nd``): ``nn.ZeroPad2d``, ``F.pad``."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec

PAD = "nndct_pad_nd"

RECORD = OpRecord(
    family="pad",
    specs={PAD: OpSpec("dpu", False, False, False)},
    modules={nn.ZeroPad2d: PAD},
    functions={F.pad: PAD},
    signatures={PAD: (("input", "pad", "mode", "value"), {"mode": "constant", "value": None})},
    approximation=Absent("writes the pad value's code"),
    source="nndct_shared/base/key_names.py",
)
