"""Deterministic splits and batch iteration, never a copy before the quantizer boundary.

Two kinds of split (``data.split_order``): ``shuffled`` (the default, ``split_rows``: seeded,
stratified by label when there are labels, independent of the file's order; each part is an index
array and the boundary gathers a batch's rows in its one copy) and ``contiguous`` (``split``: each
part is a slice of the file and every batch a view; right only when the file is already shuffled).
"""
import math
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np
import torch

from ..errors import ConfigError, DataError


def split(n: int, fractions: Dict[str, float]) -> Dict[str, slice]:
    """Cut ``range(n)`` into consecutive slices, one per name, in the dict's order.

    Part ``i`` ends at ``floor(n * (f_0 + ... + f_i))``; when the fractions sum to 1 (within 1e-9)
    the last part ends at ``n``. So ``split(1797, {"train": 0.6, "calib": 0.1, "eval": 0.3})`` gives
    ``train 0:1078, calib 1078:1257, eval 1257:1797``. A part may be empty (``slice(k, k)``); the step
    that needs data reports that (e.g. calibration, public case P03).

    Raises:
        ConfigError: ``n`` < 0, a fraction outside [0, 1], or fractions summing to more than 1.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError("split: n must be an int >= 0, got %r" % (n,))
    total = 0.0
    for name, f in fractions.items():
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0:
            raise ConfigError("data.split.%s: a fraction must be a number in [0, 1], got %r" % (name, f))
        total += f
    if total > 1.0 + 1e-9:
        raise ConfigError("data.split: fractions sum to %g, more than 1: %s" % (total, dict(fractions)))
    out, start, acc = {}, 0, 0.0
    names = list(fractions)
    for i, name in enumerate(names):
        acc += fractions[name]
        stop = n if (i == len(names) - 1 and abs(total - 1.0) <= 1e-9) else min(n, int(math.floor(n * acc + 1e-9)))
        out[name] = slice(start, stop)
        start = stop
    return out


def iter_batches(source, part: slice, batch_size: int,
                 limit: Optional[int] = None) -> Iterator[Tuple[torch.Tensor, Optional[np.ndarray]]]:
    """Yield ``(images, labels)`` for consecutive batches of ``part`` of ``source``.

    Args:
        source: a ``pipeline.data.sources.Source``.
        part: a slice of sample indices with step 1 (from ``split``).
        batch_size: samples per batch (the last batch may be smaller).
        limit: at most this many batches (None: all; 0: none).

    Yields:
        ``images``: a torch view of ``source.tensor`` (same storage, source layout and dtype, never a
        copy); ``labels``: a np.int64 view of ``source.labels`` for the same samples, or None.

    Raises:
        ConfigError: a bad batch size or limit; DataError: a part outside the source or with a step.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("batch_size must be an int >= 1, got %r" % (batch_size,))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError("the batch limit must be None or an int >= 0, got %r" % (limit,))
    n = len(source)
    start, stop, step = part.indices(n)
    outside = (part.start is not None and not 0 <= part.start <= n) or (part.stop is not None and part.stop > n)
    if step != 1 or outside:
        raise DataError("part %s does not lie within the source's %d samples with step 1" % (part, n))
    count = 0
    for i in range(start, stop, batch_size):
        if limit is not None and count >= limit:
            return
        j = min(i + batch_size, stop)
        yield source.tensor[i:j], (None if source.labels is None else source.labels[i:j])
        count += 1


def split_rows(n: int, fractions: Dict[str, float], seed: int,
               labels: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """A split independent of the file's order: ``{name: sorted np.int64 row indices}``.

    The part sizes are those of ``split(n, fractions)``. The rows are put in a seeded order and cut
    into consecutive parts of that order. Without labels the order is a random permutation. With
    labels it is stratified: each class's rows are shuffled and spread evenly over the order (row
    ``j`` of ``m`` in a class gets the key ``(j + u) / m``, ``u`` uniform in [0, 1) per class), so every
    part holds each class in proportion, within one row. A class-sorted file therefore gives every
    split every class. The parts are index arrays: the rows are read where they lie (the quantizer
    boundary gathers them), nothing is copied.

    Raises:
        ConfigError: as ``split``; labels of another length than ``n``.
    """
    sizes = {name: sl.stop - sl.start for name, sl in split(n, fractions).items()}
    rng = np.random.default_rng(seed)
    if labels is None:
        order = rng.permutation(n)
    else:
        labels = np.asarray(labels)
        if labels.shape != (n,):
            raise ConfigError("split: %d labels for %d images" % (labels.size, n))
        keys = np.empty(n, dtype=np.float64)
        for cls in np.unique(labels):
            members = np.flatnonzero(labels == cls)
            keys[rng.permutation(members)] = (np.arange(members.size) + rng.random()) / members.size
        order = np.lexsort((rng.random(n), keys))  # ties (classes of equal size) in random order
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = np.sort(order[start:start + size]).astype(np.int64)
        start += size
    return out


def class_counts(labels: Optional[np.ndarray], rows: Any) -> Optional[Dict[str, int]]:
    """``{class: images}`` of ``labels[rows]`` (rows: a slice or an index array), None without labels."""
    if labels is None:
        return None
    values, counts = np.unique(np.asarray(labels)[rows], return_counts=True)
    return {str(int(v)): int(c) for v, c in zip(values, counts)}


def iter_row_batches(source, rows: np.ndarray, batch_size: int,
                     limit: Optional[int] = None) -> Iterator[Tuple[np.ndarray, Optional[np.ndarray]]]:
    """Yield ``(batch rows, labels)`` for consecutive batches of the index array ``rows`` (``split_rows``).

    The rows of a batch are sorted (a memory-mapped file is read forward); the images stay where they
    are: the caller hands ``source.tensor`` (through the stages, views) and the rows to the quantizer
    boundary, which gathers them in its one copy. ``labels`` is ``source.labels[batch rows]`` (np.int64)
    or None.

    Raises:
        ConfigError: a bad batch size or limit.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("batch_size must be an int >= 1, got %r" % (batch_size,))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError("the batch limit must be None or an int >= 0, got %r" % (limit,))
    for count, i in enumerate(range(0, len(rows), batch_size)):
        if limit is not None and count >= limit:
            return
        batch = np.sort(rows[i:i + batch_size])
        yield batch, (None if source.labels is None else source.labels[batch])
