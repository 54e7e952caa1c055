"""DPU targets: the one registry (names, families, boards, fingerprints, ``arch.json`` paths, engine
parameters), ``get_target`` and the ``arch.json`` checks.

- ``registry``: :class:`DpuTarget`, :data:`TARGETS`, :func:`get_target`, fingerprints, the table
  ``python -m pipeline targets`` prints.
- ``engines``: the engine parameters an entry may carry (what the inspection rules read).
- ``arch_json``: the ``arch.json`` path in the image, reading one, checking it against a target.
- ``releases``: per family, the Vitis AI release its boards run and the pinned image whose
  ``vai_c_xir`` compiles for it (``DpuTarget.board_release``, ``DpuTarget.compile_image``).
- ``docker_image``: the standard-library-only reader ``scripts/docker_run.sh`` asks for a config's image.
"""
from .arch_json import arch_json_path, check_arch_json, read_arch_json
from .engines import Engines, EngineLimits, allows
from .registry import (ARCH_ROOT, TARGETS, DpuTarget, format_targets, get_target, hex_fingerprint,
                       targets_by_fingerprint)

__all__ = ["ARCH_ROOT", "TARGETS", "DpuTarget", "Engines", "EngineLimits", "allows", "arch_json_path",
           "check_arch_json", "format_targets", "get_target", "hex_fingerprint", "read_arch_json",
           "targets_by_fingerprint"]
