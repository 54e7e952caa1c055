"""The compiled quantizer-boundary kernel: built once per machine from ``boundary_kernel.c``, loaded with ctypes.

A plain C99 file with no dependency, built with the system C compiler and called through ctypes,
the same way on Python 3.8 / torch 1.13 (the Vitis AI image) and Python 3.11 / torch 2.x
(why not cpp_extension or numba: docs/performance.md#why-ctypes-and-a-plain-c-file).

The shared library is cached under ``$VITIS_PIPELINE_CACHE`` (default ``$XDG_CACHE_HOME`` or
``~/.cache``, then ``vitis-pipeline``), named by a hash of the source, the flags, the compiler's path
and modification time and the platform, and written under a temporary name then renamed (safe with
concurrent first uses). When there is no compiler, the build fails, or ``VITIS_PIPELINE_NO_KERNEL=1``
is set, ``boundary_kernel()`` returns None, the reason is logged once and kept in ``kernel_status()``,
and the boundary runs its pure-torch pass, which gives the same bits (tests compare both).
"""
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, Optional

LOG = logging.getLogger(__name__)
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boundary_kernel.c")
# No -ffast-math and no FMA contraction: the same IEEE cast, subtract and divide as torch.
FLAGS = ("-O3", "-std=c99", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared")
DISABLE_ENV = "VITIS_PIPELINE_NO_KERNEL"
CACHE_ENV = "VITIS_PIPELINE_CACHE"
ABI_VERSION = 4
BUILD_TIMEOUT_S = 120
# (input dtype name, output dtype name) -> exported symbol
SYMBOLS = {(i, o): "vp_%s_%s" % (i, o) for i in ("u8", "i8", "i16", "i32", "i64", "f32", "f64") for o in ("f32", "f64")}

_state = {"loaded": False, "kernel": None, "reason": None}  # type: Dict[str, Any]


def cache_dir() -> str:
    """The folder that holds the built library (created on first build)."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "vitis-pipeline")
    return root


def _compiler() -> Optional[str]:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            path = shutil.which(name)
            if path:
                return path
    return None


def _library_path(compiler: str) -> str:
    h = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        h.update(f.read())
    stat = os.stat(compiler)
    h.update(repr((FLAGS, os.path.realpath(compiler), stat.st_mtime_ns, stat.st_size, sys.platform,
                   platform.machine(), ABI_VERSION)).encode())
    return os.path.join(cache_dir(), "boundary_kernel-%s.so" % h.hexdigest()[:20])


def build(compiler: str, target: str) -> None:
    """Compile ``SOURCE`` into ``target`` (temporary name, then renamed). Raises OSError or
    subprocess errors (CalledProcessError with the compiler's stderr, TimeoutExpired)."""
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=folder)
    os.close(fd)
    try:
        subprocess.run([compiler] + list(FLAGS) + ["-o", tmp, SOURCE], check=True, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=BUILD_TIMEOUT_S)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class Kernel:
    """The loaded library: ``fn(in_name, out_name)`` -> the ctypes function, or None when that pair is
    not compiled (float16/bfloat16 inputs). Arguments of every function: source pointer, int64
    geometry[14] (see ``boundary_kernel.c``), int64 order[c], mean[c], std[c], mean and std rows (or
    NULL), destination pointer. ``vbmi``: True when uint8 RGB -> float32 rows run the AVX512-VBMI
    byte-permute loop (this CPU has it and the build includes it), False for the C loop."""

    def __init__(self, path: str) -> None:
        self.path = path
        lib = ctypes.CDLL(path)
        if lib.vp_abi_version() != ABI_VERSION:
            raise OSError("%s has ABI version %d, expected %d" % (path, lib.vp_abi_version(), ABI_VERSION))
        self._fns = {}
        for key, symbol in SYMBOLS.items():
            fn = getattr(lib, symbol)
            fn.argtypes = [ctypes.c_void_p] * 7
            fn.restype = None
            self._fns[key] = fn
        self.vbmi = bool(lib.vp_vbmi_active())
        self._lib = lib

    def fn(self, in_name: str, out_name: str) -> Any:
        return self._fns.get((in_name, out_name))


def _load() -> Kernel:
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        raise RuntimeError("disabled by %s=%s" % (DISABLE_ENV, os.environ[DISABLE_ENV]))
    compiler = _compiler()
    if compiler is None:
        raise RuntimeError("no C compiler found (tried $CC, cc, gcc, clang)")
    path = _library_path(compiler)
    if not os.path.exists(path):
        try:
            build(compiler, path)
        except subprocess.CalledProcessError as exc:
            raise RuntimeError("%s failed (exit %d): %s" % (os.path.basename(compiler), exc.returncode,
                                                            exc.stderr.decode(errors="replace")[-400:].strip()))
        except (OSError, subprocess.SubprocessError) as exc:
            raise RuntimeError("building %s failed: %s" % (path, exc))
        LOG.debug("built the boundary kernel: %s", path)
    return Kernel(path)


def boundary_kernel() -> Optional[Kernel]:
    """The compiled kernel, built at the first call of the process (cached on disk), or None with
    the reason logged once (a warning) and kept in ``kernel_status()``."""
    if not _state["loaded"]:
        _state["loaded"] = True
        try:
            _state["kernel"] = _load()
        except (RuntimeError, OSError, AttributeError) as exc:
            _state["reason"] = str(exc)
            if os.environ.get(DISABLE_ENV, "") in ("", "0"):
                LOG.warning("quantizer boundary: compiled kernel unavailable (%s); using the pure-torch pass "
                            "(same results, slower)", exc)
    return _state["kernel"]


def kernel_status() -> Dict[str, Any]:
    """``{"compiled": bool, "path": str or None, "reason": why not, or None}`` (loads on first call)."""
    k = boundary_kernel()
    return {"compiled": k is not None, "path": k.path if k is not None else None, "reason": _state["reason"]}


def reset() -> None:
    """Forget the loaded kernel so that the next ``boundary_kernel()`` loads (or builds) again (tests)."""
    _state.update(loaded=False, kernel=None, reason=None)
