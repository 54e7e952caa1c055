"""DPU assignment rules: one function per constraint, and one per op type that combines them (the
conv engine's in ``conv_rules.py``, the activations' in ``activation_rules.py``, reshape and
permute in ``layout_rules.py``; ``Verdict`` and ``Context`` in ``verdict.py``), and the table
:data:`OP_RULES` with :func:`decide`.

A ``check_*`` function returns the reason an operation cannot run on the DPU (a string in the real
Inspector's vocabulary), or None when the constraint holds. An op-type function (listed in
:data:`OP_RULES`) returns a :class:`Verdict` for one node, given what was decided for the nodes
before it (topological order).

Sources (docs/targets.md#dpuczdx8g-operator-limits unless stated):
- conv2d: kernel 1-16 and stride 1-8 (the target's ``conv_limit``), input/output channels at most
  256 x channel_parallel, ``dilation x input_channel <= 256 x channel_parallel`` (UG1414), each pad
  no larger than the dilated kernel, weights fitting the weight bank
  (``k_h * k_w * ceil(ic / bank_width) * ceil(ocp / bank_num) <= bank_depth``), groups 1 or
  depthwise (UG1414). The stride limit is not applied when the kernel covers the whole input, and
  the formulas follow vai_q_pytorch ``pytorch_nndct/hardware/dpu_op_filter.py``.
- Activation fusion: an activation fuses into its producer when the producer has no other consumer
  and the producer's engine lists it as ``nonlinear``; conv fuses relu, relu6, leaky_relu, prelu,
  hswish, hsigmoid, depthwise and transposed conv relu, relu6, leaky_relu, prelu
  (``dpu_op_filter.py``, ``check_nonlinear``); the eltwise engine fuses relu. Nothing fuses into a
  pool (P10): a dedicated pool engine lists no nonlinear type, and the 3.5 Inspector reports a ReLU
  after a MaxPool2d on the CPU even where the ALU that runs the pool lists relu (Vitis-AI issue
  #1501; see ``activation_rules._after_pool``).
- LeakyReLU: the DPU's slope is 26/256; the quantizer forces it (docs/arithmetic.md#leakyrelu-slope).
- Standalone activations: leaky_relu and prelu need an ALU type of that name; hsigmoid and hswish
  need an ALU engine (``dpu_op_filter.py``, ``filter_hard_sigmoid``); sigmoid, SiLU, tanh and GELU
  are in no engine of any target here, so they go to the CPU.
- Quantizer conversions (docs/arithmetic.md#optional-conversions): ReLU6 -> ReLU
  (``convert_relu6_to_relu``, and CLE by default, docs/quantizer.md#the-callers-model-is-rewritten), SiLU
  -> HardSwish (``convert_silu_to_hswish``), sigmoid -> HardSigmoid
  (``--nndct_convert_sigmoid_to_hsigmoid``).
- Transposed conv: ``output_padding`` must be 0 (UG1414); kernel / stride in the kernel range.
- Layout (docs/targets.md#xir-is-nhwc): XIR feature maps are NHWC, so a reshape/flatten of a 4-D feature map makes
  the quantizer insert a permute NHWC -> NCHW in front of it; that permute merges into a following
  dense layer (``dpu_op_filter.py``, ``merge_permute_to_matmul``), otherwise it and the reshape
  leave the DPU.
Fixes: each rule gives, with a CPU verdict, the rewrites of the float model that would put the node on
the DPU (``Verdict.fixes``, :class:`~pipeline.inspect.verdict.Fix`), next to the check they answer
(docs/targets.md#fixes); a node on the CPU only because its input is points to that input's fix.
Messages reuse the real Inspector's wording where one exists ("Try to assign ... to DPU failed.",
"... can't be assigned to DPU.", "The input of reshape is not on DPU.", "DPU does not support
output_padding."; docs/targets.md#dpuczdx8g-operator-limits).
"""


from typing import Callable, Dict, Optional

from pipeline.inspect.activation_rules import activation, cpu_activation, written_out_fix
from pipeline.inspect.conv_rules import (check_kernel, check_padding, check_stride, check_transposed_kernel, conv2d,
                                          conv_transpose2d, convolution_mode, dense, depthwise_conv2d, fix_kernel,
                                          fix_padding, legal_values, nearest_legal)
