"""A batch norm with no conv before it (``nndct_batch_norm``): a per-channel scale and offset layer.
nndct's BatchNorm module does no bias correction."""
from typing import Any

from torch import nn

from .dpu_support import CPU, DPU, Fix, Verdict, cpu_verdict, follows
from .record import Absent, DpuRule, OpRecord, OpSpec

BATCH_NORM = "nndct_batch_norm"


_CONV_FAMILY = ("conv2d", "depthwise_conv2d", "conv_transpose2d")


def dpu_batch_norm(node: Any, ctx: Any) -> Verdict:
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


RECORD = OpRecord(
    family="batch_norm",
    specs={BATCH_NORM: OpSpec("dpu", True, False, False)},
    modules={nn.BatchNorm1d: BATCH_NORM, nn.BatchNorm2d: BATCH_NORM},
    roles={"params": (BATCH_NORM,)},
    approximation=Absent("folded into a scale and an offset, quantized as parameters"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/nn/modules/batchnorm.py",
    dpu_rule={BATCH_NORM: DpuRule(("batch_norm",), dpu_batch_norm)},
)
