"""The conv family's DPU-support rules, with each constraint's reason and fix (UG1414 "Operators
Supported by PyTorch"; the engines' limits per target through the context)."""
from typing import Any, List, Optional

from torch import nn

from ..dpu_checks import (check_channels, check_conv_bank_depth, check_depthwise_bank_depth, check_kernel,
                          check_padding, check_stride, check_transposed_kernel, fix_channels, fix_conv_bank_depth,
                          fix_kernel, fix_padding, fix_stride, fix_transposed_kernel)
from ..dpu_support import Fix, Verdict, cpu_verdict, dpu_unless


def fix_padding_mode(node: Any) -> Fix:
    """padding_mode other than zeros: zero padding (the border values change)."""
    return Fix("use zero padding; a reflect/replicate pad would itself run on the CPU.",
               "nn.Conv2d(..., padding_mode={!r}) -> nn.Conv2d(..., padding_mode='zeros')".format(
                   node.attrs.get("padding_mode")), exact=False)


def fix_groups(node: Any) -> Fix:
    """groups = g: g convs over ``torch.chunk(x, g, 1)``, concatenated (same values)."""
    a, g = node.attrs, node.attrs["groups"]
    return Fix("split the grouped conv into {} convs over channel slices and concatenate them; apply a following "
               "activation to each conv's output before the concatenation, so that it fuses.".format(g),
               "nn.Conv2d({0}, {1}, k, groups={2}) -> xs = torch.chunk(x, {2}, 1); torch.cat([convs[i](xs[i]) "
               "for i in range({2})], 1)  # convs: {2} x nn.Conv2d({3}, {4}, k); index xs, torch.fx cannot "
               "iterate it".format(
                   a["in_channels"], a["out_channels"], g, a["in_channels"] // g, a["out_channels"] // g))


def fix_no_depthwise(node: Any) -> Fix:
    """No depthwise engine: a groups=1 conv with block-diagonal weights, on the conv engine."""
    a = node.attrs
    return Fix("run it as an ordinary conv (groups=1) whose weights are zero outside each channel's own block: "
               "the same values on the conv engine, at {} times the weights.".format(a["in_channels"]),
               "nn.Conv2d({0}, {1}, k, groups={0}) -> nn.Conv2d({0}, {1}, k)  # weight[o, o // {2}] = "
               "depthwise weight[o, 0], else 0".format(a["in_channels"], a["out_channels"],
                                                      a["out_channels"] // a["in_channels"]))


def check_padding_mode(node: Any) -> Optional[str]:
    """Zero padding only: other modes become a separate pad op the conv cannot absorb."""
    mode = node.attrs.get("padding_mode", "zeros")
    if mode == "zeros":
        return None
    return "padding_mode '{}' is not supported by the DPU conv (zero padding only).".format(mode)


def check_groups(node: Any) -> Optional[str]:
    """Conv groups 1 or depthwise (groups = input channels); other group counts go to the CPU
    (UG1414 "Operators Supported by PyTorch")."""
    groups = node.attrs["groups"]
    if groups == 1:
        return None
    return ("DPU runs conv2d with groups = 1 or depthwise conv (groups = input channels = {}); "
            "this conv has groups = {}. Split it into {} convs and concatenate them.".format(
                node.attrs["in_channels"], groups, groups))


def check_output_padding(node: Any) -> Optional[str]:
    """Transposed conv with ``output_padding`` != 0 goes to the CPU (UG1414)."""
    if not any(node.attrs.get("output_padding", [0, 0])):
        return None
    return ("DPU does not support output_padding ({}): drop output_padding and pad or crop the "
            "output instead.".format(node.attrs["output_padding"]))


def fix_output_padding(node: Any) -> Fix:
    """output_padding: 0, and an ``nn.ZeroPad2d`` on the output (the added border differs)."""
    h, w = node.attrs["output_padding"]
    return Fix("drop output_padding and pad the output with zeros (torch's extra row/column differs: retrain).",
               "nn.ConvTranspose2d(..., output_padding={}) -> nn.Sequential(nn.ConvTranspose2d(...), "
               "nn.ZeroPad2d((0, {}, 0, {})))".format((h, w), w, h), exact=False)


def _transposed_pad(node: Any) -> List[int]:
    """The pad of the conv a transposed conv becomes: dilation * (k - 1) - padding per side."""
    kernel, dil, pad = node.attrs["kernel_size"], node.attrs["dilation"], node.attrs["pad"]
    full = [dil[1] * (kernel[1] - 1)] * 2 + [dil[0] * (kernel[0] - 1)] * 2
    return [f - p for f, p in zip(full, pad)]


def dpu_conv2d(node: Any, ctx: Any) -> Verdict:
    """conv2d on the conv engine (the tracer names depthwise convs ``depthwise_conv2d``)."""
    if node.attrs["groups"] != 1:
        return cpu_verdict(check_groups(node), fixes=[fix_groups(node)])
    conv, a = ctx.target.engines.conv, node.attrs
    in_shape = ctx.producer(node).shape
    return dpu_unless([
        (check_kernel(a["kernel_size"], conv.kernel_size, "conv_engine"), lambda: fix_kernel(a["kernel_size"], conv.kernel_size)),
        (check_stride(a["stride"], conv.stride, "conv_engine", a["kernel_size"], list(in_shape[-2:])),
         lambda: fix_stride(a["stride"], conv.stride)),
        (check_channels(a["in_channels"], a["out_channels"], a["dilation"], conv.input_channel_parallel),
         lambda: fix_channels(a["in_channels"], a["out_channels"], a["dilation"], conv.input_channel_parallel)),
        (check_padding(a["pad"], a["kernel_size"], a["dilation"]), lambda: fix_padding(a["pad"])),
        (check_padding_mode(node), lambda: fix_padding_mode(node)),
        (check_conv_bank_depth(a["kernel_size"], a["in_channels"], ctx.target),
         lambda: fix_conv_bank_depth(a["kernel_size"], a["in_channels"], ctx.target)),
    ])


def dpu_depthwise_conv2d(node: Any, ctx: Any) -> Verdict:
    """Depthwise conv (groups = input channels) on the ALU or the depthwise-conv engine."""
    limits = ctx.target.engines.depthwise_limits()
    if limits is None:
        return cpu_verdict("{} has no depthwise-conv engine (no ALU with dwconv, no dwconv_engine).".format(
            ctx.target.name), fixes=[fix_no_depthwise(node)])
    a = node.attrs
    in_shape = ctx.producer(node).shape
    return dpu_unless([
        (check_kernel(a["kernel_size"], limits.kernel_size, limits.engine), lambda: fix_kernel(a["kernel_size"], limits.kernel_size)),
        (check_stride(a["stride"], limits.stride, limits.engine, a["kernel_size"], list(in_shape[-2:])),
         lambda: fix_stride(a["stride"], limits.stride)),
        (check_channels(a["in_channels"], a["out_channels"], [1, 1], limits.channel_parallel),
         lambda: fix_channels(a["in_channels"], a["out_channels"], [1, 1], limits.channel_parallel)),
        (check_padding(a["pad"], a["kernel_size"], a["dilation"], limits.pad), lambda: fix_padding(a["pad"])),
        (check_padding_mode(node), lambda: fix_padding_mode(node)),
        (check_depthwise_bank_depth(a["kernel_size"], limits), lambda: fix_kernel(a["kernel_size"], limits.kernel_size)),
    ])


def dpu_conv_transpose2d(node: Any, ctx: Any) -> Verdict:
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
        return cpu_verdict(check_output_padding(node), check_groups(node), fixes=[fix_groups(node)])
    return dpu_unless([
        (check_output_padding(node), lambda: fix_output_padding(node)),
        (check_transposed_kernel(a["kernel_size"], a["stride"], spec), lambda: fix_transposed_kernel(a["kernel_size"], a["stride"], spec)),
        (check_channels(a["in_channels"], a["out_channels"], a["dilation"], cp),
         lambda: fix_channels(a["in_channels"], a["out_channels"], a["dilation"], cp)),
        check_padding(_transposed_pad(node), a["kernel_size"], [1, 1]),
        (check_padding_mode(node), lambda: fix_padding_mode(node)),
        (bank, lambda: fix_conv_bank_depth(a["kernel_size"], a["in_channels"], ctx.target)),
    ], notes=["runs on the {} as a conv over the zero-upsampled input.".format(engine)])


def dpu_convolution_mode(node: Any, ctx: Any) -> Verdict:
    """A conv with string padding (``'same'``, ``'valid'``): torch.jit traces it as
    ``aten::_convolution_mode``, for which the real quantizer has no op: it keeps it as a float operator
    (weights, bias and output not quantized) on the CPU. The fix gives the padding as numbers
    (``attrs["pad"]``, XIR ``[left, right, top, bottom]``): the same values, and the conv is a DPU conv."""
    left, right, top, bottom = node.attrs["pad"]
    if left == right and top == bottom:
        fix = Fix("give the padding as numbers (the same values): the conv is then quantized as a DPU conv.",
                  "nn.Conv2d(..., padding='same') -> nn.Conv2d(..., padding=({}, {}))".format(top, left))
    else:  # an even kernel: torch pads one more at the end
        fix = Fix("pad explicitly (torch pads one more row/column at the end for an even kernel) and give the conv "
                  "padding=0 (the same values): the conv is then quantized as a DPU conv.",
                  "nn.Conv2d(..., padding='same') -> nn.Sequential(nn.ZeroPad2d({}), nn.Conv2d(..., padding=0))"
                  .format((left, right, top, bottom)))
    return cpu_verdict("{} with string padding is traced as aten::_convolution_mode, which the quantizer has no op "
                       "for: it runs in float on the CPU (weights, bias and output not quantized).".format(node.source),
                       fixes=[fix])
