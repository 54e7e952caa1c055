"""DPU assignment rules for activations: fusion into the producer's engine, an engine that runs
the activation alone, the CPU-only ones and the conversions the quantizer offers (sources in
``pipeline.inspect.rules``' docstring: activation fusion, LeakyReLU, standalone activations,
quantizer conversions, P10). Each rule gives its fixes (:class:`~pipeline.inspect.verdict.Fix`):
the ReLU moved before a max pool, the producer duplicated for another reader, the slope 26/256,
SiLU -> Hardswish and sigmoid -> Hardsigmoid, and a hard sigmoid or hard swish written out as
``relu6(x + 3) / 6`` replaced by ``nn.Hardsigmoid``/``nn.Hardswish`` (:func:`written_out_fix`)."""
from typing import List, Optional, Tuple

from pipeline.ops.leaky_relu import LEAKY_SLOPE
from pipeline.targets import DpuTarget
from pipeline.inspect.trace import OpNode
from pipeline.inspect.verdict import DPU, Context, Fix, Verdict, cpu_verdict, follows, tail_fix


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
    if slope == LEAKY_SLOPE:
        return None
    return ("negative_slope {} -> 26/256 = {} on the DPU: the quantizer forces this slope "
            "(with a warning) and the simulation uses it; retrain with "
            "nn.LeakyReLU(26 / 256) to keep float and DPU alike.".format(slope, LEAKY_SLOPE))


def leaky_relu_slope_fix(node: OpNode) -> Optional[Fix]:
    """The slope 26/256 in the float model, so that float and DPU compute the same function."""
    slope = node.attrs["negative_slope"]
    if slope == LEAKY_SLOPE:
        return None
    return Fix("use the DPU's slope 26/256 in the float model (the DPU computes that slope whatever the model "
               "says).", "nn.LeakyReLU({}) -> nn.LeakyReLU(0.1015625)  # 26 / 256".format(slope), exact=False)


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
    fixes = [f for f in (leaky_relu_slope_fix(node) if node.op == "leaky_relu" else None,) if f]
    notes = []  # type: List[str]
    src = ctx.producer(node)
    target = ctx.target
    fuse_failure = None
    base = _fusion_base(src, ctx) if src is not None else None
    if base is not None and len(ctx.consumers[src.name]) == 1 and not ctx.on_dpu(base.name):
        return cpu_verdict("{} stays with the {} {!r} it fuses into, which is on the CPU.".format(
            node.op, base.op, base.name), changes=changes, fixes=fixes + [follows(base.name, "the " + base.op)])
    if base is not None and len(ctx.consumers[src.name]) == 1:
        allowed = _fusable_types(base, ctx)
        if node.op in allowed:
            return Verdict(DPU, [], ["fused into {} {!r}.".format(base.op, base.name)], base.name, changes, fixes)
        fuse_failure = "Try to assign {} + {} to DPU failed: on {} a {} fuses only {}.".format(
            base.op, node.op, target.name, base.op, ", ".join(allowed) or "no activation")
    elif base is not None:
        fuse_failure = ("Try to assign {} + {} to DPU failed: {!r} has other consumers, so its "
                        "output is needed before the activation.".format(base.op, node.op, src.name))
        fixes.append(Fix("give the {} its own copy of {} {!r} (the other readers keep theirs): the copy's only "
                         "reader is the activation, which then fuses (the same values, twice the {}'s work)."
                         .format(node.op, base.op, base.name, base.op),
                         "y = act(conv(x)); z = other(conv(x)) -> y = act(conv_copy(x)); z = other(conv(x))  "
                         "# conv_copy = copy.deepcopy(conv)"))
    elif src is not None and src.op in _POOLS:
        fuse_failure, source = _after_pool(node, src, ctx)
        notes.append(source)
        if not ctx.on_dpu(src.name):
            fixes.append(follows(src.name, "the pool"))
        else:
            fixes.append(_move_before_pool_fix(node, src))
        if node.op in ("relu", "relu6") and src.op == "max_pool2d":
            notes.append("put the {} before the MaxPool2d: max pooling commutes with it "
                         "(relu(maxpool(x)) == maxpool(relu(x))), and it then fuses into the conv."
                         .format(node.op))
    engine = _standalone_engine(node.op, target)
    if engine is not None:
        return Verdict(DPU, [], ["runs on its own on the {}.".format(engine)] + notes, None, changes, fixes)
    alone = "{} has no engine that runs a {} on its own.".format(target.name, node.op)
    return cpu_verdict(fuse_failure or alone, alone if fuse_failure else None, notes=notes, changes=changes,
                       fixes=fixes)


# Activations that commute with max pooling (non-decreasing functions: max(f(a), f(b)) = f(max(a, b))).
_MONOTONIC = ("relu", "relu6", "leaky_relu", "hsigmoid")


def _move_before_pool_fix(node: OpNode, pool: OpNode) -> Fix:
    """An activation after a DPU pool: put it before the pool, where it fuses into the conv. The
    same values after a max pool when the activation is non-decreasing; else they change."""
    exact = pool.op == "max_pool2d" and node.op in _MONOTONIC
    why = ("max pooling commutes with a non-decreasing activation, so the values are the same"
           if exact else "the values change: the pool then averages activated values")
    return Fix("move the {} before the {} {!r}: it then fuses into the layer before the pool; {}.".format(
        node.op, pool.op, pool.name, why),
        "pool(x) -> act -> ...  becomes  act(x) -> pool -> ...  e.g. nn.Sequential(conv, nn.MaxPool2d(2), "
        "nn.ReLU()) -> nn.Sequential(conv, nn.ReLU(), nn.MaxPool2d(2))", exact=exact)


