"""The compile boundary: what export and compile are handed is owned and contiguous.

The example input is batch 1, owned and contiguous NCHW, copied from real preprocessed data
(docs/quantizer.md#export-needs-batch-1; public case P04); every parameter and buffer handed to an
exporter is contiguous. Both are recorded in the ledger as run-level rows (``batch`` None).
"""
import copy
from typing import Optional

import torch

from ..errors import DataError
from ..ledger import Ledger


def compile_example(batch: torch.Tensor, ledger: Optional[Ledger] = None) -> torch.Tensor:
    """The example input for export and compile: sample 0 of a preprocessed batch, as a new
    ``(1, C, H, W)`` tensor, C-contiguous NCHW, owned (never a pooled boundary buffer, so it stays
    valid), same dtype. Export and compile need batch 1 (docs/quantizer.md#export-needs-batch-1, public case P04).

    Args:
        batch: a quantizer boundary output ``(N, C, H, W)``, N >= 1, float (real data, not random).
        ledger: when given, a run-level row ``compile_boundary`` (``batch`` None).

    Raises:
        DataError: not a non-empty 4-D float tensor.
    """
    if not isinstance(batch, torch.Tensor) or batch.dim() != 4 or batch.shape[0] < 1 or not batch.is_floating_point():
        got = (tuple(batch.shape), batch.dtype) if isinstance(batch, torch.Tensor) else type(batch).__name__
        raise DataError("compile_example expects a preprocessed float (N, C, H, W) batch with N >= 1 (a quantizer "
                        "boundary output), got %s" % (got,))
    example = torch.empty((1,) + tuple(batch.shape[1:]), dtype=batch.dtype)
    example.copy_(batch[:1])
    if ledger is not None:
        ledger.record("compile_boundary", batch, example,
                      note="batch-1 example input for export/compile: owned, contiguous NCHW, sample 0 of a "
                           "preprocessed batch")
    return example


def contiguous_parameters(model: torch.nn.Module, ledger: Optional[Ledger] = None) -> torch.nn.Module:
    """The model to hand to an exporter, with every parameter and buffer contiguous.

    Returns ``model`` itself when all of them already are (nothing copied); otherwise a deep copy in
    which only the non-contiguous ones were made contiguous (the caller's model is not changed).

    Args:
        ledger: when given, a run-level row ``compile_boundary:parameters`` with the bytes copied and
            the names of the tensors that needed it.
    """
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    bad = [name for name, t in tensors if not t.is_contiguous()]
    if bad:
        model = copy.deepcopy(model)
        for name in bad:
            owner_name, _, attr = name.rpartition(".")
            owner = model.get_submodule(owner_name) if owner_name else model
            t = getattr(owner, attr)
            if isinstance(t, torch.nn.Parameter):
                setattr(owner, attr, torch.nn.Parameter(t.detach().contiguous(), requires_grad=t.requires_grad))
            else:
                owner._buffers[attr] = t.contiguous()
    if ledger is not None:
        copied = sum(t.numel() * t.element_size() for name, t in tensors if name in bad)
        ledger.add("compile_boundary:parameters", not bad, copied, None, None,
                   note=("%d parameters/buffers made contiguous: %s" % (len(bad), ", ".join(bad))) if bad
                   else "all %d parameters/buffers already contiguous; handed over as is" % len(tensors))
    return model
