"""ReLU, ReLU6 and Hardtanh (``nndct_relu``, ``nndct_relu6``, ``nndct_hardtanh``); ``nn.Hardtanh(0, 6)`` is a
ReLU6 (``op_dispatcher.hardtanh``)."""
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .dpu_activation import activation
from .dpu_support import Verdict
from .onnx_form import arg, clip
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xir_support import IN, OpDef, XirOp, like_input, unary
from .xmodel_support import XmodelForm, custom, no_attrs, simple

RELU = "nndct_relu"
RELU6 = "nndct_relu6"
HARDTANH = "nndct_hardtanh"


def _bounds_type(min_val: Any, max_val: Any) -> str:
    """pytorch_nndct's ``op_dispatcher.hardtanh``: bounds [0, 6] make a ReLU6, any others a Hardtanh."""
    return RELU6 if (min_val, max_val) == (0.0, 6.0) else HARDTANH


def _hardtanh(m: nn.Module, strict: bool = True) -> Optional[str]:
    """``nn.Hardtanh``: a ReLU6 when bounded to [0, 6], else nndct's Hardtanh."""
    return _bounds_type(m.min_val, m.max_val)


def _hardtanh_call(node: Any) -> str:
    """``F.hardtanh(x, min_val=-1.0, max_val=1.0)``: a ReLU6 when bounded to [0, 6], else a Hardtanh."""
    def given(i: int, name: str, default: float) -> Any:
        return node.kwargs.get(name, node.args[i] if len(node.args) > i else default)
    return _bounds_type(given(1, "min_val", -1.0), given(2, "max_val", 1.0))


def relu6_conversion_note(node: Any) -> str:
    """ReLU6 -> ReLU: CLE (on by default) rewrites ReLU6 as ReLU in the model it is given
    (docs/quantizer.md#the-callers-model-is-rewritten); the config key ``convert_relu6_to_relu`` asks for
    it explicitly."""
    return ("the quantizer offers ReLU6 -> ReLU (convert_relu6_to_relu); with the default config "
            "(CLE on) it makes this change itself, in the model it is given: pass a copy.")


def dpu_relu6(node: Any, ctx: Any) -> Verdict:
    """ReLU6: an activation (``dpu_activation.activation``) with the ReLU6 -> ReLU conversion the quantizer offers."""
    return activation(node, ctx, changes=[relu6_conversion_note(node)])


_ACT = OpSpec("dpu", False, False, True)


def _onnx_relu(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """Relu."""
    return b.op("Relu", [b.tensor(node.args[0])], node.name)


def _onnx_relu6(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """Clip to the module's bounds (``nn.ReLU6``, ``nn.Hardtanh(0, 6)``), or to [0, 6] (``F.relu6``)."""
    if mod is not None:
        return clip(b, node, float(mod.min_val), float(mod.max_val))
    return clip(b, node, 0.0, 6.0)


def _onnx_hardtanh(b: Any, node: Any, mod: Optional[nn.Module]) -> str:
    """Clip to the module's bounds, or to the call's (``F.hardtanh``: -1 and 1 by default)."""
    if mod is not None:
        return clip(b, node, float(mod.min_val), float(mod.max_val))
    return clip(b, node, arg(node, 1, "min_val", -1.0), arg(node, 2, "max_val", 1.0))


RECORD = OpRecord(
    family="relu",
    # nndct_hardtanh: a float operator on the CPU (DPUPartition's CPU-only types) that joins its producer's
    # quantization group as ReLU does (QuantConfigerCommander.SoftFuseHardtanh)
    specs={RELU: _ACT, RELU6: _ACT, HARDTANH: OpSpec("float", False, False, True)},
    modules={nn.ReLU: RELU, nn.ReLU6: RELU6},
    module_rules={nn.Hardtanh: _hardtanh},
    # the in-place forms are the same ops (op_dispatcher.relu_, hardtanh_): the capture's fx/in_place.py
    # makes later readers of the tensor read their result
    functions={F.relu: RELU, torch.relu: RELU, F.relu6: RELU6, F.relu_: RELU, torch.relu_: RELU},
    function_rules={F.hardtanh: _hardtanh_call, F.hardtanh_: _hardtanh_call},
    methods={"relu": RELU, "relu_": RELU},  # op_dispatcher.relu_: a TorchReLU (inplace), as relu
    approximation=Absent("exact on the integer codes"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/parse/op_dispatcher.py",
    onnx={RELU: _onnx_relu, RELU6: _onnx_relu6, HARDTANH: _onnx_hardtanh},
    dpu_rule={RELU: DpuRule(("relu",), activation), RELU6: DpuRule(("relu6",), dpu_relu6),
              HARDTANH: Absent("a float operator of the quantizer")},
    xmodel={RELU: XmodelForm(no_attrs, simple("relu")), RELU6: XmodelForm(no_attrs, simple("relu6")),
            HARDTANH: XmodelForm(no_attrs, custom)},  # a custom op without its bounds, as nndct writes it
    xir_ops={"relu": XirOp(OpDef("relu", IN, (), like_input), unary(torch.relu), "relu"),
             "relu6": XirOp(OpDef("relu6", IN, (), like_input), unary(F.relu6), "relu6")},
    custom_kernels={HARDTANH: Absent("the file carries no bounds (nndct_hardtanh is written without its min_val "
                                     "and max_val): the caller's float_ops (the simulation's call) compute it")},
    traced={RELU: ("relu",), RELU6: ("hardtanh", "relu6"), HARDTANH: ("hardtanh",)},
    roles={"cle_act": (RELU,), "fresh_output": (RELU,), "adaquant_act": (RELU, RELU6)},
    refusals={},
    sim=dict.fromkeys((RELU, RELU6, HARDTANH), TORCH),
)
