"""DPU assignment rules: one function per constraint, and one per op type that combines them (the
conv engine's in ``conv_rules.py``; ``Verdict`` and ``Context`` in ``verdict.py``).

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
  #1501; see ``_after_pool``).
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
Messages reuse the real Inspector's wording where one exists ("Try to assign ... to DPU failed.",
"... can't be assigned to DPU.", "The input of reshape is not on DPU.", "DPU does not support
output_padding."; docs/targets.md#dpuczdx8g-operator-limits).
"""

from typing import Callable, Dict, List, Optional, Tuple

from pipeline.targets import DpuTarget
from pipeline.inspect.conv_rules import (check_kernel, check_padding, check_stride, check_transposed_kernel, conv2d,
                                          conv_transpose2d, dense, depthwise_conv2d)
from pipeline.inspect.trace import OpNode
from pipeline.inspect.verdict import CPU, DPU, Context, Verdict, _cpu, _dpu_unless
DPU_LEAKY_SLOPE = 26.0 / 256  # 0.1015625, docs/arithmetic.md#leakyrelu-slope

# Prototxt nonlinear type of each activation op.
NONLINEAR_NAME = {"relu": "relu", "relu6": "relu_six", "leaky_relu": "leaky_relu",
                  "prelu": "prelu", "hsigmoid": "hsigmoid", "hswish": "hswish"}
# Which activations each producer type may fuse at most (before the engine's own list).
_FUSABLE_AFTER = {
    "conv2d": ("relu", "relu6", "prelu", "leaky_relu", "hswish", "hsigmoid"),
    "dense": ("relu", "relu6", "prelu", "leaky_relu", "hswish", "hsigmoid"),
    "conv_transpose2d": ("relu", "relu6", "prelu", "leaky_relu"),
    "depthwise_conv2d": ("relu", "relu6", "prelu", "leaky_relu"),
    "add": ("relu",),
    "mul": ("relu",),
}
_POOLS = ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d")
_RESHAPES = ("reshape", "view", "flatten")
_CONV_FAMILY = ("conv2d", "depthwise_conv2d", "conv_transpose2d")


def _fusion_base(src: OpNode, ctx: Context) -> Optional[OpNode]:
    """The node an activation after ``src`` would fuse into: ``src`` itself, or the conv a
    batch norm ``src`` is folded into (on either device). None when ``src`` already carries an
    activation or is not a fusing op."""
    verdict = ctx.verdicts.get(src.name)
    if verdict is None:
        return None
    if src.op == "batch_norm" and verdict.fused_into:
        return ctx.nodes[verdict.fused_into]
    return src if src.op in _FUSABLE_AFTER else None


def _fusable_types(base: OpNode, ctx: Context) -> List[str]:
    """Activation ops that ``base``'s engine fuses on this target."""
    target = ctx.target
    if base.op in ("conv2d", "dense", "conv_transpose2d"):
        engine_nl = target.engines.conv.nonlinear
    elif base.op == "depthwise_conv2d":
        limits = target.engines.depthwise_limits()
        engine_nl = limits.nonlinear if limits else ()
    else:
        engine = target.engines.eltwise_for("add" if base.op == "add" else "mult")
        engine_nl = engine[1] if engine else ()
    return [op for op in _FUSABLE_AFTER[base.op] if NONLINEAR_NAME[op] in engine_nl]


def _standalone_engine(op: str, target: DpuTarget) -> Optional[str]:
    """The engine that runs activation ``op`` on its own, or None."""
    alu = target.engines.alu
    if alu is None:
        return None
    if op in ("leaky_relu", "prelu") and op in alu.alu_types:
        return "alu_engine (alu_type {})".format(op)
    if op == "hsigmoid":
        return "alu_engine"
    if op == "hswish":
        return "alu_engine (hsigmoid) and an element-wise multiply by x"
    return None


