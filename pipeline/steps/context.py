"""The step context ``StepContext``: what every step's ``run(ctx)`` gets. Three parts, each with one job:

- ``folder``: the run folder (``pipeline.runner.folder.RunDir``, made by the driver): paths, saved step
  results; it knows no step;
- ``feed``: the data feed (``pipeline.data.feed.DataFeed``): source -> stages -> quantizer boundary,
  the splits, batches, the compile-boundary example, the ledger, progress;
- ``model``: the model and quantizer part (``pipeline.steps.model.ModelPart``): the float model, its
  trace, the fingerprint, the settings, the backend, the calibration-checked test-mode model.

One context per invocation; a step reads only files, so it can run in its own process.
"""
from typing import Any, Sequence

from ..config import LoadedConfig
from ..data.feed import DataFeed
from .model import ModelPart


class StepContext:
    """The step context, built from the validated config; every part builds what it holds on first use.

    Args:
        loaded: the validated config (``pipeline.config.LoadedConfig``).
        folder: its run folder (``pipeline.runner.folder.RunDir``: the driver, one floor up, makes it).
        source: an already opened source (``pipeline.data.base.Source``) to use instead of
            ``data.source``; the Python API passes the caller's array this way.
        comm: the ``pipeline.distributed.Comm`` under torchrun, else None: rank 0 alone writes.
    """

    def __init__(self, loaded: LoadedConfig, folder: Any, source: Any = None, comm: Any = None) -> None:
        c = loaded.cfg
        self.loaded, self.cfg, self.comm = loaded, c, comm
        self.folder = folder
        self.feed = DataFeed(c.data, c.preprocess, c.run.seed, loaded.base_dir, source=source, comm=comm)
        self.model = ModelPart(loaded, self.folder, self.feed.rows_sha256)

    @property
    def is_main(self) -> bool:
        """True on rank 0 of a torch.distributed run and in a one-process run: the one that writes."""
        return self.folder.is_main

    def preflight(self, steps: Sequence[Any]) -> None:
        """Checks that need the data's shape but no work, for the ``steps`` (``pipeline.steps.Step``)
        about to run: the feed's (declared layout, channel count after the stages against
        preprocess.mean/std, a shuffled split with stages that keep the batch), then each step's own
        ``preflight`` and the splits it ``reads`` (not when the config gives its output). Raises
        DataError, ConfigError, QuantizationError or CompileError."""
        self.feed.check_shapes()
        for step in steps:
            if step.preflight is not None:
                step.preflight(self)
            if not step.given(self.cfg):
                for part in step.reads:
                    self.feed.require_split(part, step.name)
