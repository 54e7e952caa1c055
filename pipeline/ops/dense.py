"""Fully connected layers (``nndct_dense``): ``nn.Linear`` and ``nn.MultiheadAttention``'s ``out_proj``."""
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import XmodelForm, no_attrs

DENSE = "nndct_dense"


def _create_dense(w, node) -> None:
    """XIR ``matmul`` of the input by the ``[out, in]`` weights, transposed, plus the bias
    (``xop_creator.py`` ``dense``)."""
    inputs = {"input": w.data_inputs(node) + [w.op_of(node.params["weights"].name)]}
    if "bias" in node.params:
        inputs["bias"] = [w.op_of(node.params["bias"].name)]
    w.fixed_op(node.name, "matmul", {"transpose_a": False, "transpose_b": True}, inputs)


RECORD = OpRecord(
    family="dense",
    specs={DENSE: OpSpec("dpu", True, False, False)},
    modules={nn.Linear: DENSE, nn.modules.linear.NonDynamicallyQuantizableLinear: DENSE},
    roles={"params": (DENSE,), "bias_corr": (DENSE,)},
    approximation=Absent("integer multiply-accumulate, exact fixed point"),
    source="nndct_shared/base/key_names.py",
    xmodel={DENSE: XmodelForm(no_attrs, _create_dense)},
)
