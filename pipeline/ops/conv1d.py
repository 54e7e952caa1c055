"""1-D convolutions (``nn.Conv1d``, ``nn.ConvTranspose1d``): calls this project refuses (the real quantizer
quantizes a Conv1d as its own op ``nndct_conv1d``; it refuses a ConvTranspose1d)."""
import torch.nn.functional as F
from torch import nn

from .record import refusals_only
from .refusal import ALL_STAGES, Known, NOT_IN_REAL, NOT_YET, REAL_QUANTIZER

CONV1D = Known(
    what="Conv1d", kind=NOT_YET, stops=ALL_STAGES, several=False,
    real="the real quantizer quantizes it as a conv, its own op nndct_conv1d with weights, bias and output on "
         "fix-point grids, and writes XIR conv1d",
    instead=REAL_QUANTIZER + ", or write it as nn.Conv2d with kernel (1, k) on x.unsqueeze(2), which this "
            "project simulates and exports")
CONV_TRANSPOSE1D = Known(
    what="ConvTranspose1d", kind=NOT_IN_REAL, stops=ALL_STAGES, several=False,
    real="the real quantizer's parser raises 'ConvTranpose1D is unsupported'",
    instead="write it as nn.ConvTranspose2d with kernel (1, k) and stride (1, s) on x.unsqueeze(2)")

RECORD = refusals_only(
    "conv1d", "pytorch_nndct/parse/op_dispatcher.py, nndct_shared/base/key_names.py (CONV1D)",
    {nn.Conv1d: CONV1D, nn.ConvTranspose1d: CONV_TRANSPOSE1D, F.conv1d: CONV1D, F.conv_transpose1d: CONV_TRANSPOSE1D})
