"""DPU assignment rules of the conv engine: each constraint's ``check_*`` (the reason a parameter is out
of the engine's limits, or None) and the conv2d, depthwise_conv2d, conv_transpose2d and dense
rules that combine them; next to each check, the ``fix_*`` that gives the rewrite putting the node
back within the limit (:class:`~pipeline.inspect.verdict.Fix`). Sources in ``pipeline.inspect.rules``'
docstring (conv2d, transposed conv); the fixes are equalities of convolution arithmetic (a stride split
into a conv and a 1 x 1 max pool, a channel split into convs summed or concatenated) or say that the
values change.
"""
import math
from typing import List, Optional

from pipeline.targets import DpuTarget, EngineLimits, allows
from pipeline.inspect.trace import OpNode
from pipeline.inspect.verdict import DPU, Context, Fix, Verdict, cpu_verdict, dpu_unless


def legal_values(spec: str) -> List[int]:
    """Every value a prototxt range string allows ("1-16" -> 1..16, "1,2,3,5,7"), ascending."""
    values = set()  # type: set
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        values.update(range(int(low), int(high or low) + 1))
    return sorted(values)


def nearest_legal(spec: str, value: int) -> int:
    """The largest value of ``spec`` not above ``value``, else the smallest one."""
    below = [v for v in legal_values(spec) if v <= value]
    return below[-1] if below else legal_values(spec)[0]


