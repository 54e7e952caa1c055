"""The quantizer boundary (``QuantizerBoundary``): the one owned copy per batch.

One pass from any strided view (torch views from the stages, numpy arrays with negative strides,
read-only and memory-mapped arrays, zero-stride expanded channels) into a fresh, pipeline-owned,
contiguous buffer of the target dtype and layout, with the per-channel ``(x - mean) / std`` and the
deferred channel order fused into that pass. It always writes a new buffer, even when the input is
already contiguous float32 NCHW, because the real quantizer rounds its input tensor in place
(docs/quantizer.md#input-rounded-in-place: ``quant_model(x)`` leaves fake-quantized values in the
caller's buffer, and ``.contiguous()`` returns the same tensor when nothing needs reordering).

The pass runs in compiled code (``pipeline/boundary/native.py`` builds ``boundary_kernel.c`` at
first use and caches it): one read of the source and one write of the output per element, the
NHWC -> NCHW transpose included, row by row, one call per batch. Without a compiler (or with
``VITIS_PIPELINE_NO_KERNEL=1``, or for float16/bfloat16 input) the same arithmetic runs as torch
ops, the same bits, in tiles of about half the L2 cache of output (``tile_bytes()``), so that the
subtract and divide run on data still in cache. Both write into buffers the boundary owns and
reuses (``pool.py``). The checks and the kernel's arguments are worked out once per input geometry
(dtype, shape, strides; for a tensor also device, layout and negative bit). Measurements:
docs/performance.md#the-quantizer-boundary.
"""
import ctypes
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import native
from ..cpu import tile_bytes
from ..errors import ConfigError, DataError, PipelineError
from ..ledger import Ledger
from ..specs import MEMORY_LAYOUTS, check_mean_std
from ..tensors import as_torch_view
from .inputs import IN_DTYPES, KERNEL_TYPES, NP_IN_DTYPES, NP_KERNEL_TYPES, byte_range, dtype_error, row_runs
from .pool import BufferPool

BLOCK_BYTES = tile_bytes()
_OUT_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
KERNELS = ("auto", "torch")


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
        kernel: ``"auto"``: the compiled pass when it could be built here (``pipeline.boundary.native``), else
            the torch pass (the reason logged once); ``"torch"``: always the torch pass. Same bits.

    Raises:
        ConfigError: mean/std of different lengths, non-finite, std <= 0 (``specs.check_mean_std``, the
            one check the config runs on ``preprocess.mean/std`` too: the same message), a
            channel_order of the wrong length, an unknown layout, dtype or kernel.

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
        self._pool = BufferPool(pool_size)
        self._kernel = native.boundary_kernel() if kernel == "auto" else None
        self.compiled = self._kernel is not None
        self._mean_np = self._mean.numpy().reshape(-1).copy()
        self._std_np = self._std.numpy().reshape(-1).copy()
        self._mean_ptr, self._std_ptr = self._mean_np.ctypes.data, self._std_np.ctypes.data
        self._rows = {}  # type: Dict[int, np.ndarray]
        self._plans = {}  # type: Dict[Any, Tuple[Any, ...]]

    def spec(self) -> Dict[str, Any]:
        """What this boundary applies to every batch, as plain JSON values (new lists): the input of the
        deploy bundle's preprocessing spec (``pipeline.deploy.preprocess_spec``).

        Returns:
            ``{"mean": [float], "std": [float]`` (one per output channel, in source pixel units;
            ``(x - mean) / std``, checked by ``specs.check_mean_std``), ``"channel_order"`` (the source
            channel read for each output channel, or None for the source's order), ``"layout"``
            (``"NCHW"`` or ``"channels_last"``: the memory layout of the output), ``"dtype"``
            (``"float32"`` or ``"float64"``: the output's element type)``}``.
        """
        return {"mean": list(self.mean), "std": list(self.std),
                "channel_order": None if self.channel_order is None else list(self.channel_order),
                "layout": self.layout, "dtype": str(self.dtype).replace("torch.", "")}

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
            pieces = row_runs(rows, n)
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
            if view.dtype not in NP_IN_DTYPES:
                raise dtype_error(view.dtype, True)
        elif not isinstance(view, torch.Tensor):
            raise DataError("the quantizer boundary expects a numpy array or torch tensor (an NCHW batch), got %s; "
                            "convert it first, e.g. np.asarray(x, dtype=np.float32)" % type(view).__name__)
        elif view.layout != torch.strided:
            raise DataError("the quantizer boundary reads dense (strided) tensors, got a tensor with layout %s; call "
                            ".to_dense() on it first" % view.layout)
        src, flips = as_torch_view(view)
        if src.device.type != "cpu":
            raise DataError("the quantizer boundary runs on the CPU; got a tensor on %s (call .cpu())" % src.device)
        if src.dtype not in IN_DTYPES:
            raise dtype_error(src.dtype, False)
        n, c, h, w = self.output_shape(src.shape)
        note = "%s %s%s" % (self.layout, str(self.dtype).replace("torch.", ""),
                            "" if self.channel_order is None else ", channel order %s" % self.channel_order)
        lo, hi = byte_range(view)
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
            name = NP_KERNEL_TYPES.get(view.dtype)
        else:
            name = None if src.is_neg() else KERNEL_TYPES.get(src.dtype)
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
