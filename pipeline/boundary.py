"""The two boundaries where the pipeline copies on purpose: the quantizer boundary and the compile boundary.

Quantizer boundary (``QuantizerBoundary``): one pass from any strided view (torch views from the
stages, numpy arrays with negative strides, read-only and memory-mapped arrays, zero-stride expanded
channels) into a fresh, pipeline-owned, contiguous buffer of the target dtype and layout, with the
per-channel ``(x - mean) / std`` and the deferred channel order fused into that pass. It always
writes a new buffer, even when the input is already contiguous float32 NCHW, because the real
quantizer rounds its input tensor in place (docs/quantizer.md#input-rounded-in-place: ``quant_model(x)`` leaves fake-quantized
values in the caller's buffer, and ``.contiguous()`` returns the same tensor when nothing needs
reordering).

Speed: the pass runs in compiled code (``pipeline/native.py`` builds ``boundary_kernel.c`` at first
use and caches it): one read of the source and one write of the output per element, the NHWC -> NCHW
transpose included, row by row (a source row stays in L1 while every channel is read from it; uint8
RGB rows are split into float32 planes with AVX512-VBMI byte permutes when the CPU has them), one
call per batch. Without a compiler (or with ``VITIS_PIPELINE_NO_KERNEL=1``, or for float16/bfloat16
input) the same arithmetic runs as torch ops, the same bits, in tiles of about half the L2 cache of
output (read from the machine, ``tile_bytes()``), so that the subtract and divide run on data still
in cache. Both write into buffers the boundary owns and reuses, which avoids the page faults of a
fresh allocation. The checks and the kernel's arguments are worked out once per input geometry
(dtype, shape, strides; for a tensor also device, layout and negative bit). A buffer is reused only when
nothing handed out still refers to it: the pool keeps a weak reference to the numpy array object
whose memory each handed-out tensor's storage holds alive (``torch.from_numpy`` keeps a reference to
that array until the storage dies), so any tensor, view or ``.numpy()`` array derived from an output
keeps its buffer out of the pool. Detected, never assumed.

Compile boundary (``compile_example``, ``contiguous_parameters``): the example input handed to
export and compile is batch 1, owned and contiguous NCHW, copied from real preprocessed data
(docs/quantizer.md#export-needs-batch-1; public case P04); every parameter and buffer handed to an
exporter is contiguous. Both are recorded in the ledger as run-level rows (``batch`` None).
"""
import copy
import ctypes
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import native
from .cpu import tile_bytes
from .errors import ConfigError, DataError, PipelineError
from .config.specs import MEMORY_LAYOUTS, check_mean_std
from .tensors import Ledger, as_torch_view

BLOCK_BYTES = tile_bytes()
_OUT_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
_IN_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64)
# dtype -> name of the compiled kernel's element type (float16/bfloat16 inputs run the torch pass)
_KERNEL_TYPES = {torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
                 torch.float32: "f32", torch.float64: "f64"}
_NP_KERNEL_TYPES = {np.dtype(np.uint8): "u8", np.dtype(np.int8): "i8", np.dtype(np.int16): "i16",
                    np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.float32): "f32",
                    np.dtype(np.float64): "f64"}
_NP_IN_DTYPES = frozenset(list(_NP_KERNEL_TYPES) + [np.dtype(np.float16)])  # numpy has no bfloat16
_DTYPE_NAMES = [str(d).replace("torch.", "") for d in _IN_DTYPES]
_IN_DTYPE_NAMES = ", ".join(_DTYPE_NAMES[:-1]) + " or " + _DTYPE_NAMES[-1]  # for the errors
# a refused dtype -> the accepted one that holds its values exactly (uint64: those below 2**63)
_EXACT_CASTS = {"uint16": "int32", "uint32": "int64", "uint64": "int64", "bool": "uint8"}
KERNELS = ("auto", "torch")


