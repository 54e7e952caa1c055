"""Layer norm (``nndct_layer_norm``): a quantized float operator whose gamma and beta nndct's module
quantizes as parameters in its own forward, then runs torch's operator with them
(``pytorch_nndct/nn/modules/layernorm.py``)."""
import torch.nn.functional as F
from torch import nn

from .record import Absent, OpRecord, OpSpec

LAYER_NORM = "nndct_layer_norm"

RECORD = OpRecord(
    family="layer_norm",
    specs={LAYER_NORM: OpSpec("float", True, False, False)},
    modules={nn.LayerNorm: LAYER_NORM},
    functions={F.layer_norm: LAYER_NORM},
    roles={"norm": (LAYER_NORM,)},
    approximation=Absent("a float operator on the CPU: torch's kernel on quantized gamma and beta"),
    source="pytorch_nndct/nn/modules/layernorm.py",
    xmodel={LAYER_NORM: Absent("not written yet: the xmodel writer has no XIR form for it")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it"),
    traced={LAYER_NORM: ("layer_norm",)},
)
