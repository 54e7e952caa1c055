"""DPU assignment rules of the conv engine: each constraint's ``check_*`` (the reason a parameter is out
of the engine's limits, or None) and the conv2d, depthwise_conv2d, conv_transpose2d and dense
rules that combine them. Sources in ``pipeline.inspect.rules``' docstring (conv2d, transposed conv).
"""
import math
from typing import List, Optional

from pipeline.targets import DpuTarget, EngineLimits, allows
from pipeline.inspect.trace import OpNode
from pipeline.inspect.verdict import DPU, Context, Verdict, cpu_verdict, dpu_unless


# ---- conv family checks ------------------------------------------------------------------------

def check_kernel(kernel_size: List[int], spec: str, engine: str) -> Optional[str]:
    """Kernel height and width within the engine's ``kernel_size`` range."""
    if all(allows(spec, k) for k in kernel_size):
        return None
    return "'kernel'({} x {}) is not in the {} supported range ({}).".format(
        kernel_size[0], kernel_size[1], engine, spec)


def check_stride(stride: List[int], spec: str, engine: str, kernel_size: List[int],
                 in_hw: List[int]) -> Optional[str]:
    """Strides within the engine's ``stride`` range; not applied when the kernel covers the whole
    input (one output pixel)."""
    if list(kernel_size) == list(in_hw) or all(allows(spec, s) for s in stride):
        return None
    return "'stride'({} x {}) is not in the {} supported range ({}).".format(
        stride[0], stride[1], engine, spec)


def check_channels(in_channels: int, out_channels: int, dilation: List[int],
                   channel_parallel: int) -> Optional[str]:
    """Input and output channels at most 256 x channel_parallel, and
    ``dilation x input_channel <= 256 x channel_parallel`` (UG1414)."""
    limit = 256 * channel_parallel
    if in_channels > limit:
        return "DPU only supports 'input_channel'({}) up to 256 x channel_parallel = {}.".format(
            in_channels, limit)
    if out_channels > limit:
        return "DPU only supports 'output_channel'({}) up to 256 x channel_parallel = {}.".format(
            out_channels, limit)
    if max(dilation) * in_channels > limit:
        return ("DPU only supports 'dilation x input_channel'({} x {}) up to 256 x "
                "channel_parallel = {}.".format(max(dilation), in_channels, limit))
    return None


def check_conv_bank_depth(kernel_size: List[int], in_channels: int, target: DpuTarget) -> Optional[str]:
    """Conv weights fit the weight bank:
    ``k_h * k_w * ceil(ic / bank_width) * ceil(output_channel_parallel / bank_num) <= bank_depth``."""
    bank = target.engines.conv.weight_bank
    depth = (kernel_size[0] * kernel_size[1] * math.ceil(in_channels / bank.bank_width)
             * math.ceil(target.engines.conv.output_channel_parallel / bank.bank_num))
    if depth <= bank.bank_depth:
        return None
    return ("Weights ({} x {} kernel, {} input channels) are too large for the parameter buffer: "
            "'kernel_h * kernel_w * ceil(input_channel / bank_width) * ceil(output_channel_parallel"
            " / bank_num)' = {} > bank_depth {}.".format(kernel_size[0], kernel_size[1],
                                                         in_channels, depth, bank.bank_depth))


def check_depthwise_bank_depth(kernel_size: List[int], limits: EngineLimits) -> Optional[str]:
    """Depthwise weights fit the engine's bank: ``k_h * k_w * ceil(channel_parallel / bank_width)
    <= bank_depth``."""
    bank = limits.weight_bank
    depth = kernel_size[0] * kernel_size[1] * math.ceil(limits.channel_parallel / bank.bank_width)
    if depth <= bank.bank_depth:
        return None
    return ("Depthwise weights ({} x {} kernel) are too large for the {} parameter buffer: {} > "
            "bank_depth {}.".format(kernel_size[0], kernel_size[1], limits.engine, depth,
                                    bank.bank_depth))


def check_padding(pad: List[int], kernel_size: List[int], dilation: List[int],
                  pad_limit=None) -> Optional[str]:
    """Each pad non-negative and no larger than the dilated kernel, or within the engine's
    ``pad_limit`` (left, right, top, bottom) where it has one."""
    names = ("pad_left", "pad_right", "pad_top", "pad_bottom")
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, dilation)]
    limits = (dilated[1], dilated[1], dilated[0], dilated[0])
    for i, (name, value) in enumerate(zip(names, pad)):
        if value < 0:
            return "DPU only supports non-negative 'pad'({}).".format(pad)
        if pad_limit is not None:
            if not allows(pad_limit[i], value):
                return "'{}'({}) is not in the DPU supported range ({}).".format(
                    name, value, pad_limit[i])
        elif value > limits[i]:
            return "DPU only supports '{}'({}) no larger than the kernel ({}).".format(
                name, value, limits[i])
    return None


def check_padding_mode(node: OpNode) -> Optional[str]:
    """Zero padding only: other modes become a separate pad op the conv cannot absorb."""
    mode = node.attrs.get("padding_mode", "zeros")
    if mode == "zeros":
        return None
    return "padding_mode '{}' is not supported by the DPU conv (zero padding only).".format(mode)


