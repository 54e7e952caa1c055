"""``DataFeed``: source -> stages -> quantizer boundary, the batches every step reads.

The feed owns what the config's ``data`` and ``preprocess`` sections describe: the source (opened
on first use unless one is given), the splits, the stages (``pipeline.stages.Compose``), the
quantizer boundary (the one copy per batch), the compile-boundary example, the non-finite check,
and the data checks of the pre-flight. It is built from those sections and knows no step and no
backend: who asks for a split names itself in the errors (``require_split``).
"""
import hashlib
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import ConfigError, DataError
from ..progress import progress
from .base import Source


class DataFeed:
    """Batches of the run's data, each through the stages and the quantizer boundary.

    Args:
        data: the config's ``data`` section (source, split, split_order, batch_size).
        preprocess: the config's ``preprocess`` section (stages, mean, std, layout).
        seed: ``run.seed``: the seed of a ``shuffled`` split.
        base_dir: the folder relative paths of ``data.source`` resolve against.
        source: an already opened ``pipeline.data.base.Source`` to use instead of ``data.source``
            (the Python API passes the caller's array this way), or None.
        comm: the ``pipeline.distributed.Comm`` under torchrun, else None.

    Attributes:
        sharded: True while a step that splits its batches over the ranks runs: ``batches`` then
            yields only this rank's batches (set by the driver).
    """

    def __init__(self, data: Any, preprocess: Any, seed: int, base_dir: str, source: Optional[Source] = None,
                 comm: Any = None) -> None:
        self.data, self.preprocess, self.seed, self.base_dir, self.comm = data, preprocess, seed, base_dir, comm
        self._source = source
        self._compose = None  # type: Any
        self._boundary = None  # type: Any
        self._splits = None  # type: Optional[Dict[str, Any]]
        self.sharded = False

    # ------------------------------------------------------------------ the chain
    @property
    def source(self) -> Source:
        """The source (``pipeline.data.sources.open_source`` of ``data.source`` on first use)."""
        if self._source is None:
            from .sources import open_source
            self._source = open_source(self.data.source, self.base_dir)
        return self._source

    @property
    def compose(self) -> Any:
        """The stages (``pipeline.stages.Compose``), built for the source (its deferred channel order)."""
        if self._compose is None:
            from ..stages import build_stages
            self._compose = build_stages(self.preprocess.stages, source=self.source)
        return self._compose

    @property
    def boundary(self) -> Any:
        """The quantizer boundary: float32 NCHW owned buffers, mean/std and the stages' channel order."""
        if self._boundary is None:
            from ..boundary import QuantizerBoundary
            p = self.preprocess
            self._boundary = QuantizerBoundary(p.mean, p.std, channel_order=self.compose.boundary_channel_order,
                                               layout=p.layout, dtype=torch.float32)
        return self._boundary

    # ------------------------------------------------------------------ splits
    @property
    def splits(self) -> Dict[str, Any]:
        """Each part's samples: a slice of the source (``data.split_order: contiguous``) or a sorted
        index array (``shuffled``: seeded with run.seed, stratified by label; pipeline.data.batching)."""
        if self._splits is None:
            from .batching import split, split_rows
            d, n = self.data, len(self.source)
            self._splits = split(n, d.split) if d.split_order == "contiguous" else \
                split_rows(n, d.split, self.seed, self.source.labels)
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
        """The number of samples of ``part`` (0 for a part the split does not name)."""
        rows = self.splits.get(part)
        if rows is None:
            return 0
        return rows.stop - rows.start if isinstance(rows, slice) else len(rows)

    def split_summary(self) -> Dict[str, Any]:
        """Per part: images and the class histogram (None without labels), for the report."""
        from .batching import class_counts
        return {part: {"images": self.split_size(part), "classes": class_counts(self.source.labels, rows)}
                for part, rows in self.splits.items()}

    def n_batches(self, part: str, limit: Optional[int] = None, batch_size: Optional[int] = None) -> int:
        """How many batches ``batches(part, ...)`` yields in all ranks together."""
        bs = batch_size or self.data.batch_size
        n = -(-self.split_size(part) // bs)
        return n if limit is None else min(n, limit)

    # ------------------------------------------------------------------ batches
    def batches(self, part: str, ledger: Any = None, limit: Optional[int] = None, batch_size: Optional[int] = None,
                shard: bool = True, desc: Optional[str] = None) -> Iterator[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
        """Boundary buffers of one split: ``(x float32 NCHW owned, labels int64 (n,) or None)``.

        While a distributed step runs (``sharded``, and ``shard``), only this rank's batches: batch
        ``i`` goes to rank ``i % world`` (``pipeline.distributed``); the others are not read past
        their views and not copied. Ledger rows keep the global batch index. A progress bar or
        progress lines (``pipeline.progress``) follow the loop, named ``desc`` (default: ``part``).

        Raises:
            DataError: a batch holds NaN or Inf (public case P07), naming the batch and count; what
                the source, the stages and the boundary raise.
        """
        bs = batch_size or self.data.batch_size
        total = self.n_batches(part, limit, bs)
        rank, world = (self.comm.rank, self.comm.world) if (shard and self.sharded) else (0, 1)
        it = self.source.batches(self.splits[part], bs, limit, rank, world)
        total = len(range(rank, total, world))
        for k, batch in enumerate(progress(it, desc or part, total)):
            i = k * world + rank
            view = self.compose(batch.view, ledger=ledger, batch_index=i, channel_order=batch.channel_order)
            x = self.boundary(view, ledger=ledger, batch_index=i, rows=batch.rows)
            bad = int((~torch.isfinite(x)).sum())
            if bad:
                raise DataError("%s batch %d holds %d non-finite values (NaN or Inf) out of %d; clean the source "
                                "data or drop those samples" % (part, i, bad, x.numel()))
            labels = batch.labels
            yield x, (None if labels is None else torch.as_tensor(np.asarray(labels), dtype=torch.int64))

    def example(self, ledger: Any = None) -> torch.Tensor:
        """The compile-boundary example: batch 1, owned, contiguous, from the first sample of the eval
        split (else of calib, else of train): real preprocessed data, not random. Recorded in
        ``ledger`` when given."""
        from ..boundary import compile_example
        part = next(p for p in ("eval", "calib", "train") if self.split_size(p) > 0)
        x, _ = next(self.batches(part, limit=1, batch_size=1, shard=False))
        return compile_example(x, ledger=ledger)

    @staticmethod
    def new_ledger() -> Any:
        """A fresh ``Ledger`` that counts the views and copies of a pass over the batches."""
        from ..ledger import Ledger
        return Ledger()

    # ------------------------------------------------------------------ pre-flight
    def check_shapes(self) -> None:
        """Checks that need the data's shape but read no batch: the declared layout against the
        shape, the channel count after the stages against preprocess.mean/std, then the splits
        (cut here), and, for a source that gathers rows at the boundary with a shuffled split,
        stages that keep the batch dimension.

        Raises:
            DataError: a layout that does not fit the shape (``pipeline.checks``).
            ConfigError: mean/std of another length than the channels; a shuffled split with stages
                that change the batch dimension; a bad split.
        """
        from ..checks import check_channels, check_declared_layout
        shape = tuple(self.source.shape)
        check_declared_layout(shape, self.source.layout)
        batch_shape = (min(self.data.batch_size, shape[0]),) + shape[1:]
        check_channels(self.compose.output_shape(batch_shape), self.preprocess.mean,
                       [s.get("type") for s in self.preprocess.stages])
        self.splits  # cut now: a bad split fails here, before the check below
        if self.data.split_order != "contiguous" and self.source.gathers_at_boundary:
            whole = self.compose.output_shape(shape)
            if whole[0] != shape[0]:
                raise ConfigError("preprocess.stages change the batch dimension (%d images in, %d out, e.g. "
                                  "batch_slice); a shuffled split gathers each batch's rows at the quantizer "
                                  "boundary and needs stages that keep every sample: set data.split_order: "
                                  "contiguous, or drop that stage" % (shape[0], whole[0]))

    def require_split(self, part: str, by: str) -> None:
        """DataError when ``part`` is empty (or not in the split); ``by`` names who needs it."""
        if not self.split_size(part):
            raise DataError("the %s step needs the %s split, which is empty (data.split %s, %d images); give it "
                            "a share of the data" % (by, part, self.data.split, len(self.source)))
