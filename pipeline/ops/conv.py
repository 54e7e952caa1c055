"""The 2-D convolutions: plain, depthwise, transposed and transposed depthwise (``nndct_conv2d``,
``nndct_depthwise_conv2d``, ``nndct_conv_transpose_2d``, ``nndct_depthwise_conv_transpose_2d``), told
apart by the module's groups as nndct's ``op_dispatcher`` does."""
from torch import nn

from ..errors import QuantizationError
from .record import Absent, OpRecord, OpSpec
from .xmodel_support import PAD_MODES, XmodelForm, pair

CONV2D = "nndct_conv2d"
DEPTHWISE_CONV2D = "nndct_depthwise_conv2d"
CONVTRANSPOSE2D = "nndct_conv_transpose_2d"
DEPTHWISE_CONVTRANSPOSE2D = "nndct_depthwise_conv_transpose_2d"
CONV_TYPES = (CONV2D, DEPTHWISE_CONV2D, CONVTRANSPOSE2D, DEPTHWISE_CONVTRANSPOSE2D)


def conv_type(m: nn.Module, strict: bool = True) -> str:
    """The nndct type of an ``nn.Conv2d`` or ``nn.ConvTranspose2d``: depthwise when ``groups`` equals the
    input channels (a transposed conv: weight ``(in, out/g)`` with ``out/g == 1`` and ``groups == in``).

    Raises:
        QuantizationError: with ``strict``, a ``padding_mode`` other than zeros (nndct's conv module calls
            ``F.conv2d`` with the padding, so it pads with zeros)."""
    if strict and m.padding_mode != "zeros":
        raise QuantizationError("conv with padding_mode=%r: the real quantizer's conv module pads with zeros "
                                "(it calls F.conv2d with the padding); use padding_mode='zeros' or an "
                                "explicit pad" % m.padding_mode)
    if isinstance(m, nn.Conv2d):
        cin = m.in_channels
        depthwise = m.groups != 1 and m.groups == cin and m.out_channels % cin == 0
        return DEPTHWISE_CONV2D if depthwise else CONV2D
    depthwise = m.weight.shape[1] == 1 and m.groups == m.weight.shape[0] and m.groups != 1
    return DEPTHWISE_CONVTRANSPOSE2D if depthwise else CONVTRANSPOSE2D


def lower_conv(lo, node) -> dict:
    """The deploy attributes of a conv (``parser.py``): kernel, stride, dilation ``[w, h]``, pad
    ``[left, right, top, bottom]``, pad_mode 0, group, bias_term, in_dim, out_dim.

    Raises:
        XmodelUnsupported: padding given as a string, a grouped transposed conv, output_padding."""
    m = lo.module(node)
    if isinstance(m.padding, str):
        raise lo.unsupported(node, "padding=%r (give the padding as numbers)" % m.padding)
    if node.op == CONVTRANSPOSE2D and m.groups != 1:
        raise lo.unsupported(node, "groups=%d: a grouped transposed conv is not written yet (depthwise, groups = "
                                   "in_channels = out_channels, is)" % m.groups)
    if any(pair(getattr(m, "output_padding", 0))):
        # nndct writes transposed-conv2d without it: the op's output would lack the last row/column
        raise lo.unsupported(node, "output_padding=%s: the xmodel's transposed conv has no output padding (the "
                                   "real quantizer drops it and the compiled output is one row/column short); "
                                   "use kernel_size = 2 * stride with padding = stride // 2 (e.g. 4, 2, 1) for "
                                   "an exact doubling" % (tuple(pair(m.output_padding)),))
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = (pair(m.kernel_size), pair(m.stride), pair(m.dilation),
                                              pair(m.padding))
    return {"kernel": [kw, kh], "stride": [sw, sh], "dilation": [dw, dh], "pad_mode": 0,
            "pad": [pw, pw, ph, ph], "group": m.groups, "bias_term": m.bias is not None,
            "in_dim": m.in_channels, "out_dim": m.out_channels}


def _create_conv(type_: str):
    """The creator of XIR ``type_`` (``xop_creator.py`` ``conv2d`` and friends): input, weights, bias."""
    def create(w, node) -> None:
        a = node.attrs
        w.with_params(node, type_, {"kernel": a["kernel"], "stride": a["stride"], "dilation": a["dilation"],
                                    "pad_mode": PAD_MODES[a["pad_mode"]], "pad": a["pad"], "group": a["group"],
                                    "bias_term": a["bias_term"], "in_dim": a["in_dim"], "out_dim": a["out_dim"]})
    return create


_DPU_Q = OpSpec("dpu", True, False, False)

RECORD = OpRecord(
    family="conv",
    specs={t: _DPU_Q for t in CONV_TYPES},
    module_rules={nn.Conv2d: conv_type, nn.ConvTranspose2d: conv_type},
    roles={"conv": CONV_TYPES, "params": CONV_TYPES, "bias_corr": CONV_TYPES},
    approximation=Absent("integer multiply-accumulate with the bias added at the accumulator's scale: exact "
                         "fixed point, the shifts are docs/arithmetic.md's"),
    source="pytorch_nndct/parse/op_dispatcher.py, nndct_shared/base/key_names.py",
    xmodel={CONV2D: XmodelForm(lower_conv, _create_conv("conv2d")),
            DEPTHWISE_CONV2D: XmodelForm(lower_conv, _create_conv("depthwise-conv2d")),
            CONVTRANSPOSE2D: XmodelForm(lower_conv, _create_conv("transposed-conv2d")),
            DEPTHWISE_CONVTRANSPOSE2D: XmodelForm(lower_conv, _create_conv("transposed-depthwise-conv2d"))},
)
