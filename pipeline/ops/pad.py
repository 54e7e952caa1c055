"""Constant (zero) padding (``nndct_pad_nd``): ``nn.ZeroPad2d``, ``F.pad``."""
from typing import Any

import torch.nn.functional as F
from torch import nn

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .record import Absent, DpuRule, OpRecord, OpSpec

PAD = "nndct_pad_nd"


def dpu_pad(node: Any, ctx: Any) -> Verdict:
    """Zero padding of a DPU feature map: the quantizer keeps it as a DPU pad (``nndct_pad_nd``)."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of pad is not on DPU.", fixes=[follows(src.name)])
    return Verdict(DPU)


RECORD = OpRecord(
    family="pad",
    specs={PAD: OpSpec("dpu", False, False, False)},
    modules={nn.ZeroPad2d: PAD},
    functions={F.pad: PAD},
    signatures={PAD: (("input", "pad", "mode", "value"), {"mode": "constant", "value": None})},
    approximation=Absent("writes the pad value's code"),
    source="nndct_shared/base/key_names.py",
    dpu_rule={PAD: DpuRule(("pad",), dpu_pad)},
)
