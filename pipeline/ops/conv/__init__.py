"""The 2-D convolutions: plain, depthwise, transposed and transposed depthwise (``nndct_conv2d``,
``nndct_depthwise_conv2d``, ``nndct_conv_transpose_2d``, ``nndct_depthwise_conv_transpose_2d``), told
apart by the module's groups as nndct's ``op_dispatcher`` does.

An ``nn.Conv2d`` whose padding is a string (``padding='same'`` or ``'valid'``) is none of them: torch.jit
traces it as ``aten::_convolution_mode``, for which nndct's ``op_dispatcher`` has no op, so the real
quantizer keeps it as a float operator of that type (warning ``QUANTIZER_TORCH_FLOAT_OP``): weights, bias and
output not quantized, its xmodel op the custom ``aten::_convolution_mode`` on the float weight and bias
consts (tests/data/refused_real/conv_same). The rule gives that type (:data:`CONVOLUTION_MODE`); the generic
float operator runs the module's own float conv."""
from torch import nn

from ...errors import QuantizationError
from ..record import Absent, DpuRule, OpRecord, OpSpec
from ..sim_support import TORCH
from ..xir_support import OpDef, XirOp, opt
from ..xmodel_support import XmodelForm, custom, no_attrs
from .dpu import dpu_conv2d, dpu_conv_transpose2d, dpu_convolution_mode, dpu_depthwise_conv2d
from .names import CONV2D, CONVOLUTION_MODE, CONVTRANSPOSE2D, CONV_TYPES, DEPTHWISE_CONV2D, DEPTHWISE_CONVTRANSPOSE2D
from .onnx import onnx_conv, onnx_conv_mode, onnx_conv_transpose
from .xmodel import (CONV_ARGS, CONV_ATTRS, create_conv, depthwise_ohwi, depthwise_transposed_ohwi, flip_hw,
                     lower_conv, ohwi, run_conv, run_conv_transpose, shape_conv2d, shape_depthwise_conv2d,
                     shape_transposed_conv2d, shape_transposed_depthwise_conv2d, transposed_ohwi)


def conv_type(m: nn.Module, strict: bool = True) -> str:
    """The nndct type of an ``nn.Conv2d`` or ``nn.ConvTranspose2d``: depthwise when ``groups`` equals the
    input channels (a transposed conv: weight ``(in, out/g)`` with ``out/g == 1`` and ``groups == in``);
    :data:`CONVOLUTION_MODE` (a float operator) for a Conv2d with string padding (``'same'``, ``'valid'``).

    Raises:
        QuantizationError: with ``strict``, a ``padding_mode`` other than zeros (nndct's conv module calls
            ``F.conv2d`` with the padding, so it pads with zeros)."""
    if strict and m.padding_mode != "zeros":
        raise QuantizationError("conv with padding_mode=%r: the real quantizer's conv module pads with zeros "
                                "(it calls F.conv2d with the padding); use padding_mode='zeros' or an "
                                "explicit pad" % m.padding_mode)
    if isinstance(m, nn.Conv2d):
        if isinstance(m.padding, str):  # torch: aten::_convolution_mode; nndct: no op, a float operator
            return CONVOLUTION_MODE
        cin = m.in_channels
        depthwise = m.groups != 1 and m.groups == cin and m.out_channels % cin == 0
        return DEPTHWISE_CONV2D if depthwise else CONV2D
    depthwise = m.weight.shape[1] == 1 and m.groups == m.weight.shape[0] and m.groups != 1
    return DEPTHWISE_CONVTRANSPOSE2D if depthwise else CONVTRANSPOSE2D


# ---- DPU support (the inspector): the conv engine's rules (sources: dpu_checks, UG1414) ----------


_DPU_Q = OpSpec("dpu", True, False, False)


