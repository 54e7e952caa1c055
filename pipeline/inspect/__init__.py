"""DPU inspection on the CPU: trace a float model with torch.fx and assign each operation to the
DPU of a target or to the CPU, with the reason, as the real Inspector does in the Vitis AI image.

Public API: :func:`inspect_model`, :func:`write_reports`, :class:`Inspection`,
:class:`InspectedNode`. The targets and their engine parameters live in :mod:`pipeline.targets`.
"""

from pipeline.inspect.inspector import InspectedNode, Inspection, inspect_model, write_reports

__all__ = ["InspectedNode", "Inspection", "inspect_model", "write_reports"]
