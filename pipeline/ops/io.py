"""Graph inputs, constants, zero tensors and the graph's return (``nndct_input``, ``nndct_const``,
``nndct_zeros``, ``nndct_return``; ``nndct_shared/base/key_names.py``)."""
from typing import Any

import numpy as np
import torch

from .dpu_support import Verdict, cpu_verdict
from .record import Absent, DpuRule, OpRecord, OpSpec
from .sim_support import TORCH
from .xmodel_support import XmodelForm, no_attrs

INPUT = "nndct_input"
CONST = "nndct_const"
ZEROS = "nndct_zeros"  # x.new_zeros(size), torch.zeros(size)
RETURN = "nndct_return"


def dpu_zeros(node: Any, ctx: Any) -> Verdict:
    """A tensor made from sizes only (``x.new_zeros(...)``, Swin's attention mask): no DPU op."""
    return cpu_verdict("{} makes a tensor from sizes alone: it is computed on the CPU.".format(node.op))


def _create_data(w, node) -> None:
    """A graph input: XIR ``data`` of the node's output shape, float32 (``xop_creator.py`` ``data``)."""
    shape = node.out.shape or [1]
    w.fixed_op(node.name, "data", {"shape": list(shape), "data_type": "FLOAT32"})


def _create_const(w, node) -> None:
    """A constant: XIR ``const`` of its value (a scalar as one element), in the node's NHWC order if it
    has one (``xop_creator.py`` ``const``)."""
    data = np.asarray(node.attrs["data"], dtype=np.float32)
    if data.ndim == 0:
        data = data.reshape(1)
    if node.transpose_out_order:
        data = np.transpose(data, node.transpose_out_order)
    w.fixed_const(node.name, data)


def _create_zeros(w, node) -> None:
    """``x.new_zeros(size)``, ``torch.zeros(size)``: nndct folds the node (no input once its sizes are
    constants: ``constant_folding``) into an XIR ``const`` of zeros of its output shape, with its ``fix``; an
    item assignment into it later (Swin's mask) is not in the const (``tests/data/corpus_real/tv_swin``)."""
    w.fixed_const(node.name, np.zeros(node.out.shape or [1], dtype=np.float32))


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
    xmodel={INPUT: XmodelForm(no_attrs, _create_data), CONST: XmodelForm(no_attrs, _create_const),
            ZEROS: XmodelForm(no_attrs, _create_zeros)},
    xir_ops=Absent("writes only the XIR format's own data and const ops (xir/opdefs.py)"),
    traced={ZEROS: ("new_zeros", "zeros")},
    refusals={},
    sim=dict.fromkeys((INPUT, CONST, ZEROS), TORCH),
    roles={"input_scope": (INPUT,)},
)