def leaky_relu_slope_note(node: OpNode) -> Optional[str]:
    """The slope change the quantizer makes: every LeakyReLU gets slope 26/256 (docs/arithmetic.md#leakyrelu-slope)."""
    slope = node.attrs["negative_slope"]
    if slope == DPU_LEAKY_SLOPE:
        return None
    return ("negative_slope {} -> 26/256 = {} on the DPU: the quantizer forces this slope "
            "(with a warning) and the simulation uses it; retrain with "
            "nn.LeakyReLU(26 / 256) to keep float and DPU alike.".format(slope, DPU_LEAKY_SLOPE))


def relu6_conversion_note(node: OpNode) -> str:
    """ReLU6 -> ReLU: CLE (on by default) rewrites ReLU6 as ReLU in the model it is given
    (docs/quantizer.md#the-callers-model-is-rewritten); the config key ``convert_relu6_to_relu`` asks for
    it explicitly."""
    return ("the quantizer offers ReLU6 -> ReLU (convert_relu6_to_relu); with the default config "
            "(CLE on) it makes this change itself, in the model it is given: pass a copy.")


# Where the "no activation after a pool" rule comes from (public case P10), for the reports.
POOL_ACTIVATION_SOURCE = (
    "the Vitis AI 3.5 Inspector assigns devices by matching the compiler's patterns, and it reports a "
    "ReLU after a MaxPool2d on the CPU (\"nndct_relu can't be assigned to DPU\", DPUCZDX8G, Vitis-AI "
    "issue #1501, a known issue for AMD)")


def _after_pool(node: OpNode, src: OpNode, ctx: Context) -> Tuple[str, str]:
    """``(reason, source note)`` for activation ``node`` right after pool ``src`` (public case P10).

    Which engine runs the pool decides the wording: a dedicated pool engine fuses nothing (its
    prototxt ``nonlinear {}`` block is empty, e.g. ``DPUCAHX8H_ISA2``). For a pool on the ALU the
    target description lists ``nonlinear`` types for the whole engine (relu, relu_six on
    DPUCZDX8G), and the quantizer's old inspector (``dpu_partition.py``) has no ReLU rule at all,
    but the 3.x Inspector decides from the compiler's pattern templates (``xcompiler.get_templates``
    in ``nndct_shared/inspector``), and a ReLU after a MaxPool2d is reported on the CPU there
    (Vitis-AI issue #1501, third-party report on Vitis AI 3.5). That observation is for max pooling
    on DPUCZDX8G; this inspection applies it to every pool on an ALU.
    """
    target = ctx.target
    head = "{} can't be assigned to DPU: it follows {} {!r}".format(node.op, src.op, src.name)
    if not ctx.on_dpu(src.name):
        return head + ", which is on the CPU.", "an activation runs on the DPU only fused into its producer there."
    limits = target.engines.pool_limits("max" if src.op == "max_pool2d" else "avg")
    if limits is not None and limits.engine == "pool_engine":
        return (head + ", and the pool_engine of {} fuses no activation.".format(target.name),
                "source: the pool_engine's nonlinear list is empty in the {} target description "
                "(target_factory prototxt).".format(target.name))
    listed = target.engines.alu.nonlinear if target.engines.alu is not None else ()
    if target.family == "DPUCZDX8G":
        why = (", and on {} the Vitis AI 3.5 Inspector finds no compiler pattern for a pool followed by "
               "an activation, so it leaves the activation on the CPU.".format(target.family))
    else:
        why = (", and no compiler pattern for a pool followed by an activation is known on {} (on DPUCZDX8G "
               "the 3.5 Inspector leaves such a ReLU on the CPU; this inspection assumes the same here)."
               .format(target.name))
    return (head + why,
            "source: {}. The alu_engine's nonlinear list in the target info ({}) belongs to the whole "
            "engine; this inspection uses it after a depthwise conv or an element-wise op on the ALU, "
            "not after a pool.".format(POOL_ACTIVATION_SOURCE, ", ".join(listed) or "empty"))