from pipeline.inspect.layout_rules import permute, reshape
from pipeline.inspect.trace import OpNode
from pipeline.ops.conv import CONVOLUTION_MODE
from pipeline.inspect.verdict import (CPU, DPU, Context, Fix, Verdict, cpu_verdict, dpu_unless, follows,
                                      tail_fix)

_CONV_FAMILY = ("conv2d", "depthwise_conv2d", "conv_transpose2d")


def batch_norm(node: OpNode, ctx: Context) -> Verdict:
    """BatchNorm2d folds into the conv before it (conv, depthwise or transposed, with no other
    consumer; docs/arithmetic.md#bn-folding) and runs where that conv runs; otherwise the quantizer
    rewrites it as a per-channel scale and offset, which runs as a depthwise 1x1 conv where the target has
    one (an inference)."""
    src = ctx.producer(node)
    if src is not None and src.op in _CONV_FAMILY and len(ctx.consumers[src.name]) == 1:
        note = "folded into {} {!r} (conv_bn_merge).".format(src.op, src.name)
        if ctx.on_dpu(src.name):
            return Verdict(DPU, [], [note], src.name)
        return Verdict(CPU, ["folded into {} {!r}, which is on the CPU.".format(src.op, src.name)],
                       [], src.name, [], [follows(src.name, "the " + src.op)])
    if ctx.target.engines.depthwise_limits() is not None:
        return Verdict(DPU, [], ["not foldable: the quantizer rewrites it as a per-channel scale and "
                                 "offset, run as a depthwise 1x1 conv."])
    return cpu_verdict("batch_norm can't be folded into a conv here, and {} has no depthwise-conv engine "
                "to run it alone.".format(ctx.target.name),
                fixes=[Fix("put the BatchNorm2d right after a conv that nothing else reads, so that it folds into "
                           "the conv's weights.", exact=False)])


