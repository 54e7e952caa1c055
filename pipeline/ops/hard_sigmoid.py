"""Hardsigmoid and Hardswish (``nndct_hsigmoid``, ``nndct_hswish``). The DPU computes
``relu6(x + 3) * 2731/16384`` for 1/6, and a Hardswish multiplies ``x`` by that hard sigmoid rounded
half up at fix position 7, 8 bits (``pytorch_nndct/nn/modules/hsigmoid.py``, ``hswish.py``;
docs/arithmetic.md)."""
import torch.nn.functional as F
from torch import nn

from .dpu_activation import activation
from .record import Absent, DpuRule, OpRecord, OpSpec

HSIGMOID = "nndct_hsigmoid"
HSWISH = "nndct_hswish"
HARD_SIGMOID_SCALE = 2731.0 / 16384.0  # the DPU's 1/6
HSWISH_FIX_POS = 7  # the hard sigmoid inside a Hardswish is rounded at this fix position, 8 bits

_DPU_Q = OpSpec("dpu", True, False, False)

RECORD = OpRecord(
    family="hard_sigmoid",
    specs={HSWISH: _DPU_Q, HSIGMOID: _DPU_Q},
    modules={nn.Hardswish: HSWISH, nn.Hardsigmoid: HSIGMOID},
    functions={F.hardswish: HSWISH, F.hardsigmoid: HSIGMOID},
    approximation="1/6 as 2731/16384 (HARD_SIGMOID_SCALE); in a Hardswish the hard sigmoid is rounded half "
                  "up at fix_pos 7 (HSWISH_FIX_POS), 8 bits",
    source="pytorch_nndct/nn/modules/hsigmoid.py, hswish.py",
    onnx={op: Absent("the lowered model writes it out as the DPU computes it (an add, a relu6, "
                     "a multiply by 2731/16384, a quantization point): those nodes are written")
          for op in (HSWISH, HSIGMOID)},
    dpu_rule={HSWISH: DpuRule(("hswish",), activation), HSIGMOID: DpuRule(("hsigmoid",), activation)},
)
