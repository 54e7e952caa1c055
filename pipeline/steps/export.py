"""export: write the quantized model in export.formats from a batch-1 example, verified by the backend."""
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List

from .base import Step, StepResult

log = logging.getLogger("pipeline")


@dataclass
class ExportResult(StepResult):
    """steps/export.json: ``{format: path}``, the example input, the backend's verification reports."""
    files: Dict[str, str] = field(default_factory=dict)
    example_input: str = ""
    example_shape: List[int] = field(default_factory=list)
    agreement: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    ledger: Dict[str, Any] = field(default_factory=dict)


def run(ctx: Any) -> ExportResult:
    import numpy as np
    import torch

    from .. import fileio
    from ..boundary import contiguous_parameters
    from ..quantizers.calib_commit import check_committed
    from .context import FINGERPRINT_INFORMATIVE
    from ..progress import phase
    ledger = ctx.feed.new_ledger()
    model, example = ctx.float_model(), ctx.feed.example(ledger=ledger)
    model = contiguous_parameters(model, ledger=ledger)  # the same values: the fingerprint is the same
    check_committed(ctx.quant_dir, ctx.fingerprint(model, example), ignore=FINGERPRINT_INFORMATIVE,
                    redo="run the calib step again")
    backend = ctx.backend()
    handle = backend.load_test(model, example, ctx.quant_dir, ctx.settings(), traced=ctx.trace(model))
    files = {}
    # in the order of the backend's formats table (a model one format cannot carry keeps the files written before it)
    formats = sorted(ctx.cfg.export.formats, key=list(backend.formats).index)
    for i, fmt in enumerate(formats):
        with phase("export: writing %s (%d of %d)" % (fmt, i + 1, len(formats))):
            files.update(backend.export(handle, example, ctx.path("export"), [fmt]))

    def inputs() -> torch.Tensor:
        return torch.cat([x for x, _ in ctx.feed.batches("eval", limit=ctx.cfg.data.eval_batches)])

    with phase("export: verifying %s against the quantized model" % ", ".join(sorted(files))):
        agreement, warnings = backend.verify(handle, files, inputs, ctx.cfg.export.verify_max_lsb)
    np_example = ctx.path("export", "example_input.npy")
    with fileio.atomic_path(np_example) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, example.numpy())
    log.info("export: %s", ", ".join("%s -> %s" % kv for kv in sorted(files.items())))
    return ExportResult(files=files, example_input=np_example, example_shape=list(example.shape),
                        agreement=agreement, warnings=warnings, ledger=ledger.summary())


STEP = Step("export", run, writes="export", requires=("calib",), own_process=True, result=ExportResult)