def aligned_empty(shape: Tuple[int, ...], np_dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous numpy array of ``shape`` and ``np_dtype`` starting on a 64-byte
    boundary (a cache line), a view of a slightly larger owned buffer: numpy's own large arrays start
    16 bytes into a page, so each 64-byte vector store would straddle two lines (measured: the 8x224
    uint8 pass about 3% slower). The boundary's pool buffers; also the benchmark's output buffers."""
    dtype = np.dtype(np_dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class _BufferPool:
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


class QuantizerBoundary:
    """The one owned copy per batch: strided view in, ``(x - mean) / std`` out, fresh and contiguous.

    Args:
        mean, std: per output channel, in the units of the source pixels (0..255 for uint8). The
            result is ``(float(x) - mean[c]) / std[c]`` computed in ``dtype`` (float32: public case
            P06, a uint8 pixel 10 with mean 104 gives -94 before the division, never a wrap-around).
        channel_order: None, or ``order`` with output channel ``c`` read from input channel
            ``order[c]`` (``Compose.boundary_channel_order``: BGR<->RGB and other reorders).
        layout: ``"NCHW"`` (C-contiguous NCHW) or ``"channels_last"`` (NCHW shape, NHWC memory:
            ``is_contiguous(memory_format=torch.channels_last)``).
        dtype: torch.float32 (the quantizer's input) or torch.float64.
        block_bytes: output bytes per tile of the fused pass (default: half the L2 cache, ``tile_bytes()``).
        pool_size: how many owned buffers to keep for reuse.
        kernel: ``"auto"``: the compiled pass when it could be built here (``pipeline.native``), else
            the torch pass (the reason logged once); ``"torch"``: always the torch pass. Same bits.

    Raises:
        ConfigError: mean/std of different lengths, non-finite, std <= 0, a channel_order of the
            wrong length, an unknown layout, dtype or kernel.

    Attributes:
        compiled: True when this boundary runs the compiled pass (for the dtypes it covers).
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], channel_order: Optional[Sequence[int]] = None,
                 layout: str = "NCHW", dtype: torch.dtype = torch.float32, block_bytes: int = BLOCK_BYTES,
                 pool_size: int = 4, kernel: str = "auto") -> None:
        mean, std = check_mean_std(mean, std)
        if layout not in MEMORY_LAYOUTS:
            raise ConfigError("preprocess.layout: expected one of %s, got %r" % (", ".join(MEMORY_LAYOUTS), layout))
        if dtype not in _OUT_DTYPES:
            raise ConfigError("boundary dtype must be torch.float32 (the quantizer's input) or torch.float64, got %s"
                              % dtype)
        if channel_order is not None:
            channel_order = [int(c) for c in channel_order]
            if len(channel_order) != len(mean) or min(channel_order) < 0:
                raise ConfigError("channel order %s must name one input channel (>= 0) for each of the %d channels "
                                  "of mean/std" % (channel_order, len(mean)))
        if kernel not in KERNELS:
            raise ConfigError("boundary kernel: expected one of %s, got %r" % (", ".join(KERNELS), kernel))
        if int(block_bytes) < 1:
            raise ConfigError("block_bytes must be >= 1, got %r" % (block_bytes,))
        self.mean, self.std, self.channel_order = mean, std, channel_order
        self.layout, self.dtype, self.block_bytes = layout, dtype, int(block_bytes)
        self.channels = len(mean)
        self._np_dtype = _OUT_DTYPES[dtype]
        self._nchw = layout == "NCHW"
        self._mean = torch.tensor(mean, dtype=dtype).view(1, -1, 1, 1)
        self._std = torch.tensor(std, dtype=dtype).view(1, -1, 1, 1)
        self._pool = _BufferPool(pool_size)
        self._kernel = native.boundary_kernel() if kernel == "auto" else None
        self.compiled = self._kernel is not None
        self._mean_np = self._mean.numpy().reshape(-1).copy()
        self._std_np = self._std.numpy().reshape(-1).copy()
        self._mean_ptr, self._std_ptr = self._mean_np.ctypes.data, self._std_np.ctypes.data
        self._rows = {}  # type: Dict[int, np.ndarray]
        self._plans = {}  # type: Dict[Any, Tuple[Any, ...]]

    def output_shape(self, shape: Sequence[int]) -> Tuple[int, ...]:
        """``(N, C, H, W)`` produced from an NCHW input of ``shape``; DataError when it does not fit (not
        4-D, an empty dimension, a channel count mean/std or channel_order do not fit)."""
        shape = tuple(int(n) for n in shape)
        if len(shape) != 4:
            raise DataError("the quantizer boundary expects a non-empty 4-D NCHW batch, got shape %s; add a "
                            "{type: layout, src: NHWC, dst: NCHW} stage for NHWC sources" % (shape,))
        if min(shape) < 1:
            empty = ", ".join("%s=0" % axis for axis, k in zip("NCHW", shape) if k < 1)
            raise DataError("the quantizer boundary expects a non-empty NCHW batch, every dimension >= 1, got shape "
                            "%s (%s); skip empty batches, and check that crop/resize stages leave at least one "
                            "pixel and the source has channels" % (shape, empty))
        c_in = shape[1]
        if self.channel_order is None and c_in != self.channels:
            raise DataError("the batch has %d channels on axis 1 (shape %s) but mean/std give %d; an NHWC batch "
                            "needs a layout stage, otherwise give one mean/std value per channel"
                            % (c_in, shape, self.channels))
        if self.channel_order is not None and max(self.channel_order) >= c_in:
            raise DataError("channel order %s reads channels the batch does not have (%d channels, shape %s)"
                            % (self.channel_order, c_in, shape))
        return (shape[0], self.channels, shape[2], shape[3])

    def __call__(self, view: Union[torch.Tensor, np.ndarray], ledger: Optional[Ledger] = None,
                 batch_index: int = 0, rows: Optional[Sequence[int]] = None) -> torch.Tensor:
        """Write ``(view - mean) / std`` (channels gathered by ``channel_order``) into an owned buffer.

        Args:
            view: NCHW batch, a CPU strided torch tensor or numpy array with any strides (negative,
                zero, read-only, memory-mapped), of dtype uint8, int8, int16, int32, int64, float16,
                bfloat16 (torch only), float32 or float64, every dimension >= 1. Never written. A tensor
                with the negative bit (``x.conj().imag``) is read through the torch pass (the kernel
                reads raw memory); a tensor that requires grad is read as data (no graph).
            ledger: when given, one row ``quantizer_boundary`` (bytes allocated, fresh or recycled).
            batch_index: the batch number recorded in the ledger.
            rows: None (every sample of ``view``), or the sample indices to gather, in output order:
                the batch of a shuffled split is a set of rows of the whole source view, read here in
                the same single pass (runs of consecutive rows are read as slices), never copied
                before. DataError for an index outside ``view`` or an empty selection.

        Returns:
            A new tensor ``(N, C, H, W)`` of ``dtype``, contiguous in ``layout``, owned by the caller
            from now on (never the input's storage; the pool reuses it only after every reference
            to it is gone); a plain tensor from every pass: ``requires_grad`` False, no autograd graph.

        Raises:
            DataError: not a numpy array or torch tensor; a sparse or other non-strided tensor (says
                ``.to_dense()``); a tensor off the CPU; a dtype outside the list above (uint16/32/64,
                bool, ...: says which cast keeps the values); not 4-D, an empty dimension, a channel
                count mean/std or channel_order do not fit; ``rows`` not a 1-D sequence of integers
                (a boolean mask: says ``np.flatnonzero``), empty, or out of range.
            PipelineError: the pooled output buffer overlaps the input's bytes (a bug); raised before
                anything is written, so the input is unchanged.
        """
        np_in = isinstance(view, np.ndarray)
        if np_in:
            key = (True, view.dtype, view.shape, view.strides)  # type: Tuple[Any, ...]
        else:  # (a tensor off the CPU, not strided or with the negative bit gets its own plan or none: _plan)
            try:
                key = (False, view.dtype, view.shape, view.stride(), view.is_cpu, view.layout, view.is_neg())
            except (AttributeError, TypeError, RuntimeError):  # not a tensor, or a layout without strides
                self._plan(view)  # raises the DataError that says which
                raise
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(view)
            if len(self._plans) >= 16:
                self._plans.clear()
            self._plans[key] = plan
        (n, c, h, w), fn, geom, order, mean_rows, use_numpy, note, lo, hi, sample_bytes = plan
        pieces = None  # type: Optional[List[Tuple[int, int, int]]]
        if rows is not None:  # (source row, output row, count) runs of the rows to gather
            pieces = _row_runs(rows, n)
            n = sum(count for _, _, count in pieces)
            note += ", %d rows gathered" % n
        out, fresh = self._pool.take((n, c, h, w) if self._nchw else (n, h, w, c), self._np_dtype)
        out_ptr = out.data_ptr()  # a permute below keeps it
        ptr = view.__array_interface__["data"][0] if np_in else view.data_ptr()
        nbytes = n * sample_bytes
        # Before anything is written: the bytes the input's elements span, [ptr + lo, ptr + hi), against
        # the output buffer's (the bounds test of np.may_share_memory, for numpy and torch inputs alike).
        if ptr + lo < out_ptr + nbytes and out_ptr < ptr + hi:
            raise PipelineError("the quantizer boundary's output shares memory with its input; this is a bug, "
                                "please report it")
        if not self._nchw:
            out = out.permute(0, 3, 1, 2)
        if fn is not None:
            if pieces is None:
                fn(ptr, geom, order, self._mean_ptr, self._std_ptr, mean_rows, out_ptr)
            else:  # one call per run: the source and output pointers moved to its first sample
                g, in_size, out_size = list(geom), view.itemsize if np_in else view.element_size(), out.element_size()
                for start, dst, count in pieces:
                    g[1] = count
                    fn(ptr + start * g[6] * in_size, (ctypes.c_int64 * 14)(*g), order, self._mean_ptr, self._std_ptr,
                       mean_rows, out_ptr + dst * g[10] * out_size)
        elif use_numpy:
            for start, dst, count in pieces or [(0, 0, n)]:
                self._fill_numpy(view[start:start + count], out.numpy()[dst:dst + count], self.channel_order)
        else:
            # detached: copy_ from an input that requires grad would attach the output to its graph
            src = as_torch_view(view)[0].detach()
            for start, dst, count in pieces or [(0, 0, n)]:
                self._fill_torch(src[start:start + count], out[dst:dst + count], order)
        if ledger is not None:
            ledger.add("quantizer_boundary", False, nbytes, None, None, batch=batch_index,
                       bytes_fresh=nbytes if fresh else 0, note=note)
        return out

    def _plan(self, view: Union[torch.Tensor, np.ndarray]) -> Tuple[Any, ...]:
        """Checks and the pass's arguments for one input geometry (cached by ``__call__``):
        ``((n, c, h, w), compiled function or None, geometry, order, rows, use_numpy, ledger note,
        lo, hi, output bytes per sample)``, the input's elements spanning bytes ``[lo, hi)`` from its
        data pointer."""
        if isinstance(view, np.ndarray):
            if view.dtype not in _NP_IN_DTYPES:
                raise _dtype_error(view.dtype, True)
        elif not isinstance(view, torch.Tensor):
            raise DataError("the quantizer boundary expects a numpy array or torch tensor (an NCHW batch), got %s; "
                            "convert it first, e.g. np.asarray(x, dtype=np.float32)" % type(view).__name__)
        elif view.layout != torch.strided:
            raise DataError("the quantizer boundary reads dense (strided) tensors, got a tensor with layout %s; call "
                            ".to_dense() on it first" % view.layout)
        src, flips = as_torch_view(view)
        if src.device.type != "cpu":
            raise DataError("the quantizer boundary runs on the CPU; got a tensor on %s (call .cpu())" % src.device)
        if src.dtype not in _IN_DTYPES:
            raise _dtype_error(src.dtype, False)
        n, c, h, w = self.output_shape(src.shape)
        note = "%s %s%s" % (self.layout, str(self.dtype).replace("torch.", ""),
                            "" if self.channel_order is None else ", channel order %s" % self.channel_order)
        lo, hi = _byte_extent(view)
        sample_bytes = c * h * w * np.dtype(self._np_dtype).itemsize
        fn = self._kernel_fn(view, src) if self._kernel is not None else None
        if fn is not None:
            # A numpy input is read through its own strides (negative ones included, so flips need
            # no channel-order rewrite); a torch input through its element strides.
            strides = [st // view.itemsize for st in view.strides] if isinstance(view, np.ndarray) else list(src.stride())
            out_strides = [c * h * w, h * w, w, 1] if self.layout == "NCHW" else [h * w * c, 1, w * c, c]
            rows, row = h, w
            if self.layout == "NCHW" and strides[2] == w * strides[3]:
                rows, row = 1, h * w  # source rows follow each other like the output's: one long row
            geom = (ctypes.c_int64 * 14)(0, n, c, 0, rows, row, *(strides + out_strides))
            index = list(self.channel_order if self.channel_order is not None else range(c))
            mean_rows = self._rows_ptr(w) if self.layout != "NCHW" and index == list(range(c)) else None
            return (n, c, h, w), fn, geom, (ctypes.c_int64 * c)(*index), mean_rows, False, note, lo, hi, sample_bytes
        order = self.channel_order
        use_numpy = bool(set(flips) - {1})
        if 1 in flips and not use_numpy:  # a channel flip in numpy: read channel C-1-l for logical channel l
            order = [src.shape[1] - 1 - l for l in (order if order is not None else range(c))]
        return (n, c, h, w), None, None, order, None, use_numpy, note, lo, hi, sample_bytes

    def _rows_ptr(self, w: int) -> int:
        """The address of mean then std each repeated ``w`` times (2*w*c values, kept alive here):
        the kernel's one-loop row for a channels_last output read in the identity order."""
        rows = self._rows.get(w)
        if rows is None:
            rows = self._rows[w] = np.concatenate([np.tile(self._mean_np, w), np.tile(self._std_np, w)])
        return rows.ctypes.data

    def _tiles(self, shape: Tuple[int, int, int, int]) -> Iterator[Tuple[slice, slice]]:
        """(samples, rows) tiles of about ``block_bytes`` of output each."""
        n, c, h, w = shape
        itemsize = np.dtype(self._np_dtype).itemsize
        sample = max(1, c * h * w * itemsize)
        if sample <= self.block_bytes:
            k = self.block_bytes // sample
            for i in range(0, n, k):
                yield slice(i, i + k), slice(None)
            return
        rows = max(1, self.block_bytes // max(1, c * w * itemsize))
        for i in range(n):
            for r in range(0, h, rows):
                yield slice(i, i + 1), slice(r, r + rows)

    def _kernel_fn(self, view: Union[torch.Tensor, np.ndarray], src: torch.Tensor) -> Any:
        """The compiled function for this input, or None: float16/bfloat16, and a tensor with the
        negative bit (``x.conj().imag``: its memory holds the values negated; the kernel reads raw
        memory, the torch pass's ``copy_`` resolves the bit). (The conjugate bit exists only on complex
        tensors, which the boundary refuses.)"""
        if isinstance(view, np.ndarray):
            name = _NP_KERNEL_TYPES.get(view.dtype)
        else:
            name = None if src.is_neg() else _KERNEL_TYPES.get(src.dtype)
        return None if name is None else self._kernel.fn(name, "f32" if self.dtype == torch.float32 else "f64")

    def _fill_torch(self, src: torch.Tensor, out: torch.Tensor, order: Optional[List[int]]) -> None:
        # Per tile: cast-copy (copy_ casts inside its loop; a mixed-dtype torch.sub(src, mean, out=...)
        # would first cast src into a hidden temporary on the CPU), then subtract and divide in place
        # while the tile is in cache, always in the output dtype. The normalization runs along the
        # longest contiguous run of memory: H*W per channel for NCHW; for channels_last each row of
        # W*C values against mean/std repeated W times (the same float32 values, the same results).
        n, c, h, w = out.shape
        if self.layout == "NCHW":
            mean, std = self._mean, self._std
        else:
            mean, std = self._mean.reshape(-1).repeat(w), self._std.reshape(-1).repeat(w)
        for samples, rows in self._tiles((n, c, h, w)):
            s_tile, d_tile = src[samples, :, rows], out[samples, :, rows]
            if order is None:
                d_tile.copy_(s_tile)
            else:
                for o, i in enumerate(order):
                    d_tile[:, o].copy_(s_tile[:, i])
            norm = d_tile if self.layout == "NCHW" else d_tile.permute(0, 2, 3, 1).view(-1, w * c)
            norm.sub_(mean)
            norm.div_(std)

    def _fill_numpy(self, src: np.ndarray, out: np.ndarray, order: Optional[List[int]]) -> None:
        """The same pass with numpy ufuncs, which read negative strides natively (numpy inputs
        flipped on an axis other than the channel axis)."""
        mean = self._mean.numpy().reshape(-1)
        std = self._std.numpy().reshape(-1)
        for samples, rows in self._tiles(out.shape):
            for o in range(self.channels):
                i = o if order is None else order[o]
                d = out[samples, o, rows]
                np.subtract(src[samples, i, rows], mean[o], out=d, dtype=self._np_dtype)
                np.divide(d, std[o], out=d)


def _byte_extent(view: Union[torch.Tensor, np.ndarray]) -> Tuple[int, int]:
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


def _row_runs(rows: Sequence[int], n: int) -> List[Tuple[int, int, int]]:
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


def _dtype_error(dtype: Any, numpy_input: bool) -> DataError:
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