def pool(node: OpNode, ctx: Context) -> Verdict:
    """Max and average pools (adaptive average pools and spatial means as fixed-kernel pools) on
    the ALU or the pool engine, within its kernel, stride and pad limits."""
    kind = "max" if node.op == "max_pool2d" else "avg"
    limits = ctx.target.engines.pool_limits(kind)
    if limits is None:
        return cpu_verdict("{} does not support {} (no pool engine or ALU type for it).".format(
            ctx.target.name, node.op))
    src = ctx.producer(node)
    if src is None or src.shape is None or len(src.shape) != 4:
        return unknown(node, ctx, "a {} of a tensor that is not 4-D".format(node.op))
    in_hw = list(src.shape[2:])
    if node.op in ("adaptive_avg_pool2d", "mean"):
        out_hw = list(node.shape[2:]) if len(node.shape) == 4 else [1, 1]
        if any(i % o for i, o in zip(in_hw, out_hw)):
            return cpu_verdict("adaptive average pool from {} to {}: the bins differ in size, so it is "
                        "not a fixed-kernel pool.".format(in_hw, out_hw), fixes=[Fix(
                            "give the pool an input whose size is a multiple of {} (a crop or pad before it, or "
                            "another input size), so that it is a fixed-kernel pool.".format(out_hw), exact=False)])
        kernel = [i // o for i, o in zip(in_hw, out_hw)]
        attrs = {"kernel_size": kernel, "stride": kernel, "dilation": [1, 1], "pad": [0, 0, 0, 0]}
    else:
        attrs = node.attrs
    module = "nn.MaxPool2d" if kind == "max" else "nn.AvgPool2d"
    checks = [
        (check_kernel(attrs["kernel_size"], limits.kernel_size, limits.engine),
         lambda: pool_kernel_fix(attrs, limits.kernel_size, module)),
        (check_stride(attrs["stride"], limits.stride, limits.engine, attrs["kernel_size"], in_hw),
         lambda: Fix("use a stride in {}.".format(limits.stride), exact=False)),
        (check_padding(attrs["pad"], attrs["kernel_size"], [1, 1], limits.pad), lambda: fix_padding(attrs["pad"])),
    ]
    if attrs["dilation"] != [1, 1]:
        checks.append(("DPU pools do not support dilation ({}).".format(attrs["dilation"]),
                       Fix("use dilation 1.", exact=False)))
    if kind == "avg" and limits.engine == "pool_engine" and attrs["kernel_size"][0] != attrs["kernel_size"][1]:
        checks.append(("the pool engine only averages square kernels; this one is {} x {}.".format(
            *attrs["kernel_size"]), Fix("use a square kernel.", exact=False)))
    return dpu_unless(checks)


def pool_kernel_fix(attrs, spec: str, module: str) -> Fix:
    """A pool kernel out of range: two pools whose kernels multiply to it when each factor is legal and
    the pool does not overlap (stride = kernel, no pad: a max of maxes, a mean of equal means: the same
    values), else the nearest legal kernel."""
    kernel, legal = attrs["kernel_size"], legal_values(spec)
    pairs = [next(((a, k // a) for a in reversed(legal) if k % a == 0 and k // a in legal), None) for k in kernel]
    if attrs["stride"] == kernel and not any(attrs["pad"]) and None not in pairs:
        first, second = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
        return Fix("pool in two steps, kernels {} then {} (stride = kernel): the same values as one {} pool.".format(
            first, second, tuple(kernel)), "{0}({1}) -> nn.Sequential({0}({2}), {0}({3}))".format(
                module, tuple(kernel), first, second))
    return fix_kernel(kernel, spec, module)


def mean(node: OpNode, ctx: Context) -> Verdict:
    """A mean over the spatial dimensions of a 4-D tensor is a global average pool; any other mean
    is not modelled."""
    src = ctx.producer(node)
    dims = sorted(d % 4 for d in node.attrs.get("dim", [])) if src.shape and len(src.shape) == 4 else []
    if dims == [2, 3]:
        return pool(node, ctx)
    return unknown(node, ctx)


def eltwise(node: OpNode, ctx: Context) -> Verdict:
    """Element-wise add and multiply of two feature maps of the same shape on the eltwise engine
    (DPUCV2DX8G: its ALU)."""
    kind = "add" if node.op == "add" else "mult"
    if node.attrs.get("tensor_operands") != 2:
        return unknown(node, ctx, "an element-wise {} with a constant operand".format(kind))
    engine = ctx.target.engines.eltwise_for(kind)
    if engine is None:
        return cpu_verdict("{} does not support eltwise {}.".format(ctx.target.name, kind.upper()))
    shapes = [ctx.nodes[name].shape for name in node.inputs]
    if len(set(shapes)) != 1:
        return cpu_verdict("DPU eltwise {} needs two inputs of the same shape; got {} "
                    "(broadcasting is not supported).".format(kind, " and ".join(map(str, shapes))),
                    fixes=[Fix("make both operands the same shape in the model (e.g. the smaller one made by a "
                               "layer of the full size) instead of broadcasting.", exact=False)])
    return Verdict(DPU)


def constant_fold_fix(node: OpNode, ctx: Context) -> Optional[Fix]:
    """``conv(x) + c``, ``conv(x) * c``, ``conv(x) / c`` with a Python number c, the conv read by nothing
    else: fold c into the conv's bias (and weights for * and /); the same values, one CPU op less."""
    c, src = node.attrs.get("constant"), ctx.producer(node)
    if (c is None or node.attrs.get("tensor_operands") != 1 or src is None or len(ctx.consumers[src.name]) != 1
            or src.op not in ("conv2d", "depthwise_conv2d", "conv_transpose2d", "dense")):
        return None
    fold = {"add": "conv.bias += {c}", "mul": "conv.weight *= {c}; conv.bias *= {c}",
            "truediv": "conv.weight /= {c}; conv.bias /= {c}", "div": "conv.weight /= {c}; conv.bias /= {c}"}
    if node.op not in fold:
        return None
    return Fix("fold the constant {} into {} {!r} (with torch.no_grad(), once, after loading the weights) and drop "
               "the {}.".format(c, src.op, src.name, node.op), fold[node.op].format(c=c))


def concat(node: OpNode, ctx: Context) -> Verdict:
    """Concatenation stays on the DPU unless an input comes from the CPU and it is not a
    channel-wise concatenation of 4-D tensors (vai_q_pytorch ``nndct_shared/inspector/
    device_allocator.py``)."""
    from_cpu = [name for name in node.inputs if not ctx.on_dpu(name)]
    if not from_cpu:
        return Verdict(DPU)
    if len(node.inputs) == len(from_cpu):
        return cpu_verdict("All input of concat are on CPU.", fixes=[follows(n) for n in from_cpu])
    if node.shape is None or len(node.shape) != 4 or node.attrs["dim"] % 4 != 1:
        return cpu_verdict("One of the inputs ({}) is on the CPU, and this is not a channel-wise "
                    "concatenation of 4-D tensors.".format(", ".join(from_cpu)), fixes=[follows(n) for n in from_cpu])
    return Verdict(DPU)


def softmax(node: OpNode, ctx: Context) -> Verdict:
    """Softmax is not a DPU engine op; Vitis AI runs it on the CPU (or a separate softmax IP)."""
    return cpu_verdict("softmax can't be assigned to DPU: it runs on the CPU or on a separate softmax IP "
                "next to the DPU.", fixes=[tail_fix(node, ctx)])


def unknown(node: OpNode, ctx: Context, what: Optional[str] = None) -> Verdict:
    """Anything not in :data:`OP_RULES`: expected on the CPU, said honestly."""
    return cpu_verdict("{} ({}) is not in the CPU inspector's operator table: expect it on the CPU; the "
                "real Inspector in the Vitis AI image gives the final answer.".format(
                    what or node.op, node.source), fixes=[constant_fold_fix(node, ctx), tail_fix(node, ctx)])


def matmul(node: OpNode, ctx: Context) -> Verdict:
    """A product of two feature maps (attention's ``q @ k^T``, ``attn @ v``): the conv engines take
    their second operand from weights, not from another layer's output."""
    return cpu_verdict("matmul can't be assigned to DPU: it multiplies two feature maps, and {} takes the "
                "second operand of a product from weights only.".format(ctx.target.name))


def host_constant(node: OpNode, ctx: Context) -> Verdict:
    """A tensor made from sizes only (``x.new_zeros(...)``, Swin's attention mask): no DPU op."""
    return cpu_verdict("{} makes a tensor from sizes alone: it is computed on the CPU.".format(node.op))


def float_operator(node: OpNode, ctx: Context) -> Verdict:
    """An op the quantizer keeps as a float operator (``pipeline.ops``, kind "float"; the
    real quantizer's ``QUANTIZER_TORCH_FLOAT_OP``, or an element-wise op with a constant): the
    CPU runs it in float on its quantized input."""
    return cpu_verdict("{} ({}) is a float operator of the quantizer: it runs in float on the CPU, on its "
                "quantized input.".format(node.op, node.source), fixes=[constant_fold_fix(node, ctx), tail_fix(node, ctx)])


def resize(node: OpNode, ctx: Context) -> Verdict:
    """Upsample / interpolate: nearest resizing is a DPU op of the quantizer (``nndct_resize``); a
    bilinear one runs as a transposed depthwise conv (:func:`bilinear_resize`); other modes are
    not modelled here."""
    mode = node.attrs.get("mode")
    if mode == "bilinear":
        return bilinear_resize(node, ctx)
    if mode != "nearest":
        verdict = unknown(node, ctx, "a {} resize".format(mode))
        verdict.fixes.insert(0, Fix("use mode='nearest' (or 'bilinear' by 2 or 4).", "F.interpolate(..., mode={!r}) "
                                    "-> F.interpolate(..., mode='nearest')".format(mode), exact=False))
        return verdict
    return Verdict(DPU)


# bilinear upsampling scales the DPU runs as a transposed depthwise conv (kernel 2s, stride s):
# half-pixel centres (torch's align_corners=False) 2 and 4 (vai_q_pytorch
# ``pytorch_nndct/hardware/dpu_op_filter.py``, ``check_bilinear_upsample_scale``)
BILINEAR_DPU_SCALES = (2, 4)


def bilinear_resize(node: OpNode, ctx: Context) -> Verdict:
    """A bilinear upsampling by the same integer scale s (2 or 4) in height and width, without
    align_corners: the quantizer's Inspector turns it into a transposed depthwise conv of kernel
    2s and stride s (its weights are the interpolation factors, at most 1, within the 8-bit range
    at the fix position it gives them) and checks that conv on the depthwise engine; anything else
    stays on the CPU (``dpu_op_filter.py``, ``filter_upsample``)."""
    prefix = "Try to convert BlinearUpsamle2d to transpose depthwise conv2d failed: "
    src = ctx.producer(node)
    if node.attrs.get("align_corners"):
        return cpu_verdict(prefix + "DPU does not support align_corners = True", fixes=[Fix(
            "use align_corners=False (half-pixel centres).", "F.interpolate(..., align_corners=True) -> "
            "F.interpolate(..., align_corners=False)", exact=False)])
    if src is None or src.shape is None or node.shape is None or len(node.shape) != 4:
        return unknown(node, ctx, "a bilinear resize of an unknown shape")
    scales = [node.shape[d] / src.shape[d] for d in (3, 2)]
    if any(s not in BILINEAR_DPU_SCALES for s in scales) or scales[0] != scales[1]:
        return cpu_verdict(prefix + "resize output / input scale is {} (the DPU takes {} in both directions)".format(
            scales, " or ".join(str(s) for s in BILINEAR_DPU_SCALES)), fixes=[Fix(
                "upsample by 2 or 4 in both directions (several steps for a larger power of two), or use "
                "mode='nearest'.", "F.interpolate(x, scale_factor=s, mode='bilinear') -> F.interpolate(x, "
                "scale_factor=2, mode='bilinear')  # repeated", exact=False)])
    limits = ctx.target.engines.depthwise_limits()
    if limits is None:
        return cpu_verdict(prefix + "{} has no depthwise-conv engine.".format(ctx.target.name))
    s = int(scales[0])
    return dpu_unless([check_transposed_kernel([2 * s, 2 * s], [s, s], limits.kernel_size)],
                       notes=["runs on the {} as a transposed depthwise conv (kernel {}, stride {}).".format(
                           limits.engine, 2 * s, s)])


def piece(node: OpNode, ctx: Context) -> Verdict:
    """chunk / split and the pieces taken from them: channel slices of the producer's map, where
    the producer runs."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of {} is not on DPU.".format(node.op), fixes=[follows(src.name)])
    return Verdict(DPU)


def pad(node: OpNode, ctx: Context) -> Verdict:
    """Zero padding of a DPU feature map: the quantizer keeps it as a DPU pad (``nndct_pad_nd``)."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return cpu_verdict("The input of pad is not on DPU.", fixes=[follows(src.name)])
    return Verdict(DPU)


OP_RULES: Dict[str, Callable[[OpNode, Context], Verdict]] = {
    "conv2d": conv2d,
    "depthwise_conv2d": depthwise_conv2d,
    "conv_transpose2d": conv_transpose2d,
    "dense": dense,
    "batch_norm": batch_norm,
    "relu": activation, "relu6": activation, "leaky_relu": activation, "prelu": activation,
    "hsigmoid": activation, "hswish": activation,
    "sigmoid": cpu_activation, "silu": cpu_activation, "tanh": cpu_activation,
    "gelu": cpu_activation,
    "softmax": softmax,
    "max_pool2d": pool, "avg_pool2d": pool, "adaptive_avg_pool2d": pool, "mean": mean,
    "add": eltwise, "mul": eltwise,
    "concat": concat,
    "reshape": reshape, "view": reshape, "flatten": reshape, "squeeze": reshape, "unsqueeze": reshape,
    "matmul": matmul, "new_zeros": host_constant,
    "permute": permute, "transpose": permute,
    "pad": pad, "resize": resize,
    "chunk": piece, "split": piece, "getitem": piece,
}


def decide(node: OpNode, ctx: Context) -> Verdict:
    """The verdict for ``node``: its op-type rule, or :func:`unknown` (the quantizer runs such ops
    as float operators); an op whose rule could put it on the DPU but which the quantizer keeps
    as a float operator (``mean``) goes to the CPU."""
    rule = OP_RULES.get(node.op)
    if node.quantizer_op == CONVOLUTION_MODE:  # a conv with padding='same': a float operator, and why
        verdict = convolution_mode(node, ctx)
    elif node.float_operator and rule not in (cpu_activation, softmax):
        verdict = float_operator(node, ctx)
    elif rule is None:
        verdict = unknown(node, ctx)
    else:
        verdict = rule(node, ctx)
    written = written_out_fix(node, ctx) if verdict.device == CPU else None
    if written is not None:  # a hard sigmoid / swish written out: the activation's own record
        verdict.fixes = [written]
    return verdict
