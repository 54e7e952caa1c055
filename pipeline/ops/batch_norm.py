"""A batch norm with no conv before it (``nndct_batch_norm``): a per-channel scale and offset layer.
nndct's BatchNorm module does no bias correction."""
from torch import nn

from .record import Absent, OpRecord, OpSpec
from .xmodel_support import XmodelForm, no_attrs

BATCH_NORM = "nndct_batch_norm"


def _create_scale(w, node) -> None:
    """XIR ``scale`` of the input by the folded weights, plus the bias (``xop_creator.py`` ``batch_norm``)."""
    inputs = {"scale": [w.op_of(node.params["weights"].name)], "bias": [w.op_of(node.params["bias"].name)],
              "input": w.data_inputs(node)}
    w.fixed_op(node.name, "scale", {}, inputs)


RECORD = OpRecord(
    family="batch_norm",
    specs={BATCH_NORM: OpSpec("dpu", True, False, False)},
    modules={nn.BatchNorm1d: BATCH_NORM, nn.BatchNorm2d: BATCH_NORM},
    roles={"params": (BATCH_NORM,)},
    approximation=Absent("folded into a scale and an offset, quantized as parameters"),
    source="nndct_shared/base/key_names.py, pytorch_nndct/nn/modules/batchnorm.py",
    xmodel={BATCH_NORM: XmodelForm(no_attrs, _create_scale)},
)
