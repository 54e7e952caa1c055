"""The activations' DPU-support machinery (``record.OpRecord.dpu_rule`` of relu, leaky_relu, hard_sigmoid;
float_activation reads it for the conversions): fusion into the producer's engine, an engine that runs
the activation alone, the rule after a pool (P10), and the hard sigmoid or hard swish written out as
``relu6(x + 3) / 6`` (:func:`written_out_fix`). A support module of ``pipeline/ops/`` (no record).

Sources (docs/targets.md#dpuczdx8g-operator-limits):
- Activation fusion: an activation fuses into its producer when the producer has no other consumer
  and the producer's engine lists it as ``nonlinear``; conv fuses relu, relu6, leaky_relu, prelu,
  hswish, hsigmoid, depthwise and transposed conv relu, relu6, leaky_relu, prelu
  (``dpu_op_filter.py``, ``check_nonlinear``); the eltwise engine fuses relu. Nothing fuses into a
  pool (P10): a dedicated pool engine lists no nonlinear type, and the 3.5 Inspector reports a ReLU
  after a MaxPool2d on the CPU even where the ALU that runs the pool lists relu (Vitis-AI issue
  #1501; see :func:`_after_pool`).
- Standalone activations: leaky_relu and prelu need an ALU type of that name; hsigmoid and hswish
  need an ALU engine (``dpu_op_filter.py``, ``filter_hard_sigmoid``).
"""
from typing import Any, List, Optional, Sequence, Tuple

from ..targets import DpuTarget
from .dpu_support import DPU, Fix, Verdict, cpu_verdict, follows

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


def fusion_base(src: Any, ctx: Any) -> Optional[Any]:
    """The node an activation after ``src`` would fuse into: ``src`` itself, or the conv a
    batch norm ``src`` is folded into (on either device). None when ``src`` already carries an
    activation or is not a fusing op."""
    verdict = ctx.verdicts.get(src.name)
    if verdict is None:
        return None
    if src.op == "batch_norm" and verdict.fused_into:
        return ctx.nodes[verdict.fused_into]
    return src if src.op in _FUSABLE_AFTER else None


def fusable_types(base: Any, ctx: Any) -> List[str]:
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


def standalone_engine(op: str, target: DpuTarget) -> Optional[str]:
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


# Where the "no activation after a pool" rule comes from (public case P10), for the reports.
POOL_ACTIVATION_SOURCE = (
    "the Vitis AI 3.5 Inspector assigns devices by matching the compiler's patterns, and it reports a "
    "ReLU after a MaxPool2d on the CPU (\"nndct_relu can't be assigned to DPU\", DPUCZDX8G, Vitis-AI "
    "issue #1501, a known issue for AMD)")


def _after_pool(node: Any, src: Any, ctx: Any) -> Tuple[str, str]:
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


def activation(node: Any, ctx: Any, changes: Sequence[Optional[str]] = (),
               fixes: Sequence[Optional[Fix]] = ()) -> Verdict:
    """relu, relu6, leaky_relu, prelu, hsigmoid, hswish: fused into the producer when its engine
    allows, else on an engine that runs it alone, else on the CPU. After a pool nothing fuses
    (``_after_pool``): the reason names the pool, a note gives the source, another the fix (P10).
    ``changes`` and ``fixes``: the op's own (its unit's: the LeakyReLU slope, ReLU6 -> ReLU), first in
    the verdict; None ones are dropped."""
    changes = [n for n in changes if n]
    fixes = [f for f in fixes if f]
    notes = []  # type: List[str]
    src = ctx.producer(node)
    target = ctx.target
    fuse_failure = None
    base = fusion_base(src, ctx) if src is not None else None
    if base is not None and len(ctx.consumers[src.name]) == 1 and not ctx.on_dpu(base.name):
        return cpu_verdict("{} stays with the {} {!r} it fuses into, which is on the CPU.".format(
            node.op, base.op, base.name), changes=changes, fixes=fixes + [follows(base.name, "the " + base.op)])
    if base is not None and len(ctx.consumers[src.name]) == 1:
        allowed = fusable_types(base, ctx)
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
    engine = standalone_engine(node.op, target)
    if engine is not None:
        return Verdict(DPU, [], ["runs on its own on the {}.".format(engine)] + notes, None, changes, fixes)
    alone = "{} has no engine that runs a {} on its own.".format(target.name, node.op)
    return cpu_verdict(fuse_failure or alone, alone if fuse_failure else None, notes=notes, changes=changes,
                       fixes=fixes)


# Activations that commute with max pooling (non-decreasing functions: max(f(a), f(b)) = f(max(a, b))).
_MONOTONIC = ("relu", "relu6", "leaky_relu", "hsigmoid")


def _move_before_pool_fix(node: Any, pool: Any) -> Fix:
    """An activation after a DPU pool: put it before the pool, where it fuses into the conv. The
    same values after a max pool when the activation is non-decreasing; else they change."""
    exact = pool.op == "max_pool2d" and node.op in _MONOTONIC
    why = ("max pooling commutes with a non-decreasing activation, so the values are the same"
           if exact else "the values change: the pool then averages activated values")
    return Fix("move the {} before the {} {!r}: it then fuses into the layer before the pool; {}.".format(
        node.op, pool.op, pool.name, why),
        "pool(x) -> act -> ...  becomes  act(x) -> pool -> ...  e.g. nn.Sequential(conv, nn.MaxPool2d(2), "
        "nn.ReLU()) -> nn.Sequential(conv, nn.ReLU(), nn.MaxPool2d(2))", exact=exact)


def where_it_runs(replacement: str, node: Any, ctx: Any) -> Optional[str]:
    """Where DPU activation ``replacement`` would run in ``node``'s place ("would fuse into ...",
    "would run on the ..."), or None when it would be on the CPU too."""
    src = ctx.producer(node)
    base = fusion_base(src, ctx) if src is not None else None
    if (base is not None and len(ctx.consumers[src.name]) == 1 and ctx.on_dpu(base.name)
            and replacement in fusable_types(base, ctx)):
        return "would fuse into {} {!r}".format(base.op, base.name)
    if standalone_engine(replacement, ctx.target) and (src is None or ctx.on_dpu(src.name)):
        return "would run on the {}".format(standalone_engine(replacement, ctx.target))
    return None


def _clips_0_6(node: Any) -> bool:
    """relu6(x), clamp(x, 0, 6), hardtanh(x, 0, 6)."""
    return node.op == "relu6" or (node.op in ("clamp", "clip", "hardtanh")
                                  and node.attrs.get("min") == 0 and node.attrs.get("max") == 6)


def _scales_by_sixth(node: Any) -> bool:
    """x / 6 or x * (1 / 6) (a constant operand)."""
    c = node.attrs.get("constant")
    return c is not None and node.attrs.get("tensor_operands") == 1 and (
        (node.op in ("truediv", "div") and c == 6) or (node.op == "mul" and abs(c - 1 / 6) < 1e-6))


def written_out_fix(node: Any, ctx: Any) -> Optional[Fix]:
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