def fix_kernel(kernel_size: List[int], spec: str, what: str = "nn.Conv2d") -> Fix:
    """The nearest legal kernel (padding k // 2 keeps the size for odd kernels), or two stacked
    convs of kernels k1 + k2 - 1 = k (the same receptive field); both change the values."""
    new = [nearest_legal(spec, k) for k in kernel_size]
    return Fix("use the nearest kernel the engine takes ({} x {} instead of {} x {}), or two stacked convs "
               "whose kernels add up to k + 1 (the same receptive field).".format(new[0], new[1], *kernel_size),
               "{0}(..., kernel_size={1}) -> {0}(..., kernel_size={2}, padding={3})".format(
                   what, tuple(kernel_size), tuple(new), (new[0] // 2, new[1] // 2)), exact=False)


def fix_stride(stride: List[int], spec: str, what: str = "nn.Conv2d") -> Fix:
    """Stride s = a x b: a conv of stride a (the largest legal divisor) then ``nn.MaxPool2d(1, b)``
    picks the same outputs (a 1 x 1 max pool is a subsampling): the same values, more compute."""
    a = [max(d for d in legal_values(spec) if s % d == 0) for s in stride]
    b = [s // d for s, d in zip(stride, a)]
    return Fix("split the stride: a conv of stride {} followed by a 1 x 1 max pool of stride {} computes the "
               "same outputs (put the pool after the conv's activation, so that the activation still fuses)."
               .format(tuple(a), tuple(b)),
               "{0}(..., stride={1}) -> nn.Sequential({0}(..., stride={2}), nn.MaxPool2d(kernel_size=1, "
               "stride={3}))".format(what, tuple(stride), tuple(a), tuple(b)))


def fix_channels(in_channels: int, out_channels: int, dilation: List[int], channel_parallel: int) -> Fix:
    """Too many output channels: convs of at most the limit, concatenated; too many input channels
    (or dilation x input channels): convs over channel slices, summed. Same values."""
    limit = 256 * channel_parallel
    if out_channels > limit and in_channels <= limit and max(dilation) * in_channels <= limit:
        n = -(-out_channels // limit)
        return Fix("split the output channels over {} convs of at most {} each and concatenate them "
                   "(torch.cat on dim 1).".format(n, limit),
                   "y = torch.cat([conv_i(x) for conv_i in convs], 1)  # convs: {} nn.Conv2d({}, <= {}, ...)"
                   .format(n, in_channels, limit))
    per = limit // max(dilation)
    n = -(-in_channels // per)
    return Fix("split the input channels into {} slices of at most {} and add the convs' outputs (bias in "
               "the first only); split the output channels too if they exceed {}.".format(n, per, limit),
               "xs = torch.split(x, {}, 1); y = convs[0](xs[0]); y = y + convs[1](xs[1])  # ... one add "
               "per slice: not sum(), whose 0 + ... runs on the CPU".format(per))


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


def fix_conv_bank_depth(kernel_size: List[int], in_channels: int, target: DpuTarget) -> Fix:
    """Weights too deep: convs over input-channel slices that fit the bank, summed (same values);
    when even one bank width does not fit, a smaller kernel."""
    conv = target.engines.conv
    bank = conv.weight_bank
    widths = bank.bank_depth // (kernel_size[0] * kernel_size[1] * math.ceil(conv.output_channel_parallel / bank.bank_num))
    if widths < 1:
        return fix_kernel(kernel_size, conv.kernel_size)
    per = widths * bank.bank_width
    return Fix("split the input channels into slices of at most {} (so that the weights fit bank_depth {}) and "
               "add the convs' outputs (bias in the first only).".format(per, bank.bank_depth),
               "xs = torch.split(x, {}, 1); y = convs[0](xs[0]); y = y + convs[1](xs[1])  # ... one add per "
               "slice".format(per))


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


def fix_padding(pad: List[int]) -> Fix:
    """Pad out of range: an explicit ``nn.ZeroPad2d`` before a conv without padding (same values)."""
    return Fix("pad explicitly with nn.ZeroPad2d before the conv and give the conv padding=0 (the same values; "
               "the compiler may fold the pad back into the conv, which the real Inspector or vai_c_xir shows).",
               "nn.Conv2d(..., padding=p) -> nn.Sequential(nn.ZeroPad2d({}), nn.Conv2d(..., padding=0))".format(
                   tuple(pad)))


def convolution_mode(node: OpNode, ctx: Context) -> Verdict:
    """A conv with string padding (``'same'``, ``'valid'``): torch.jit traces it as
    ``aten::_convolution_mode``, for which the real quantizer has no op: it keeps it as a float operator
    (weights, bias and output not quantized) on the CPU (``pipeline/ops/conv.py``). The fix gives the padding as
    numbers (``attrs["pad"]``, XIR ``[left, right, top, bottom]``): the same values, and the conv is a DPU conv."""
    left, right, top, bottom = node.attrs["pad"]
    if left == right and top == bottom:
        fix = Fix("give the padding as numbers (the same values): the conv is then quantized as a DPU conv.",
                  "nn.Conv2d(..., padding='same') -> nn.Conv2d(..., padding=({}, {}))".format(top, left))
    else:  # an even kernel: torch pads one more at the end
        fix = Fix("pad explicitly (torch pads one more row/column at the end for an even kernel) and give the conv "
                  "padding=0 (the same values): the conv is then quantized as a DPU conv.",
                  "nn.Conv2d(..., padding='same') -> nn.Sequential(nn.ZeroPad2d({}), nn.Conv2d(..., padding=0))".format(
                      (left, right, top, bottom)))
    return cpu_verdict("{} with string padding is traced as aten::_convolution_mode, which the quantizer has no op "
                       "for: it runs in float on the CPU (weights, bias and output not quantized).".format(node.source),
                       fixes=[fix])


def fix_padding_mode(node: OpNode) -> Fix:
    """padding_mode other than zeros: zero padding (the border values change)."""
    return Fix("use zero padding; a reflect/replicate pad would itself run on the CPU.",
               "nn.Conv2d(..., padding_mode={!r}) -> nn.Conv2d(..., padding_mode='zeros')".format(
                   node.attrs.get("padding_mode")), exact=False)


def fix_groups(node: OpNode) -> Fix:
    """groups = g: g convs over ``torch.chunk(x, g, 1)``, concatenated (same values)."""
    a, g = node.attrs, node.attrs["groups"]
    return Fix("split the grouped conv into {} convs over channel slices and concatenate them; apply a following "
               "activation to each conv's output before the concatenation, so that it fuses.".format(g),
               "nn.Conv2d({0}, {1}, k, groups={2}) -> xs = torch.chunk(x, {2}, 1); torch.cat([convs[i](xs[i]) "
               "for i in range({2})], 1)  # convs: {2} x nn.Conv2d({3}, {4}, k); index xs, torch.fx cannot "
               "iterate it".format(
                   a["in_channels"], a["out_channels"], g, a["in_channels"] // g, a["out_channels"] // g))


def fix_no_depthwise(node: OpNode) -> Fix:
    """No depthwise engine: a groups=1 conv with block-diagonal weights, on the conv engine."""
    a = node.attrs
    return Fix("run it as an ordinary conv (groups=1) whose weights are zero outside each channel's own block: "
               "the same values on the conv engine, at {} times the weights.".format(a["in_channels"]),
               "nn.Conv2d({0}, {1}, k, groups={0}) -> nn.Conv2d({0}, {1}, k)  # weight[o, o // {2}] = "
               "depthwise weight[o, 0], else 0".format(a["in_channels"], a["out_channels"],
                                                      a["out_channels"] // a["in_channels"]))


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


def fix_output_padding(node: OpNode) -> Fix:
    """output_padding: 0, and an ``nn.ZeroPad2d`` on the output (the added border differs)."""
    h, w = node.attrs["output_padding"]
    return Fix("drop output_padding and pad the output with zeros (torch's extra row/column differs: retrain).",
               "nn.ConvTranspose2d(..., output_padding={}) -> nn.Sequential(nn.ConvTranspose2d(...), "
               "nn.ZeroPad2d((0, {}, 0, {})))".format((h, w), w, h), exact=False)


def fix_transposed_kernel(kernel_size: List[int], stride: List[int], spec: str) -> Fix:
    """kernel / stride out of range: a kernel that is a multiple of the stride within the range."""
    new = [s * nearest_legal(spec, max(1, k // s)) for k, s in zip(kernel_size, stride)]
    return Fix("use a kernel that is a multiple of the stride with kernel / stride in {}.".format(spec),
               "nn.ConvTranspose2d(..., kernel_size={}) -> nn.ConvTranspose2d(..., kernel_size={})".format(
                   tuple(kernel_size), tuple(new)), exact=False)


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


def depthwise_conv2d(node: OpNode, ctx: Context) -> Verdict:
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


def dense(node: OpNode, ctx: Context) -> Verdict:
    """Linear layers run on the conv engine as 1x1 convs (matmul is turned into conv2d, UG1414)."""
    return Verdict(DPU)
