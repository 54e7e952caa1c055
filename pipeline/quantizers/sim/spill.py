"""A list of tensor tuples kept in memory up to a byte budget, the rest in files: fast finetune's caches.

The real quantizer keeps every cached batch in host memory and, when its estimate exceeds 80 % of
the free memory, skips the finetune and then fails (docs/finetune.md#memory). Here a cache holds
at most ``budget`` bytes in memory; later entries go to ``.npy`` files in a private temporary
folder (removed by :meth:`BatchStore.close`), read back one entry at a time. Values are the same
either way (float32 bits are written and read unchanged).
"""
import os
import shutil
import tempfile
from typing import List, Optional, Sequence, Tuple, Union  # noqa: F401 (type comments)

import numpy as np
import torch

Entry = Tuple[torch.Tensor, ...]


def nbytes(entry: Sequence[torch.Tensor]) -> int:
    """Bytes of the tensors' elements."""
    return sum(int(t.numel()) * t.element_size() for t in entry)


class BatchStore:
    """Append-only tensor tuples: in memory while ``budget`` bytes allow, then in files.

    Args:
        budget: bytes this store may hold in memory (>= 0).
        folder: where the spill folder is made (a new private temporary folder inside it);
            None: the system's temporary folder.

    Attributes:
        in_memory, on_disk: bytes held in each place.
    """

    def __init__(self, budget: int, folder: Optional[str] = None) -> None:
        self.budget = int(budget)
        self._parent = folder
        self._dir = None  # type: Optional[str]
        self._items = []  # type: List[Union[Entry, List[str]]]
        self.in_memory = 0
        self.on_disk = 0

    def __len__(self) -> int:
        return len(self._items)

    def append(self, entry: Sequence[torch.Tensor]) -> None:
        """Keep ``entry`` (detached contiguous copies are taken; the caller's tensors are not kept)."""
        size = nbytes(entry)
        if self.in_memory + size <= self.budget:
            self._items.append(tuple(t.detach().clone().contiguous() for t in entry))
            self.in_memory += size
            return
        if self._dir is None:
            if self._parent is not None:
                os.makedirs(self._parent, exist_ok=True)
            self._dir = tempfile.mkdtemp(prefix="pipeline-finetune-", dir=self._parent)
        paths = []
        for k, t in enumerate(entry):
            path = os.path.join(self._dir, "%d_%d.npy" % (len(self._items), k))
            np.save(path, t.detach().contiguous().numpy(), allow_pickle=False)
            paths.append(path)
        self._items.append(paths)
        self.on_disk += size

    def __getitem__(self, i: int) -> Entry:
        """Entry ``i`` (a tuple of tensors; one read from disk when spilled). Do not modify it."""
        item = self._items[i]
        if isinstance(item, tuple):
            return item
        return tuple(torch.from_numpy(np.load(p, allow_pickle=False)) for p in item)

    def replace(self, i: int, entry: Sequence[torch.Tensor]) -> None:
        """Overwrite entry ``i`` with tensors of the same sizes."""
        item = self._items[i]
        if isinstance(item, tuple):
            self._items[i] = tuple(t.detach().clone().contiguous() for t in entry)
            return
        for p, t in zip(item, entry):
            np.save(p, t.detach().contiguous().numpy(), allow_pickle=False)

    def close(self) -> None:
        """Drop every entry and remove the spill folder."""
        self._items = []
        self.in_memory = self.on_disk = 0
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
