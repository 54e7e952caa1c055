"""The error of an XIR graph built against XIR's op definitions. The class is defined with the vocabulary
the op units build their XIR pieces from (``pipeline/ops/xir_support.py``: the units' shape inference
raises it without importing this room); the shape inference (``shapes``), the op definitions
(``opdefs``) and the graph (``xgraph``) raise it from here."""
from ..ops.xir_support import XGraphError

__all__ = ["XGraphError"]