def activation(node: OpNode, ctx: Context) -> Verdict:
    """relu, relu6, leaky_relu, prelu, hsigmoid, hswish: fused into the producer when its engine
    allows, else on an engine that runs it alone, else on the CPU. After a pool nothing fuses
    (``_after_pool``): the reason names the pool, a note gives the source, another the fix (P10)."""
    changes = [n for n in (leaky_relu_slope_note(node) if node.op == "leaky_relu" else None,
                           relu6_conversion_note(node) if node.op == "relu6" else None) if n]
    notes = []  # type: List[str]
    src = ctx.producer(node)
    target = ctx.target
    fuse_failure = None
    base = _fusion_base(src, ctx) if src is not None else None
    if base is not None and len(ctx.consumers[src.name]) == 1 and not ctx.on_dpu(base.name):
        return _cpu("{} stays with the {} {!r} it fuses into, which is on the CPU.".format(
            node.op, base.op, base.name), changes=changes)
    if base is not None and len(ctx.consumers[src.name]) == 1:
        allowed = _fusable_types(base, ctx)
        if node.op in allowed:
            return Verdict(DPU, [], ["fused into {} {!r}.".format(base.op, base.name)], base.name, changes)
        fuse_failure = "Try to assign {} + {} to DPU failed: on {} a {} fuses only {}.".format(
            base.op, node.op, target.name, base.op, ", ".join(allowed) or "no activation")
    elif base is not None:
        fuse_failure = ("Try to assign {} + {} to DPU failed: {!r} has other consumers, so its "
                        "output is needed before the activation.".format(base.op, node.op, src.name))
    elif src is not None and src.op in _POOLS:
        fuse_failure, source = _after_pool(node, src, ctx)
        notes.append(source)
        if node.op in ("relu", "relu6") and src.op == "max_pool2d":
            notes.append("put the {} before the MaxPool2d: max pooling commutes with it "
                         "(relu(maxpool(x)) == maxpool(relu(x))), and it then fuses into the conv."
                         .format(node.op))
    engine = _standalone_engine(node.op, target)
    if engine is not None:
        return Verdict(DPU, [], ["runs on its own on the {}.".format(engine)] + notes, None, changes)
    alone = "{} has no engine that runs a {} on its own.".format(target.name, node.op)
    return _cpu(fuse_failure or alone, alone if fuse_failure else None, notes=notes, changes=changes)


# CPU-only activations and the conversion the quantizer offers for each (docs/arithmetic.md#optional-conversions).
_CONVERSIONS = {
    "silu": ("hswish", "SiLU -> HardSwish (quant config key convert_silu_to_hswish)"),
    "sigmoid": ("hsigmoid", "sigmoid -> HardSigmoid (option --nndct_convert_sigmoid_to_hsigmoid)"),
}


def cpu_activation(node: OpNode, ctx: Context) -> Verdict:
    """sigmoid, SiLU, tanh, GELU: in no engine's nonlinear or ALU types of any target here, so on
    the CPU; where the quantizer offers a conversion, the note says whether the converted op would
    run on the DPU of this target."""
    reason = "{} can't be assigned to DPU: no engine of {} has it (nonlinear types: {}).".format(
        node.op, ctx.target.name, ", ".join(ctx.target.engines.conv.nonlinear))
    conversion = _CONVERSIONS.get(node.op)
    if conversion is None:
        return _cpu(reason)
    replacement, text = conversion
    src = ctx.producer(node)
    base = _fusion_base(src, ctx) if src is not None else None
    if (base is not None and len(ctx.consumers[src.name]) == 1 and ctx.on_dpu(base.name)
            and replacement in _fusable_types(base, ctx)):
        where = "would fuse into {} {!r}".format(base.op, base.name)
    elif _standalone_engine(replacement, ctx.target):
        where = "would run on the {}".format(_standalone_engine(replacement, ctx.target))
    else:
        where = "would still run on the CPU"
    return _cpu(reason, changes=["the quantizer offers {}; after it, the op {} on {} (accuracy "
                                 "changes: check it).".format(text, where, ctx.target.name)])


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
                       [], src.name)
    if ctx.target.engines.depthwise_limits() is not None:
        return Verdict(DPU, [], ["not foldable: the quantizer rewrites it as a per-channel scale and "
                                 "offset, run as a depthwise 1x1 conv."])
    return _cpu("batch_norm can't be folded into a conv here, and {} has no depthwise-conv engine "
                "to run it alone.".format(ctx.target.name))


