"""DPU inspection on the CPU: trace a float model with torch.fx and assign each operation to the
DPU of a target or to the CPU, with the reason, as the real Inspector does in the Vitis AI image.

Public API: :func:`inspect_model`, :func:`write_reports`, :class:`Inspection`,
:class:`InspectedNode`, and the engine-parameter table :data:`TARGETS` with :func:`get_target`.
"""

from pipeline.inspect.hardware import TARGETS, DpuEngines, get_target
from pipeline.inspect.inspector import InspectedNode, Inspection, inspect_model, write_reports

__all__ = ["TARGETS", "DpuEngines", "get_target", "InspectedNode", "Inspection", "inspect_model",
           "write_reports"]
