"""Zero-copy preprocessing stages: every stage is a view of its input; ``Compose`` verifies it.

Public API: ``build_stages(specs, source=None) -> Compose``, ``STAGES`` (YAML type -> class),
``Compose``, ``Stage``.
"""
from .base import Stage
from .compose import Compose
from .registry import STAGES, build_stage, build_stages

__all__ = ["Compose", "Stage", "STAGES", "build_stage", "build_stages"]
