"""The error of an XIR graph built against XIR's op definitions, in a module of its own so that the
shape inference (``shapes``), the op definitions (``opdefs``) and the graph (``xgraph``) all raise it
without importing each other in a circle."""


class XGraphError(ValueError):
    """An op cannot be added as asked (libxir would abort with XIR_MULTI_DEFINED_OP and the like)."""