RECORD = OpRecord(
    family="conv",
    specs=dict([(t, _DPU_Q) for t in CONV_TYPES] + [(CONVOLUTION_MODE, OpSpec("float", False, False, False))]),
    module_rules={nn.Conv2d: conv_type, nn.ConvTranspose2d: conv_type},
    roles={"conv": CONV_TYPES, "params": CONV_TYPES, "bias_corr": CONV_TYPES, "adaquant": CONV_TYPES,
           "adaquant_pair_layer": (CONV2D, DEPTHWISE_CONV2D, CONVTRANSPOSE2D), "pad_fusion": CONV_TYPES},
    approximation=Absent("integer multiply-accumulate with the bias added at the accumulator's scale: exact "
                         "fixed point, the shifts are docs/arithmetic.md's"),
    source="pytorch_nndct/parse/op_dispatcher.py, nndct_shared/base/key_names.py",
    onnx={CONV2D: onnx_conv, DEPTHWISE_CONV2D: onnx_conv, CONVTRANSPOSE2D: onnx_conv_transpose,
          DEPTHWISE_CONVTRANSPOSE2D: onnx_conv_transpose, CONVOLUTION_MODE: onnx_conv_mode},
    dpu_rule={CONV2D: DpuRule(("conv2d",), dpu_conv2d),
              DEPTHWISE_CONV2D: DpuRule(("depthwise_conv2d",), dpu_depthwise_conv2d),
              CONVTRANSPOSE2D: DpuRule(("conv_transpose2d",), dpu_conv_transpose2d),
              DEPTHWISE_CONVTRANSPOSE2D: DpuRule(("conv_transpose2d",), dpu_conv_transpose2d),
              # a conv with string padding: a float operator of the quantizer, judged as such with its fix
              CONVOLUTION_MODE: DpuRule(("conv2d",), dpu_convolution_mode, True)},
    xmodel={CONV2D: XmodelForm(lower_conv, create_conv("conv2d"), nhwc=True, weights=ohwi),
            DEPTHWISE_CONV2D: XmodelForm(lower_conv, create_conv("depthwise-conv2d"), nhwc=True,
                                         weights=depthwise_ohwi),
            CONVTRANSPOSE2D: XmodelForm(lower_conv, create_conv("transposed-conv2d"), nhwc=True,
                                        weights=transposed_ohwi, const_weights=flip_hw),
            DEPTHWISE_CONVTRANSPOSE2D: XmodelForm(lower_conv, create_conv("transposed-depthwise-conv2d"), nhwc=True,
                                                  weights=depthwise_transposed_ohwi, const_weights=flip_hw),
            # a custom op on the float weight and bias consts (nndct's custom_xop)
            CONVOLUTION_MODE: XmodelForm(no_attrs, custom)},
    custom_kernels={CONVOLUTION_MODE: Absent("the file carries no stride, padding or dilation for it: the caller's "
                                             "float_ops (the simulation's call) compute it")},
    xir_ops={"conv2d": XirOp(OpDef("conv2d", CONV_ARGS, CONV_ATTRS + (opt("group", "int32", 1),), shape_conv2d),
                             run_conv, "conv2d"),
             "depthwise-conv2d": XirOp(OpDef("depthwise-conv2d", CONV_ARGS, CONV_ATTRS, shape_depthwise_conv2d),
                                       run_conv, "depthwise_conv2d"),
             "transposed-conv2d": XirOp(OpDef("transposed-conv2d", CONV_ARGS, CONV_ATTRS, shape_transposed_conv2d),
                                        run_conv_transpose, "conv_transpose2d"),
             "transposed-depthwise-conv2d": XirOp(OpDef("transposed-depthwise-conv2d", CONV_ARGS, CONV_ATTRS,
                                                        shape_transposed_depthwise_conv2d),
                                                  run_conv_transpose, "conv_transpose2d")},
    traced=dict([(t, ("_convolution",)) for t in CONV_TYPES] + [(CONVOLUTION_MODE, ("_convolution_mode",))]),
    refusals={},
    sim=dict.fromkeys(CONV_TYPES + (CONVOLUTION_MODE,), TORCH),
)
