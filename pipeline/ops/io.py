"""Graph inputs, constants, zero tensors and the graph's return (``nndct_input``, ``nndct_const``,
``nndct_zeros``, ``nndct_return``; ``nndct_shared/base/key_names.py``)."""
from typing import Any

import torch

from .dpu_support import Verdict, cpu_verdict
from .record import Absent, DpuRule, OpRecord, OpSpec

INPUT = "nndct_input"
CONST = "nndct_const"
ZEROS = "nndct_zeros"  # x.new_zeros(size), torch.zeros(size)
RETURN = "nndct_return"


def dpu_zeros(node: Any, ctx: Any) -> Verdict:
    """A tensor made from sizes only (``x.new_zeros(...)``, Swin's attention mask): no DPU op."""
    return cpu_verdict("{} makes a tensor from sizes alone: it is computed on the CPU.".format(node.op))


RECORD = OpRecord(
    family="io",
    specs={
        INPUT: OpSpec("io", True, False, False),
        CONST: OpSpec("io", False, False, False),
        ZEROS: OpSpec("io", False, False, False),
    },
    functions={torch.zeros: ZEROS},
    methods={"new_zeros": ZEROS},
    approximation=Absent("data enters and leaves; nothing is computed"),
    source="nndct_shared/base/key_names.py",
    onnx={INPUT: Absent("the graph's input: written by the exporter's walk (placeholders)"),
          CONST: Absent("a constant: written by the exporter's walk (get_attr, folded values) or as the "
                        "scalar operand of the op that uses it"),
          ZEROS: Absent("not written yet: a zero tensor of a traced size that depends on the input")},
    dpu_rule={INPUT: Absent("a graph input: the load engine brings it in"),
              CONST: Absent("a parameter, no node of the inspector"),
              ZEROS: DpuRule(("new_zeros", "zeros"), dpu_zeros)},
)
