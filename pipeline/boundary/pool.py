"""The quantizer boundary's owned output buffers: cache-line aligned, reused only when nothing refers to them.

A buffer is reused only when nothing handed out still refers to it: the pool keeps a weak reference
to the numpy array object whose memory each handed-out tensor's storage holds alive
(``torch.from_numpy`` keeps a reference to that array until the storage dies), so any tensor, view
or ``.numpy()`` array derived from an output keeps its buffer out of the pool. Detected, never
assumed. Reusing buffers avoids the page faults of a fresh allocation.
"""
import weakref
from typing import Any, List, Tuple

import numpy as np
import torch


def aligned_empty(shape: Tuple[int, ...], np_dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous numpy array of ``shape`` and ``np_dtype`` starting on a 64-byte
    boundary (a cache line), a view of a slightly larger owned buffer: numpy's own large arrays start
    16 bytes into a page, so each 64-byte vector store would straddle two lines (docs/performance.md#aligned-buffers).
    The boundary's pool buffers; also the benchmark's output buffers."""
    dtype = np.dtype(np_dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class BufferPool:
    """Owned output buffers, reused only when no handed-out tensor refers to them any more.

    Each entry is ``[(shape, numpy dtype), numpy buffer, weakref to the numpy view the last handed-out
    tensor holds, or None]``.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries = []  # type: List[List[Any]]

    def take(self, shape: Tuple[int, ...], np_dtype: Any) -> Tuple[torch.Tensor, bool]:
        """A C-contiguous torch tensor of ``shape`` (a tuple of ints) and ``np_dtype`` (a numpy scalar
        type) on an owned buffer, and whether the buffer is fresh."""
        key = (shape, np_dtype)
        entries = self._entries
        fresh = True
        # the most recently used free buffer first: it is the one most likely still in cache. (Taking
        # the least recently used one made a caller that drops each batch cycle through every free
        # buffer of the pool, a working set several times the batch's.)
        for i in range(len(entries) - 1, -1, -1):
            entry = entries[i]
            if entry[0] == key and (entry[2] is None or entry[2]() is None):
                if i != len(entries) - 1:
                    entries.append(entries.pop(i))  # most recently used last
                fresh = False
                break
        else:
            entry = [key, aligned_empty(shape, np_dtype), None]
            entries.append(entry)
            if len(entries) > self.capacity:
                entries.pop(0)  # forget the least recently used; whoever holds it keeps it
        holder = entry[1].view()  # a new array object: only the torch storage will refer to it
        entry[2] = weakref.ref(holder)
        return torch.from_numpy(holder), fresh
