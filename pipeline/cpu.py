"""What the CPU says about its caches: the tile size of the passes that walk large tensors in pieces
(the quantizer boundary's torch pass, ``fixpoint.fake_quant``); and how busy it is (``load_average``,
printed by the benchmark scripts next to their figures); how much memory is free
(``available_memory_bytes``, checked before a file's declared size is allocated); this process's
resident memory and its peak (``resident_mib``, ``reset_peak_resident``, the benchmarks' memory
figures)."""
import os
from typing import Optional

_DEFAULT_L2_BYTES = 1 << 20  # when the machine does not say (not Linux)
_MIN_TILE_BYTES = 64 << 10


def l2_bytes() -> int:
    """Per-core L2 cache size in bytes: sysconf, then /sys (Linux); ``_DEFAULT_L2_BYTES`` elsewhere."""
    try:
        size = os.sysconf("SC_LEVEL2_CACHE_SIZE")
        if size > 0:
            return int(size)
    except (ValueError, OSError, AttributeError):
        pass
    try:
        for index in sorted(os.listdir("/sys/devices/system/cpu/cpu0/cache")):
            if not index.startswith("index"):
                continue
            folder = os.path.join("/sys/devices/system/cpu/cpu0/cache", index)
            with open(os.path.join(folder, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(folder, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return _DEFAULT_L2_BYTES


def tile_bytes() -> int:
    """Bytes per tile: half the per-core L2 cache, so a tile and what it is computed from stay in L2
    between the element-wise ops run on it (measured: docs/performance.md#tile-size-of-the-torch-pass)."""
    return max(_MIN_TILE_BYTES, l2_bytes() // 2)


def cpu_capability() -> str:
    """The vector kernels ATen dispatches to in this process: ``"AVX512"``, ``"AVX2"``, ``"DEFAULT"``
    (scalar) and the like, as torch names them; ``"unknown"`` where torch does not say.

    ``torch.backends.cpu.get_cpu_capability()`` (torch >= 2.0), else the "CPU capability usage" line
    of ``torch.__config__.show()`` (torch 1.13, which has no ``torch.backends.cpu``). Set by the CPU
    and the ``ATEN_CPU_CAPABILITY`` environment variable; torch 1.13's PyPI build picks AVX2 on an
    AVX-512 CPU unless ``ATEN_CPU_CAPABILITY=avx512`` is set. Imports torch.
    """
    import torch
    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    if get is not None:
        return str(get())
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages as ``"0.52 0.63 0.85"`` (``os.getloadavg``, the
    numbers of /proc/loadavg), or ``"n/a"`` where the OS does not give them."""
    try:
        return " ".join("%.2f" % v for v in os.getloadavg())
    except (OSError, AttributeError):
        return "n/a"


def available_memory_bytes() -> Optional[int]:
    """Bytes this process can still allocate without swapping, or None where the OS does not say.

    Linux: ``MemAvailable`` of /proc/meminfo (the kernel's estimate, page cache it can drop
    included), lowered to what the cgroup v2 limit leaves (``memory.max - memory.current`` of
    /sys/fs/cgroup) inside a container with a limit. Elsewhere: ``SC_AVPHYS_PAGES * SC_PAGE_SIZE``
    (free pages only, which undercounts), else None.
    """
    found = None  # type: Optional[int]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                found = min(found, max(0, int(limit) - int(f.read().strip())))
    except (OSError, ValueError):
        pass
    return found


def resident_mib(key: str = "VmRSS") -> float:
    """This process's ``VmRSS`` (resident now) or ``VmHWM`` (its peak since the last
    ``reset_peak_resident``) of /proc/self/status, MiB (Linux only).

    Raises:
        RuntimeError: /proc/self/status has no such line.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no %s in /proc/self/status" % key)


def reset_peak_resident() -> float:
    """Reset this process's ``VmHWM`` to its current resident set (``5`` into /proc/self/clear_refs) and
    return that resident set, MiB: ``resident_mib("VmHWM")`` minus it is then what the work since added at
    its peak (Linux only)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return resident_mib("VmRSS")
