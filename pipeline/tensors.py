"""Storage helpers and the memory ledger: the facts behind "views only, one owned copy per batch".

Several tensors can share one storage; ``view``/``permute``/slicing change only shape and strides,
an in-place op reaches every tensor on the storage, ``contiguous()`` copies only when the strides are
not C-ordered and ``clone()`` always copies. The helpers here make those facts checkable:

- ``storage_ptr`` / ``storage_nbytes``: the storage under a tensor, on torch 1.13
  (``Tensor.storage()``) and torch 2.x (``Tensor.untyped_storage()``, no deprecation warning).
- ``shares_storage`` / ``is_view_of``: same storage, and lies inside it.
- ``as_torch_view``: a torch view of a numpy array with any strides (negative strides are folded
  into positive ones and reported as flipped axes), read-only and memory-mapped arrays included.
- ``fingerprint_array``: sha256 of an array's bytes in logical order, to prove
  the caller's data unchanged (public case P08).

The memory ledger that counts views and copies with these helpers is ``pipeline.ledger``.
"""
import hashlib
import warnings
from typing import Any, Tuple, Union

import numpy as np
import torch

from .errors import DataError

ArrayLike = Union[np.ndarray, torch.Tensor]

# numpy dtypes torch.from_numpy accepts on torch 1.13 and 2.x (uint16/32/64 only on recent torch).
_NUMPY_TO_TORCH = {
    np.dtype(np.bool_): torch.bool, np.dtype(np.uint8): torch.uint8, np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16, np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
}

_HASH_CHUNK_BYTES = 16 << 20


def _storage(t: torch.Tensor) -> Any:
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()  # torch 1.13: TypedStorage


def storage_ptr(t: torch.Tensor) -> int:
    """Address of the first byte of the storage under ``t`` (not of ``t``'s first element)."""
    return int(_storage(t).data_ptr())


def storage_nbytes(t: torch.Tensor) -> int:
    """Size in bytes of the whole storage under ``t`` (a view's storage is its base's)."""
    s = _storage(t)
    if hasattr(s, "nbytes"):
        return int(s.nbytes())
    return int(s.size()) * t.element_size()  # torch 1.13 TypedStorage


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` live on the same storage (so an in-place write to one can reach the
    other). Two zero-byte storages count as shared only when they are the same storage object."""
    pa, pb = storage_ptr(a), storage_ptr(b)
    if pa == 0 or pb == 0:
        return _storage_id(_storage(a)) == _storage_id(_storage(b))
    return pa == pb


def _storage_id(s: Any) -> int:
    """The C++ StorageImpl address behind a storage wrapper (torch 2: UntypedStorage; 1.13: TypedStorage)."""
    cdata = getattr(s, "_cdata", None)
    return int(cdata if cdata is not None else s._storage._cdata)


def byte_extent(t: torch.Tensor) -> Tuple[int, int]:
    """[first, last] byte address ``t`` can reach (non-negative strides; a torch tensor)."""
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    lo = t.data_ptr()
    return lo, lo + span * t.element_size() + t.element_size() - 1


def is_view_of(view: torch.Tensor, base: torch.Tensor) -> bool:
    """True when ``view`` shares ``base``'s storage and every element it can reach lies inside that
    storage: what a reshape/permute/slice of ``base`` returns, never a copy."""
    if not shares_storage(view, base):
        return False
    if view.numel() == 0:
        return True
    lo, hi = byte_extent(view)
    start = storage_ptr(base)
    return start <= lo and hi < start + storage_nbytes(base)


def data_ptr(x: ArrayLike) -> int:
    """Address of the first element of a torch tensor or numpy array."""
    if isinstance(x, torch.Tensor):
        return int(x.data_ptr())
    return int(x.__array_interface__["data"][0])


def shares_memory(a: ArrayLike, b: ArrayLike) -> bool:
    """``shares_storage`` for two tensors; for a numpy array on either side, whether their byte
    ranges may overlap (``np.may_share_memory`` on numpy views of both)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return shares_storage(a, b)
    na = a.detach().numpy() if isinstance(a, torch.Tensor) else a
    nb = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    return bool(np.may_share_memory(na, nb))


def as_torch_view(array: ArrayLike) -> Tuple[torch.Tensor, Tuple[int, ...]]:
    """A CPU torch tensor on the same memory as ``array``, and the axes it had to flip.

    torch tensors cannot have negative strides, so each axis of a numpy array with a negative
    stride (for example the channel axis of ``a[..., ::-1]``, a BGR->RGB flip) is reversed again in
    the view, which then has non-negative strides on the same bytes. The caller must apply the
    reported flips itself (the channel axis: as a channel order at the quantizer boundary).
    Only axes longer than 1 are reported. Read-only and memory-mapped arrays are accepted (the
    "not writable" warning of ``torch.from_numpy`` is silenced: the pipeline never writes a source;
    ``Compose`` checks it).

    Args:
        array: a numpy array (any strides, read-only or np.memmap) or a torch tensor (returned as is,
            with no flips).

    Returns:
        ``(tensor, flipped_axes)``: ``tensor`` is a view (no copy); ``flipped_axes`` a sorted tuple.

    Raises:
        DataError: a dtype torch cannot view (structured, object, big-endian, uint16 on old torch),
            or strides that are not multiples of the item size.
    """
    if isinstance(array, torch.Tensor):
        return array, ()
    if not isinstance(array, np.ndarray):
        raise DataError("expected a numpy array or a torch tensor, got %s" % type(array).__name__)
    flips = tuple(i for i, s in enumerate(array.strides) if s < 0)
    positive = array[tuple(slice(None, None, -1) if i in flips else slice(None) for i in range(array.ndim))]
    dtype = positive.dtype
    if dtype not in _NUMPY_TO_TORCH:
        raise DataError("cannot view a numpy array of dtype %s as a torch tensor; supported dtypes: %s. "
                        "Convert it first (e.g. a.astype(np.float32)), or store it in a supported dtype"
                        % (dtype, ", ".join(sorted(str(d) for d in _NUMPY_TO_TORCH))))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            tensor = torch.from_numpy(positive)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise DataError("cannot view the numpy array (shape %s, strides %s, dtype %s) as a torch tensor: %s"
                        % (array.shape, array.strides, dtype, exc))
    return tensor, tuple(i for i in flips if array.shape[i] > 1)


def fingerprint_array(array: ArrayLike) -> str:
    """sha256 (hex) of the array's element bytes in logical C order, whatever its strides.

    Equal for an array and its ``.copy()``; different after any element changes. Shape and dtype
    are not hashed (compare them separately). The bytes are read in chunks of about 16 MiB along
    axis 0, so a memory-mapped array is never loaded whole.
    """
    if isinstance(array, torch.Tensor):
        t = array.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        array = t.numpy()
    h = hashlib.sha256()
    if array.ndim == 0 or array.size == 0:
        h.update(np.ascontiguousarray(array).tobytes())
        return h.hexdigest()
    per_row = max(1, array.itemsize * array.size // max(1, array.shape[0]))
    step = max(1, _HASH_CHUNK_BYTES // per_row)
    for i in range(0, array.shape[0], step):
        h.update(np.ascontiguousarray(array[i:i + step]).tobytes())
    return h.hexdigest()
