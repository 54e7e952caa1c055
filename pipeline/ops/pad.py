"""Constant (zero) padding (``nndct_pad_nd``): ``nn.ZeroPad2d``, ``F.pad``."""
from typing import Any, Optional

import torch.nn.functional as F
from torch import nn

from .dpu_support import DPU, Verdict, cpu_verdict, follows
from .onnx_form import Unsupported, arg
from .record import Absent, DpuRule, OpRecord, OpSpec

PAD = "nndct_pad_nd"


def _onnx_pad(b: Any, node: Any, mod: Optional[nn.ZeroPad2d]) -> str:
    """Constant padding (F.pad mode 'constant', nn.ZeroPad2d) as Pad; torch lists the last
    dimension first, ONNX every dimension's begins then ends."""
    if mod is not None:
        pad, value, mode = list(mod.padding), 0.0, "constant"
    else:
        pad = list(b.static(arg(node, 1, "pad")))
        mode = b.static(arg(node, 2, "mode", "constant"))
        value = b.static(arg(node, 3, "value", None))
    if mode != "constant":
        raise Unsupported("pad mode %r (only 'constant')" % mode)
    rank = len(b.shape(node.args[0]))
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(begins + ends) < 0:
        raise Unsupported("negative padding")
    return b.op("Pad", [b.tensor(node.args[0]), b.ints(node.name + "/pads", begins + ends),
                        b.scalar(node.name + "/value", float(value or 0.0))], node.name, mode="constant")


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
    onnx={PAD: _onnx_pad},
    dpu_rule={PAD: DpuRule(("pad",), dpu_pad)},
)
