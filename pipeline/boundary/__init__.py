"""The boundaries where the pipeline copies on purpose, and the compiled kernel of the first one.

- ``quantizer.py``: ``QuantizerBoundary``, the one owned, contiguous copy per batch with
  ``(x - mean) / std`` and the channel order fused into it; ``spec()`` says what it applies (the
  deploy bundle's preprocessing is built from it).
- ``inputs.py``: the input dtypes it reads, the errors for the others, the rows a batch gathers.
- ``pool.py``: its owned, cache-line aligned output buffers (``aligned_empty``, ``BufferPool``).
- ``native.py`` and ``boundary_kernel.c``: the compiled pass, built at first use, loaded with ctypes.
- ``compile.py``: the compile boundary (``compile_example``, ``contiguous_parameters``).

Measurements: docs/performance.md.
"""
from .compile import compile_example, contiguous_parameters
from .pool import BufferPool, aligned_empty
from .quantizer import BLOCK_BYTES, KERNELS, QuantizerBoundary

__all__ = ["BLOCK_BYTES", "KERNELS", "BufferPool", "QuantizerBoundary", "aligned_empty", "compile_example",
           "contiguous_parameters"]
