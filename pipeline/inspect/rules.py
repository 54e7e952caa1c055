"""DPU assignment: :func:`decide` gives each node the verdict of its op type's DPU-support rule, which
lives in the op's unit (``pipeline.ops``: the record's ``dpu_rule``, found in ``ops.DPU_RULES``; the
engine-limit checks in ``ops/dpu_checks.py``, the activations' fusion in ``ops/dpu_activation.py``, the
verdict vocabulary in ``ops/dpu_support.py``), called with the graph :class:`Context` of ``verdict.py``.

A ``check_*`` function returns the reason an operation cannot run on the DPU (a string in the real
Inspector's vocabulary), or None when the constraint holds. A rule returns a :class:`Verdict` for one
node, given what was decided for the nodes before it (topological order).

Sources (docs/targets.md#dpuczdx8g-operator-limits unless stated):
- conv2d: kernel 1-16 and stride 1-8 (the target's ``conv_limit``), input/output channels at most
  256 x channel_parallel, ``dilation x input_channel <= 256 x channel_parallel`` (UG1414), each pad
  no larger than the dilated kernel, weights fitting the weight bank
  (``k_h * k_w * ceil(ic / bank_width) * ceil(ocp / bank_num) <= bank_depth``), groups 1 or
  depthwise (UG1414). The stride limit is not applied when the kernel covers the whole input, and
  the formulas follow vai_q_pytorch ``pytorch_nndct/hardware/dpu_op_filter.py``.
- Activation fusion (into the producer's engine, nothing into a pool: P10) and standalone activations: the
  rules and their sources are ``pipeline.ops.dpu_activation``'s; sigmoid, SiLU, tanh and GELU are in no engine
  of any target here, so they go to the CPU.
- LeakyReLU: the DPU's slope is 26/256; the quantizer forces it (docs/arithmetic.md#leakyrelu-slope).
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
the DPU (``Verdict.fixes``, :class:`~pipeline.ops.dpu_support.Fix`), next to the check they answer
(docs/targets.md#fixes); a node on the CPU only because its input is points to that input's fix.
Messages reuse the real Inspector's wording where one exists ("Try to assign ... to DPU failed.",
"... can't be assigned to DPU.", "The input of reshape is not on DPU.", "DPU does not support
output_padding."; docs/targets.md#dpuczdx8g-operator-limits).
"""

from pipeline import ops
from pipeline.ops.dpu_activation import written_out_fix
from pipeline.ops.record import DpuRule
from pipeline.inspect.trace import OpNode
from pipeline.inspect.verdict import CPU, Context, Verdict, constant_fold_fix, cpu_verdict, tail_fix, unknown


def float_operator(node: OpNode, ctx: Context) -> Verdict:
    """An op the quantizer keeps as a float operator (``pipeline.ops``, kind "float"; the
    real quantizer's ``QUANTIZER_TORCH_FLOAT_OP``, or an element-wise op with a constant): the
    CPU runs it in float on its quantized input."""
    return cpu_verdict("{} ({}) is a float operator of the quantizer: it runs in float on the CPU, on its "
                       "quantized input.".format(node.op, node.source),
                       fixes=[constant_fold_fix(node, ctx), tail_fix(node, ctx)])


def decide(node: OpNode, ctx: Context) -> Verdict:
    """The verdict for ``node``: its op type's rule (``ops.DPU_RULES``; a node known by name only, an
    xmodel's op, by ``ops.DPU_RULE_BY_NAME``), or :func:`~pipeline.ops.dpu_support.unknown` where the
    type has none (the quantizer runs such ops as float operators); an op whose rule could put it on
    the DPU but which the quantizer keeps as a float operator (``mean``) goes to the CPU, unless its
    rule judges float operators itself (``DpuRule.judges_float``: the CPU-only activations, softmax); a node
    outside the model's quantized parts (``OpNode.in_quant_part``) goes to the CPU, as in the real Inspector."""
    entry = ops.DPU_RULES.get(node.op_type) if node.op_type is not None else ops.DPU_RULE_BY_NAME.get(node.op)
    rule = entry if isinstance(entry, DpuRule) else None
    if not node.in_quant_part:  # the real Inspector: "Not in quantizable part." (dpu_partition.py)
        verdict = cpu_verdict("{} ({}) lies outside the model's quantized parts (from a DeQuantStub to the next "
                              "QuantStub): the quantizer runs it in float on the CPU.".format(node.op, node.source))
    elif node.float_operator and not (rule is not None and rule.judges_float):
        verdict = float_operator(node, ctx)
    elif rule is None:
        verdict = unknown(node, ctx)
    else:
        verdict = rule.rule(node, ctx)
    written = written_out_fix(node, ctx) if verdict.device == CPU else None
    if written is not None:  # a hard sigmoid / swish written out: the activation's own record
        verdict.fixes = [written]
    return verdict