def pool(node: OpNode, ctx: Context) -> Verdict:
    """Max and average pools (adaptive average pools and spatial means as fixed-kernel pools) on
    the ALU or the pool engine, within its kernel, stride and pad limits."""
    kind = "max" if node.op == "max_pool2d" else "avg"
    limits = ctx.target.engines.pool_limits(kind)
    if limits is None:
        return _cpu("{} does not support {} (no pool engine or ALU type for it).".format(
            ctx.target.name, node.op))
    src = ctx.producer(node)
    if src is None or src.shape is None or len(src.shape) != 4:
        return unknown(node, ctx, "a {} of a tensor that is not 4-D".format(node.op))
    in_hw = list(src.shape[2:])
    if node.op in ("adaptive_avg_pool2d", "mean"):
        out_hw = list(node.shape[2:]) if len(node.shape) == 4 else [1, 1]
        if any(i % o for i, o in zip(in_hw, out_hw)):
            return _cpu("adaptive average pool from {} to {}: the bins differ in size, so it is "
                        "not a fixed-kernel pool.".format(in_hw, out_hw))
        kernel = [i // o for i, o in zip(in_hw, out_hw)]
        attrs = {"kernel_size": kernel, "stride": kernel, "dilation": [1, 1], "pad": [0, 0, 0, 0]}
    else:
        attrs = node.attrs
    reasons = [
        check_kernel(attrs["kernel_size"], limits.kernel_size, limits.engine),
        check_stride(attrs["stride"], limits.stride, limits.engine, attrs["kernel_size"], in_hw),
        check_padding(attrs["pad"], attrs["kernel_size"], [1, 1], limits.pad),
    ]
    if attrs["dilation"] != [1, 1]:
        reasons.append("DPU pools do not support dilation ({}).".format(attrs["dilation"]))
    if kind == "avg" and limits.engine == "pool_engine" and attrs["kernel_size"][0] != attrs["kernel_size"][1]:
        reasons.append("the pool engine only averages square kernels; this one is {} x {}.".format(
            *attrs["kernel_size"]))
    return _dpu_unless(reasons)


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
        return _cpu("{} does not support eltwise {}.".format(ctx.target.name, kind.upper()))
    shapes = [ctx.nodes[name].shape for name in node.inputs]
    if len(set(shapes)) != 1:
        return _cpu("DPU eltwise {} needs two inputs of the same shape; got {} "
                    "(broadcasting is not supported).".format(kind, " and ".join(map(str, shapes))))
    return Verdict(DPU)


def concat(node: OpNode, ctx: Context) -> Verdict:
    """Concatenation stays on the DPU unless an input comes from the CPU and it is not a
    channel-wise concatenation of 4-D tensors (vai_q_pytorch ``nndct_shared/inspector/
    device_allocator.py``)."""
    from_cpu = [name for name in node.inputs if not ctx.on_dpu(name)]
    if not from_cpu:
        return Verdict(DPU)
    if len(node.inputs) == len(from_cpu):
        return _cpu("All input of concat are on CPU.")
    if node.shape is None or len(node.shape) != 4 or node.attrs["dim"] % 4 != 1:
        return _cpu("One of the inputs ({}) is on the CPU, and this is not a channel-wise "
                    "concatenation of 4-D tensors.".format(", ".join(from_cpu)))
    return Verdict(DPU)


def nhwc_permute(node: OpNode, ctx: Context) -> Verdict:
    """A reshape/flatten/view of a 4-D NCHW feature map: XIR holds it NHWC, so the quantizer inserts
    a permute NHWC -> NCHW in front (docs/targets.md#xir-is-nhwc). When C or H x W is 1 the two orders agree and no
    data moves; a tensor already permuted in the model needs nothing. Followed by a dense layer
    alone, the permute merges into the dense; otherwise it and the reshape go to the CPU."""
    src = ctx.producer(node)
    if src.shape is None or len(src.shape) != 4 or src.op in ("permute", "transpose"):
        return Verdict(DPU)
    if src.shape[1] == 1 or src.shape[2] * src.shape[3] == 1:
        return Verdict(DPU, [], ["PyTorch's NCHW order equals XIR's NHWC order here ({}: C or H x W"
                                 " is 1), so the layout change moves no data.".format(list(src.shape))])
    note = ("quantizer inserts a permute to convert data layout from 'NHWC' to 'NCHW' before this "
            "{} (input {} {}).".format(node.op, src.name, list(src.shape)))
    users = ctx.consumers[node.name]
    if len(users) == 1 and ctx.nodes[users[0]].op == "dense":
        return Verdict(DPU, [], [note, "the permute merges into the following dense {!r}, which "
                                       "reads its weights in NHWC order.".format(users[0])])
    return _cpu("Try to assign permute(order=(0, 3, 1, 2)) + {} to DPU failed: the DPU has no engine "
                "to reorder a {} feature map from NHWC to NCHW.".format(node.op, list(src.shape)),
                notes=[note, "to keep it on the DPU, flatten in NHWC order: "
                             "x.permute(0, 2, 3, 1).reshape(x.shape[0], -1) (the next layer then sees "
                             "the elements in another order: retrain, or permute its weights), or "
                             "pool to 1 x 1 first."])


def view_contiguity_note(node: OpNode) -> Optional[str]:
    """``view`` on a tensor that may be non-contiguous: it works only while the strides fit the
    new shape, and fails with other input sizes; ``reshape`` and ``flatten`` always work."""
    origin = node.attrs.get("input_may_be_noncontiguous_from")
    if node.op != "view" or origin is None:
        return None
    return ("'view' on a tensor that may be non-contiguous (it comes from {!r}): it works for this "
            "input shape only because the strides happen to fit; use .reshape() or .flatten().".format(origin))


def reshape(node: OpNode, ctx: Context) -> Verdict:
    """reshape, view and flatten: on the DPU when their input is (real message "The input of
    reshape is not on DPU."), subject to the NHWC permute rule, with the view contiguity note."""
    src = ctx.producer(node)
    view_note = view_contiguity_note(node)
    if not ctx.on_dpu(src.name):
        verdict = _cpu("The input of reshape is not on DPU.")
    else:
        verdict = nhwc_permute(node, ctx)
    if view_note:
        verdict.notes.append(view_note)
    return verdict


def permute(node: OpNode, ctx: Context) -> Verdict:
    """permute(0, 2, 3, 1) of a 4-D DPU feature map is XIR's own NHWC order: no data moves, and it
    cancels the permute the quantizer would insert before a reshape (docs/targets.md#xir-is-nhwc). Other permutes
    and transposes move data; no engine of these targets does that."""
    src = ctx.producer(node)
    order = node.attrs.get("order")
    if (order == [0, 2, 3, 1] and src is not None and ctx.on_dpu(src.name)
            and src.shape is not None and len(src.shape) == 4):
        return Verdict(DPU, [], ["permute(0, 2, 3, 1) of a feature map is XIR's NHWC order: no data "
                                 "moves, and a following reshape needs no inserted permute."])
    return _cpu("{} can't be assigned to DPU: it moves data in memory ({}), and {} has no engine "
                "for that.".format(node.op, order or node.attrs.get("dims"), ctx.target.name))


def softmax(node: OpNode, ctx: Context) -> Verdict:
    """Softmax is not a DPU engine op; Vitis AI runs it on the CPU (or a separate softmax IP)."""
    return _cpu("softmax can't be assigned to DPU: it runs on the CPU or on a separate softmax IP "
                "next to the DPU.")


def unknown(node: OpNode, ctx: Context, what: Optional[str] = None) -> Verdict:
    """Anything not in :data:`OP_RULES`: expected on the CPU, said honestly."""
    return _cpu("{} ({}) is not in the CPU inspector's operator table: expect it on the CPU; the "
                "real Inspector in the Vitis AI image gives the final answer.".format(
                    what or node.op, node.source))


def matmul(node: OpNode, ctx: Context) -> Verdict:
    """A product of two feature maps (attention's ``q @ k^T``, ``attn @ v``): the conv engines take
    their second operand from weights, not from another layer's output."""
    return _cpu("matmul can't be assigned to DPU: it multiplies two feature maps, and {} takes the "
                "second operand of a product from weights only.".format(ctx.target.name))


def host_constant(node: OpNode, ctx: Context) -> Verdict:
    """A tensor made from sizes only (``x.new_zeros(...)``, Swin's attention mask): no DPU op."""
    return _cpu("{} makes a tensor from sizes alone: it is computed on the CPU.".format(node.op))


def float_operator(node: OpNode, ctx: Context) -> Verdict:
    """An op the quantizer keeps as a float operator (``pipeline.fx.optable``, kind "float"; the
    real quantizer's ``QUANTIZER_TORCH_FLOAT_OP``, or an element-wise op with a constant): the
    CPU runs it in float on its quantized input."""
    return _cpu("{} ({}) is a float operator of the quantizer: it runs in float on the CPU, on its "
                "quantized input.".format(node.op, node.source))


def resize(node: OpNode, ctx: Context) -> Verdict:
    """Upsample / interpolate: nearest resizing is a DPU op of the quantizer (``nndct_resize``); a
    bilinear one runs as a transposed depthwise conv (:func:`bilinear_resize`); other modes are
    not modelled here."""
    mode = node.attrs.get("mode")
    if mode == "bilinear":
        return bilinear_resize(node, ctx)
    if mode != "nearest":
        return unknown(node, ctx, "a {} resize".format(mode))
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
        return _cpu(prefix + "DPU does not support align_corners = True")
    if src is None or src.shape is None or node.shape is None or len(node.shape) != 4:
        return unknown(node, ctx, "a bilinear resize of an unknown shape")
    scales = [node.shape[d] / src.shape[d] for d in (3, 2)]
    if any(s not in BILINEAR_DPU_SCALES for s in scales) or scales[0] != scales[1]:
        return _cpu(prefix + "resize output / input scale is {} (the DPU takes {} in both directions)".format(
            scales, " or ".join(str(s) for s in BILINEAR_DPU_SCALES)))
    limits = ctx.target.engines.depthwise_limits()
    if limits is None:
        return _cpu(prefix + "{} has no depthwise-conv engine.".format(ctx.target.name))
    s = int(scales[0])
    return _dpu_unless([check_transposed_kernel([2 * s, 2 * s], [s, s], limits.kernel_size)],
                       notes=["runs on the {} as a transposed depthwise conv (kernel {}, stride {}).".format(
                           limits.engine, 2 * s, s)])


def piece(node: OpNode, ctx: Context) -> Verdict:
    """chunk / split and the pieces taken from them: channel slices of the producer's map, where
    the producer runs."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return _cpu("The input of {} is not on DPU.".format(node.op))
    return Verdict(DPU)


def pad(node: OpNode, ctx: Context) -> Verdict:
    """Zero padding of a DPU feature map: the quantizer keeps it as a DPU pad (``nndct_pad_nd``)."""
    src = ctx.producer(node)
    if src is not None and not ctx.on_dpu(src.name):
        return _cpu("The input of pad is not on DPU.")
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
    if node.float_operator and rule not in (cpu_activation, softmax):
        return float_operator(node, ctx)
    if rule is None:
        return unknown(node, ctx)
    return rule(node, ctx)
