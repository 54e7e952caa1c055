"""Matrix products of two tensors (``nndct_matmul``): ``x @ y``, ``torch.matmul``."""
import operator

import torch

from .record import Absent, OpRecord, OpSpec

MATMUL = "nndct_matmul"

RECORD = OpRecord(
    family="matmul",
    specs={MATMUL: OpSpec("dpu", True, False, False)},
    functions={operator.matmul: MATMUL, torch.matmul: MATMUL},
    methods={"matmul": MATMUL},
    approximation=Absent("integer products, exact fixed point"),
    source="nndct_shared/base/key_names.py",
    xmodel={MATMUL: Absent("not written yet: the real quantizer writes it as XIR matmul (fx/refusals.py MATMUL)")},
    xir_ops=Absent("the xmodel writer writes no XIR op for it yet"),
    traced={},  # each type traced under its own name
)
