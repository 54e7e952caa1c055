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

from ..errors import QuantizationError
from .record import Absent, OpRecord, OpSpec

CONV2D = "nndct_conv2d"
DEPTHWISE_CONV2D = "nndct_depthwise_conv2d"
CONVTRANSPOSE2D = "nndct_conv_transpose_2d"
DEPTHWISE_CONVTRANSPOSE2D = "nndct_depthwise_conv_transpose_2d"
CONV_TYPES = (CONV2D, DEPTHWISE_CONV2D, CONVTRANSPOSE2D, DEPTHWISE_CONVTRANSPOSE2D)
# a Conv2d with string padding as torch.jit traces it: a float operator with no nndct type
CONVOLUTION_MODE = "aten::_convolution_mode"


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


_DPU_Q = OpSpec("dpu", True, False, False)

RECORD = OpRecord(
    family="conv",
    specs={t: _DPU_Q for t in CONV_TYPES},
    module_rules={nn.Conv2d: conv_type, nn.ConvTranspose2d: conv_type},
    roles={"conv": CONV_TYPES, "params": CONV_TYPES, "bias_corr": CONV_TYPES},
    approximation=Absent("integer multiply-accumulate with the bias added at the accumulator's scale: exact "
                         "fixed point, the shifts are docs/arithmetic.md's"),
    source="pytorch_nndct/parse/op_dispatcher.py, nndct_shared/base/key_names.py",
)
