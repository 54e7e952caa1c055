"""The step context ``Run``: the run folder plus the data, model and quantizer settings every step
builds lazily from the config (source -> stages -> quantizer boundary, the float model, the
fingerprint). One ``Run`` per invocation; a step reads only files, so it can run in its own process.
"""
import hashlib
import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..config import LoadedConfig
from ..errors import ConfigError, DataError, QuantizationError
from ..runner.folder import RunDir
from .progress import progress  # noqa: F401  (the steps import it from here)

log = logging.getLogger("pipeline")

# Fingerprint fields recorded for the record only: compile_target (without hardware-aware
# quantization the calibration does not depend on it) and config_hash (the config.* keys it
# hashes are compared one by one, so a mismatch names the key).
FINGERPRINT_INFORMATIVE = ("compile_target", "config_hash")


class Run(RunDir):
    """The step context: the run folder (``pipeline.runner.folder.RunDir``) and everything a step needs, built
    lazily from the config.

    Args:
        loaded: the validated config.
        source: an already opened source (``pipeline.data.sources``) to use instead of
            ``data.source``; the Python API passes the caller's array this way.
    """

    def __init__(self, loaded: LoadedConfig, source: Any = None) -> None:
        super().__init__(loaded)
        self._source = source
        self._trace = None  # type: Any  # (model, FloatTrace): the step's one fx trace of its float model
        self._compose = None
        self._boundary = None
        self._splits = None  # type: Optional[Dict[str, slice]]
        self.sharded = False  # True while a step that splits its batches over the ranks runs (calib, test)

    # ------------------------------------------------------------------ data
    @property
    def source(self) -> Any:
        if self._source is None:
            from ..data.sources import open_source
            self._source = open_source(self.cfg.data.source, self.loaded.base_dir)
        return self._source

    @property
    def compose(self) -> Any:
        if self._compose is None:
            from ..stages import build_stages
            self._compose = build_stages(self.cfg.preprocess.stages, source=self.source)
        return self._compose

    @property
    def boundary(self) -> Any:
        if self._boundary is None:
            from ..boundary import QuantizerBoundary
            p = self.cfg.preprocess
            self._boundary = QuantizerBoundary(p.mean, p.std, channel_order=self.compose.boundary_channel_order,
                                               layout=p.layout, dtype=torch.float32)
        return self._boundary

    @property
    def splits(self) -> Dict[str, Any]:
        """Each part's samples: a slice of the source (``data.split_order: contiguous``) or a sorted
        index array (``shuffled``: seeded with run.seed, stratified by label; pipeline.data.batching)."""
        if self._splits is None:
            from ..data.batching import split, split_rows
            d, n = self.cfg.data, len(self.source)
            self._splits = split(n, d.split) if d.split_order == "contiguous" else \
                split_rows(n, d.split, self.cfg.run.seed, self.source.labels)
        return self._splits

    def rows_sha256(self, parts: Sequence[str] = ("train", "calib", "eval")) -> str:
        """sha256 of the rows of ``parts`` (names and row indices): the same in every process of a run,
        or the processes would train, calibrate and evaluate on other rows."""
        h = hashlib.sha256()
        for part in parts:
            rows = self.splits.get(part)
            if rows is None:
                continue
            index = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else np.asarray(rows)
            h.update(part.encode())
            h.update(index.astype("<i8").tobytes())
        return h.hexdigest()

    def split_size(self, part: str) -> int:
        rows = self.splits[part]
        return rows.stop - rows.start if isinstance(rows, slice) else len(rows)

    def split_summary(self) -> Dict[str, Any]:
        """Per part: images and the class histogram (None without labels), for the report."""
        from ..data.batching import class_counts
        return {part: {"images": self.split_size(part), "classes": class_counts(self.source.labels, rows)}
                for part, rows in self.splits.items()}

    def n_batches(self, part: str, limit: Optional[int] = None, batch_size: Optional[int] = None) -> int:
        """How many batches ``batches(part, ...)`` yields."""
        bs = batch_size or self.cfg.data.batch_size
        n = -(-self.split_size(part) // bs)
        return n if limit is None else min(n, limit)

    def batches(self, part: str, ledger: Any = None, limit: Optional[int] = None, batch_size: Optional[int] = None,
                shard: bool = True) -> Iterator[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
        """Boundary buffers of one split: ``(x float32 NCHW owned, labels int64 or None)``.

        While a distributed step runs (``sharded``, and ``shard``), only this rank's batches: batch
        ``i`` goes to rank ``i % world`` (``pipeline.distributed``); the others are not read past
        their views and not copied. Ledger rows keep the global batch index.

        Raises DataError when a batch holds NaN or Inf (public case P07), naming the batch and count.
        """
        from ..data.batching import iter_batches, iter_row_batches
        bs = batch_size or self.cfg.data.batch_size
        total = self.n_batches(part, limit, bs)
        rank, world = (self.comm.rank, self.comm.world) if (shard and self.sharded) else (0, 1)
        part_rows = self.splits[part]
        if getattr(self.source, "streaming", False):  # decodes only this rank's batches (their rows only)
            it = ((view, labels, None) for view, labels in self.source.batches(part_rows, bs, limit, rank, world))
        else:
            if isinstance(part_rows, slice):  # each batch a view of a slice
                it = ((view, labels, None) for view, labels in iter_batches(self.source, part_rows, bs, limit))
            else:  # the stages view the whole source; the boundary gathers the batch's rows in its one copy
                it = ((self.source.tensor, labels, rows)
                      for rows, labels in iter_row_batches(self.source, part_rows, bs, limit))
            if world > 1:
                it = (item for i, item in enumerate(it) if i % world == rank)
        total = len(range(rank, total, world))
        for k, (view, labels, rows) in enumerate(progress(it, part, total)):
            i = k * world + rank
            x = self.boundary(self.compose(view, ledger=ledger, batch_index=i), ledger=ledger, batch_index=i,
                              rows=rows)
            bad = int((~torch.isfinite(x)).sum())
            if bad:
                raise DataError("%s batch %d holds %d non-finite values (NaN or Inf) out of %d; clean the source "
                                "data or drop those samples" % (part, i, bad, x.numel()))
            yield x, (None if labels is None else torch.as_tensor(np.asarray(labels), dtype=torch.int64))

    def preflight(self, steps: Sequence[Any]) -> None:
        """Checks that need the data's shape but no work, for the ``steps`` (``pipeline.steps.Step``)
        about to run: the declared layout, the channel count after the stages against
        preprocess.mean/std, each step's own ``preflight`` and the splits it ``reads``. Raises
        DataError, ConfigError, QuantizationError or CompileError."""
        from ..checks import check_channels, check_declared_layout
        shape = tuple(self.source.shape if getattr(self.source, "streaming", False) else self.source.images.shape)
        check_declared_layout(shape, self.source.layout)
        batch_shape = (min(self.cfg.data.batch_size, shape[0]),) + shape[1:]
        check_channels(self.compose.output_shape(batch_shape), self.cfg.preprocess.mean,
                       [s.get("type") for s in self.cfg.preprocess.stages])
        sizes = {part: self.split_size(part) for part in self.splits}
        if self.cfg.data.split_order != "contiguous" and not getattr(self.source, "streaming", False):
            whole = self.compose.output_shape(shape)
            if whole[0] != shape[0]:
                raise ConfigError("preprocess.stages change the batch dimension (%d images in, %d out, e.g. "
                                  "batch_slice); a shuffled split gathers each batch's rows at the quantizer "
                                  "boundary and needs stages that keep every sample: set data.split_order: "
                                  "contiguous, or drop that stage" % (shape[0], whole[0]))
        for step in steps:
            if step.preflight is not None:
                step.preflight(self)
            if step.given(self.cfg):
                continue
            for part in step.reads:
                if not sizes.get(part):
                    raise DataError("the %s step needs the %s split, which is empty (data.split %s, %d images); give "
                                    "it a share of the data" % (step.name, part, self.cfg.data.split, shape[0]))

    def new_ledger(self) -> Any:
        from ..tensors import Ledger
        return Ledger()

    # ------------------------------------------------------------------ model
    def float_model(self, need_weights: bool = True) -> torch.nn.Module:
        """The float model with its trained weights, in eval mode.

        With ``need_weights=False`` and no weights file yet, the seeded, untrained model (enough to
        inspect the architecture).
        """
        from ..models.loading import build_model, load_weights
        m = self.cfg.model
        torch.manual_seed(self.cfg.run.seed)
        model = build_model(m.zoo, m.factory, m.kwargs)
        if not need_weights and not os.path.isfile(self.weights_path):
            return model
        return load_weights(model, self.weights_path)

    def settings(self) -> Any:
        from ..quantizers.base import QuantSettings
        q = self.cfg.quantizer
        return QuantSettings(target=q.target, bitwidth=q.bitwidth,
                             quant_config_file=self.loaded.resolve(q.quant_config_file), device=q.device)

    def backend(self) -> Any:
        from ..quantizers.base import get_backend
        return get_backend(self.cfg.quantizer.backend)

    def trace(self, model: torch.nn.Module) -> Any:
        """The one ``torch.fx`` trace of ``model`` (``pipeline.fx.float_trace.FloatTrace``), made on the
        first call for this model object and handed to the fingerprint, the backend and the sensitivity."""
        if self._trace is None or self._trace[0] is not model:
            from ..fx.float_trace import FloatTrace
            self._trace = (model, FloatTrace.of(model))
        return self._trace[1]

    def fingerprint(self, model: torch.nn.Module, example: torch.Tensor) -> Dict[str, Any]:
        """The calibration fingerprint of this config (pipeline.quantizers.fingerprint), plus the
        DPU target the run compiles for and the ``config.*`` settings that shape a calibration
        (FINGERPRINT_INFORMATIVE fields are recorded but do not invalidate a calibration)."""
        from ..quantizers.fingerprint import make_fingerprint
        fp = make_fingerprint(model, example, self.settings(), self.loaded.calib_hash(), self.cfg.quantizer.backend,
                              traced=self.trace(model))
        fp["compile_target"] = self.cfg.compile.target
        fp["calib_rows_sha256"] = self.rows_sha256(("calib",))
        # the settings themselves, so that a mismatch names the key that changed, not only the hash
        fp.update(("config." + k, v) for k, v in self.loaded.calib_settings().items())
        return fp

    def example(self, ledger: Any = None) -> torch.Tensor:
        """The compile-boundary example: batch 1, owned, contiguous, from the first sample of the eval
        split (else of calib, else of train): real preprocessed data, not random. Recorded in
        ``ledger`` when given."""
        from ..boundary import compile_example
        part = next(p for p in ("eval", "calib", "train") if self.split_size(p) > 0)
        x, _ = next(self.batches(part, limit=1, batch_size=1, shard=False))
        return compile_example(x, ledger=ledger)

    def check_labels(self, model: torch.nn.Module, example: torch.Tensor, by: str) -> None:
        """Refuse a source without labels, and labels that the model's outputs cannot represent
        (label >= number of outputs): ``by`` (train, test) needs them."""
        labels = self.source.labels
        if labels is None:
            raise DataError("%s: the source has no labels; training and the accuracy test need them (give "
                            "data.source.labels, or set model.weights and run only calib, export, compile, deploy)"
                            % by)
        with torch.no_grad():
            outputs = model(example.clone())
        if not isinstance(outputs, torch.Tensor):
            raise DataError("%s: the model returns %s, not one tensor of class scores (N, classes); training and the "
                            "accuracy test need one. Run only calib, export, compile, deploy for this model (give "
                            "model.weights), or wrap it so that forward returns the scores"
                            % (by, type(outputs).__name__))
        classes = int(outputs.shape[1]) if outputs.dim() == 2 else None
        top = int(np.max(labels))
        if classes is not None and (top >= classes or int(np.min(labels)) < 0):
            raise DataError("%s: the labels run from %d to %d but the model has %d outputs; set model.kwargs."
                            "num_classes (zoo models) to the number of classes, or check the labels"
                            % (by, int(np.min(labels)), top, classes))
