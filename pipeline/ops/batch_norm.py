"""A batch norm with no conv before it (``nndct_batch_norm``): a per-channel scale and offset layer.
nndct's BatchNorm module does no bias correction."""
from typing import Any

import numpy as np
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .onnx_form import Unsupported

BATCH_NORM = "nndct_batch_norm"

def _onnx_batch_norm(b: Any, node: Any, mod: nn.modules.batchnorm._BatchNorm) -> str:
    """An unfused BatchNorm of the lowered model (quantized weight and bias, mean 0, var 1, eps 0:
    ``x * weight + bias``) as BatchNormalization."""
    if len(node.args) != 1 or node.kwargs:
        raise Unsupported("expected one input")
    if mod.eps != 0.0 or bool((mod.running_mean != 0).any()) or bool((mod.running_var != 1).any()):
        raise Unsupported("BatchNorm statistics other than mean 0, var 1, eps 0 (the quantizer's converted form)")
    bits = getattr(mod, "bitwidth", None)
    w = b.param(node.target, "weight", mod.weight, getattr(mod, "weight_fix_pos", None), bits)
    bias = b.param(node.target, "bias", mod.bias, getattr(mod, "bias_fix_pos", None), bits)
    c = int(mod.num_features)
    return b.op("BatchNormalization", [b.tensor(node.args[0]), w, bias,
                                       b.init(node.name + "/mean", np.zeros(c, np.float32)),
                                       b.init(node.name + "/var", np.ones(c, np.float32))],
                node.name, epsilon=0.0)


RECORD = OpRecord(
    family="batch_norm",
    specs={BATCH_NORM: OpSpec("dpu", True, False, False)},
    modules={nn.BatchNorm1d: BATCH_NORM, nn.BatchNorm2d: BATCH_NORM},
    roles={"params": (BATCH_NORM,)},
    approximation=Absent("folded into a scale and an offset, quantized as parameters"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/nn/modules/batchnorm.py",
    onnx={BATCH_NORM: _onnx_batch_norm},
)
