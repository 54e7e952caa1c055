"""What the quantizer boundary reads: the input dtypes (and the compiled kernel's names for them), the
error for a refused dtype, the rows a gathered batch reads, the bytes an input spans.
"""
from typing import Any, List, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import DataError

IN_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
             torch.float32, torch.float64)
# dtype -> name of the compiled kernel's element type (float16/bfloat16 inputs run the torch pass)
KERNEL_TYPES = {torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
                torch.float32: "f32", torch.float64: "f64"}
NP_KERNEL_TYPES = {np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
                   np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.float32): "f32",
                   np.dtype(np.float64): "f64"}
NP_IN_DTYPES = frozenset(list(NP_KERNEL_TYPES) + [np.dtype(np.float16)])  # numpy has no bfloat16
_DTYPE_NAMES = [str(d).replace("torch.", "") for d in IN_DTYPES]
_IN_DTYPE_NAMES = ", ".join(_DTYPE_NAMES[:-1]) + " or " + _DTYPE_NAMES[-1]  # for the errors
# a refused dtype -> the accepted one that holds its values exactly (uint64: those below 2**63)
_EXACT_CASTS = {"uint16": "int32", "uint32": "int64", "uint64": "int64", "bool": "uint8"}


def byte_range(view: Union[torch.Tensor, np.ndarray]) -> Tuple[int, int]:
    """``(lo, hi)``: the bytes ``view``'s elements occupy are ``[data pointer + lo, data pointer + hi)``
    (strides may be negative or zero; numpy's ``byte_bounds`` rule; ``view`` has at least one element)."""
    if isinstance(view, np.ndarray):
        strides, itemsize = list(view.strides), view.itemsize
    else:
        itemsize = view.element_size()
        strides = [st * itemsize for st in view.stride()]
    lo = sum(st * (k - 1) for st, k in zip(strides, view.shape) if st < 0)
    hi = sum(st * (k - 1) for st, k in zip(strides, view.shape) if st > 0) + itemsize
    return lo, hi


def row_runs(rows: Sequence[int], n: int) -> List[Tuple[int, int, int]]:
    """``rows`` as runs of consecutive source rows: ``[(source start, output start, length), ...]``.

    ``rows``: a 1-D sequence of integer indices, a numpy array of an integer dtype or a list/tuple/range
    of Python ints. DataError for anything else (a boolean mask, floats, strings, nested lists), for an
    empty selection and for an index outside ``range(n)``."""
    try:
        idx = rows if isinstance(rows, np.ndarray) else np.asarray(rows)
    except (ValueError, TypeError):  # nested lists of different lengths
        idx = np.asarray(rows, dtype=object)
    has_bool = idx.dtype == np.bool_ or (idx.ndim == 1 and not isinstance(rows, np.ndarray)
                                         and any(isinstance(r, (bool, np.bool_)) for r in rows))
    if (idx.ndim != 1 or idx.dtype.kind not in "iu" or has_bool) and not (idx.ndim == 1 and idx.size == 0):
        got = "%s of shape %s, dtype %s" % (type(rows).__name__, idx.shape, "bool" if has_bool else idx.dtype)
        raise DataError("the quantizer boundary's rows= takes a 1-D sequence of integer sample indices (a numpy "
                        "integer array or Python ints), got a %s; %s" % (
                            got, "for a boolean mask pass np.flatnonzero(mask)" if has_bool else
                            "pass integer indices (np.asarray(rows, dtype=np.int64) once they are whole numbers)"))
    if idx.size == 0 or int(idx.min()) < 0 or int(idx.max()) >= n:
        raise DataError("the quantizer boundary gathers rows 0..%d of the view, got %s"
                        % (n - 1, "no rows" if idx.size == 0 else "rows %d..%d" % (idx.min(), idx.max())))
    idx = idx.astype(np.int64, copy=False)
    breaks = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [idx.size]))
    return [(int(idx[a]), int(a), int(b - a)) for a, b in zip(starts, ends)]


def dtype_error(dtype: Any, numpy_input: bool) -> DataError:
    """The DataError for an input dtype the boundary does not read: the accepted ones, and a cast
    that keeps the values (exactly, for the unsigned and bool dtypes)."""
    name = str(dtype).replace("torch.", "")
    cast = ("a.astype(np.%s)" if numpy_input else "t.to(torch.%s)") % _EXACT_CASTS.get(name, "float32")
    if name in _EXACT_CASTS:
        todo = "%s keeps every %s value exactly%s" % (cast, name, " below 2**63" if name == "uint64" else "")
    else:
        todo = "e.g. %s" % cast
    return DataError("the quantizer boundary reads integer or float pixels of dtype %s; got a %s of dtype %s. "
                     "Convert it first: %s" % (_IN_DTYPE_NAMES, "numpy array" if numpy_input else "torch tensor",
                                               name, todo))
