"""Graph inputs, constants, zero tensors and the graph's return (``nndct_input``, ``nndct_const``,
``nndct_zeros``, ``nndct_return``; ``nndct_shared/base/key_names.py``)."""
import torch

from .record import Absent, OpRecord, OpSpec

INPUT = "nndct_input"
CONST = "nndct_const"
ZEROS = "nndct_zeros"  # x.new_zeros(size), torch.zeros(size)
RETURN = "nndct_return"

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
)