def check_groups(node: OpNode) -> Optional[str]:
    """Conv groups 1 or depthwise (groups = input channels); other group counts go to the CPU
    (UG1414 "Operators Supported by PyTorch")."""
    groups = node.attrs["groups"]
    if groups == 1:
        return None
    return ("DPU runs conv2d with groups = 1 or depthwise conv (groups = input channels = {}); "
            "this conv has groups = {}. Split it into {} convs and concatenate them.".format(
                node.attrs["in_channels"], groups, groups))


def check_output_padding(node: OpNode) -> Optional[str]:
    """Transposed conv with ``output_padding`` != 0 goes to the CPU (UG1414)."""
    if not any(node.attrs.get("output_padding", [0, 0])):
        return None
    return ("DPU does not support output_padding ({}): drop output_padding and pad or crop the "
            "output instead.".format(node.attrs["output_padding"]))


def check_transposed_kernel(kernel_size: List[int], stride: List[int], spec: str) -> Optional[str]:
    """A transposed conv runs as a conv of kernel ``k / s``: ``k // s`` (and ``k // s + 1`` when s
    does not divide k) must be in the kernel range."""
    for k, s in zip(kernel_size, stride):
        if not (allows(spec, k // s) and (k % s == 0 or allows(spec, k // s + 1))):
            return "'kernel / stride'({} / {}) is not in the DPU supported range ({}).".format(k, s, spec)
    return None


def _transposed_pad(node: OpNode) -> List[int]:
    """The pad of the conv a transposed conv becomes: dilation * (k - 1) - padding per side."""
    kernel, dil, pad = node.attrs["kernel_size"], node.attrs["dilation"], node.attrs["pad"]
    full = [dil[1] * (kernel[1] - 1)] * 2 + [dil[0] * (kernel[0] - 1)] * 2
    return [f - p for f, p in zip(full, pad)]


# ---- op-type rules -----------------------------------------------------------------------------

def conv2d(node: OpNode, ctx: Context) -> Verdict:
    """conv2d on the conv engine (the tracer names depthwise convs ``depthwise_conv2d``)."""
    if node.attrs["groups"] != 1:
        return cpu_verdict(check_groups(node))
    conv, a = ctx.target.engines.conv, node.attrs
    in_shape = ctx.producer(node).shape
    return dpu_unless([
        check_kernel(a["kernel_size"], conv.kernel_size, "conv_engine"),
        check_stride(a["stride"], conv.stride, "conv_engine", a["kernel_size"], list(in_shape[-2:])),
        check_channels(a["in_channels"], a["out_channels"], a["dilation"], conv.input_channel_parallel),
        check_padding(a["pad"], a["kernel_size"], a["dilation"]),
        check_padding_mode(node),
        check_conv_bank_depth(a["kernel_size"], a["in_channels"], ctx.target),
    ])


def depthwise_conv2d(node: OpNode, ctx: Context) -> Verdict:
    """Depthwise conv (groups = input channels) on the ALU or the depthwise-conv engine."""
    limits = ctx.target.engines.depthwise_limits()
    if limits is None:
        return cpu_verdict("{} has no depthwise-conv engine (no ALU with dwconv, no dwconv_engine).".format(
            ctx.target.name))
    a = node.attrs
    in_shape = ctx.producer(node).shape
    return dpu_unless([
        check_kernel(a["kernel_size"], limits.kernel_size, limits.engine),
        check_stride(a["stride"], limits.stride, limits.engine, a["kernel_size"], list(in_shape[-2:])),
        check_channels(a["in_channels"], a["out_channels"], [1, 1], limits.channel_parallel),
        check_padding(a["pad"], a["kernel_size"], a["dilation"], limits.pad),
        check_padding_mode(node),
        check_depthwise_bank_depth(a["kernel_size"], limits),
    ])


def conv_transpose2d(node: OpNode, ctx: Context) -> Verdict:
    """Transposed conv: groups 1 on the conv engine, depthwise on the depthwise engine."""
    a = node.attrs
    groups = a["groups"]
    if groups == 1:
        spec, engine, cp = ctx.target.engines.conv.kernel_size, "conv_engine", ctx.target.engines.conv.input_channel_parallel
        bank = check_conv_bank_depth(a["kernel_size"], a["in_channels"], ctx.target)
    elif groups == a["in_channels"] == a["out_channels"]:
        limits = ctx.target.engines.depthwise_limits()
        if limits is None:
            return cpu_verdict(check_output_padding(node), "{} has no depthwise-conv engine.".format(
                ctx.target.name))
        spec, engine, cp, bank = limits.kernel_size, limits.engine, limits.channel_parallel, None
    else:
        return cpu_verdict(check_output_padding(node), check_groups(node))
    return dpu_unless([
        check_output_padding(node),
        check_transposed_kernel(a["kernel_size"], a["stride"], spec),
        check_channels(a["in_channels"], a["out_channels"], a["dilation"], cp),
        check_padding(_transposed_pad(node), a["kernel_size"], [1, 1]),
        check_padding_mode(node),
        bank,
    ], notes=["runs on the {} as a conv over the zero-upsampled input.".format(engine)])


def dense(node: OpNode, ctx: Context) -> Verdict:
    """Linear layers run on the conv engine as 1x1 convs (matmul is turned into conv2d, UG1414)."""
    return Verdict(DPU)
