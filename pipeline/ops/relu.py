"""ReLU and ReLU6 (``nndct_relu``, ``nndct_relu6``); ``nn.Hardtanh(0, 6)`` is a ReLU6."""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xir_support import IN, OpDef, XirOp, like_input, unary
from .xmodel_support import XmodelForm, no_attrs, simple

RELU = "nndct_relu"
RELU6 = "nndct_relu6"


def _hardtanh(m: nn.Module, strict: bool = True) -> Optional[str]:
    """A ``Hardtanh`` bounded to [0, 6] is nndct's ReLU6; any other stays a float operator."""
    return RELU6 if m.min_val == 0.0 and m.max_val == 6.0 else None


_ACT = OpSpec("dpu", False, False, True)

RECORD = OpRecord(
    family="relu",
    specs={RELU: _ACT, RELU6: _ACT},
    modules={nn.ReLU: RELU, nn.ReLU6: RELU6},
    module_rules={nn.Hardtanh: _hardtanh},
    functions={F.relu: RELU, torch.relu: RELU, F.relu6: RELU6},
    methods={"relu": RELU, "relu_": RELU},  # op_dispatcher.relu_: a TorchReLU (inplace), as relu
    approximation=Absent("exact on the integer codes"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/parse/op_dispatcher.py",
    xmodel={RELU: XmodelForm(no_attrs, simple("relu")), RELU6: XmodelForm(no_attrs, simple("relu6"))},
    xir_ops={"relu": XirOp(OpDef("relu", IN, (), like_input), unary(torch.relu), "relu"),
             "relu6": XirOp(OpDef("relu6", IN, (), like_input), unary(F.relu6), "relu6")},
    traced={RELU: ("relu",), RELU6: ("hardtanh", "relu6")},
)