# CPU-only activations and the conversion the quantizer offers for each (docs/arithmetic.md#optional-conversions).
_CONVERSIONS = {
    "silu": ("hswish", "SiLU -> HardSwish (quant config key convert_silu_to_hswish)"),
    "sigmoid": ("hsigmoid", "sigmoid -> HardSigmoid (option --nndct_convert_sigmoid_to_hsigmoid)"),
}
# The DPU activation nearest to each CPU-only one, and the module that computes it (the fix).
_NEAREST = {"silu": ("hswish", "nn.SiLU() -> nn.Hardswish()  # or F.silu(x) -> F.hardswish(x)"),
            "sigmoid": ("hsigmoid", "nn.Sigmoid() -> nn.Hardsigmoid()  # or torch.sigmoid(x) -> F.hardsigmoid(x)"),
            "gelu": ("hswish", "nn.GELU() -> nn.Hardswish()  # a different curve: retrain")}


def cpu_activation(node: OpNode, ctx: Context) -> Verdict:
    """sigmoid, SiLU, tanh, GELU: in no engine's nonlinear or ALU types of any target here, so on
    the CPU; where the quantizer offers a conversion, the note says whether the converted op would
    run on the DPU of this target."""
    reason = "{} can't be assigned to DPU: no engine of {} has it (nonlinear types: {}).".format(
        node.op, ctx.target.name, ", ".join(ctx.target.engines.conv.nonlinear))
    fixes = [tail_fix(node, ctx)]
    if node.op in _NEAREST:
        replacement, code = _NEAREST[node.op]
        where = _where(replacement, node, ctx)
        if where is not None:
            fixes.insert(0, Fix("replace it with the DPU's {}: the op then {} (a piecewise-linear approximation: "
                                "check the accuracy).".format(replacement, where), code, exact=False))
    conversion = _CONVERSIONS.get(node.op)
    if conversion is None:
        return cpu_verdict(reason, fixes=fixes)
    replacement, text = conversion
    where = _where(replacement, node, ctx) or "would still run on the CPU"
    return cpu_verdict(reason, changes=["the quantizer offers {}; after it, the op {} on {} (accuracy "
                                 "changes: check it).".format(text, where, ctx.target.name)], fixes=fixes)


def _where(replacement: str, node: OpNode, ctx: Context) -> Optional[str]:
    """Where DPU activation ``replacement`` would run in ``node``'s place ("would fuse into ...",
    "would run on the ..."), or None when it would be on the CPU too."""
    src = ctx.producer(node)
    base = _fusion_base(src, ctx) if src is not None else None
    if (base is not None and len(ctx.consumers[src.name]) == 1 and ctx.on_dpu(base.name)
            and replacement in _fusable_types(base, ctx)):
        return "would fuse into {} {!r}".format(base.op, base.name)
    if _standalone_engine(replacement, ctx.target) and (src is None or ctx.on_dpu(src.name)):
        return "would run on the {}".format(_standalone_engine(replacement, ctx.target))
    return None


def _clips_0_6(node: OpNode) -> bool:
    """relu6(x), clamp(x, 0, 6), hardtanh(x, 0, 6)."""
    return node.op == "relu6" or (node.op in ("clamp", "clip", "hardtanh")
                                  and node.attrs.get("min") == 0 and node.attrs.get("max") == 6)


def _scales_by_sixth(node: OpNode) -> bool:
    """x / 6 or x * (1 / 6) (a constant operand)."""
    c = node.attrs.get("constant")
    return c is not None and node.attrs.get("tensor_operands") == 1 and (
        (node.op in ("truediv", "div") and c == 6) or (node.op == "mul" and abs(c - 1 / 6) < 1e-6))


def written_out_fix(node: OpNode, ctx: Context) -> Optional[Fix]:
    """The fix for a node of a hard sigmoid or hard swish written out: ``relu6(x + 3) / 6`` (or
    clamp/hardtanh to [0, 6], ``* (1 / 6)``), times x for the swish. These ops are float operators of
    the quantizer (CPU); ``nn.Hardsigmoid``/``nn.Hardswish`` compute the same values as DPU ops.
    None when ``node`` is not in such a pattern."""
    chain, level = [node], [node]
    for _ in range(3):  # add <- clip <- (scale | mul) <- (mul | scale)
        level = [ctx.nodes[n] for up in level for n in up.inputs[:2] if n in ctx.nodes]
        chain += level
    for add in chain:
        if not (add.op == "add" and add.attrs.get("constant") == 3 and add.attrs.get("tensor_operands") == 1):
            continue
        x = add.inputs[0]
        users = [ctx.nodes[n] for n in ctx.consumers[add.name]]
        clip = users[0] if len(users) == 1 and _clips_0_6(users[0]) else None
        after = [ctx.nodes[n] for n in ctx.consumers[clip.name]] if clip is not None else []
        if len(after) != 1:
            continue
        members, swish, step = {add.name, clip.name}, False, after[0]
        for _ in range(2):  # the scale and the multiply by x, in either order
            if _scales_by_sixth(step) or (step.op == "mul" and x in step.inputs):
                members.add(step.name)
                swish = swish or (step.op == "mul" and x in step.inputs)
                nxt = ctx.consumers[step.name]
                if len(nxt) != 1:
                    break
                step = ctx.nodes[nxt[0]]
        if node.name not in members or not any(_scales_by_sixth(ctx.nodes[m]) for m in members):
            continue
        module = "nn.Hardswish()" if swish else "nn.Hardsigmoid()"
        return Fix("this is a hard {} written out ({}): {} computes the same values as one DPU op.".format(
            "swish" if swish else "sigmoid", ", ".join(sorted(members)), module),
            "{}F.relu6(x + 3) / 6 -> {}(x)".format("x * " if swish else "", module))
    return None
