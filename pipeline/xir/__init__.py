"""The XIR format without ``xir``: libxir's serialized graph, op definitions and graph, and an interpreter.

The Vitis AI image's ``xir`` Python package (libxir) reads, builds and checks ``.xmodel`` files; this
package restates the part of it the pipeline needs with the ``protobuf`` package alone (docs/xmodel.md),
and knows nothing of who made a graph (the simulation's writer, the real quantizer, a compiler):

- ``schema``: XIR's serialized graph (``serial_v2``) as protobuf descriptors;
- ``opdefs`` with ``shapes``, ``shapes_layout``: libxir's op definitions and shape inference (the XIR
  types the op units write are defined, shaped and run by their units, ``pipeline.ops`` records'
  ``xir_ops``, read off ``pipeline.ops.XIR_OPS``; the tables here hold the format's own types: ``data``,
  ``const``, ``fix`` and the built-in types no unit writes); ``xgraph``: a graph built the way libxir builds one (defaults, kinds, topological order);
  ``errors``: ``XGraphError``, what they raise;
- ``reader``: parse a file and check it against the op definitions;
- ``interp`` with ``interp_ops`` and ``interp_base``: run a graph on the CPU, the DPU's fixed-point
  arithmetic from ``pipeline.fixpoint``; ``aten_ops``: the generic element-wise float operators
  (``aten::abs``, ...) whose type name says all they compute, and the message for a custom op the file
  does not determine.

The simulation's writer (``pipeline.quantizers.sim.xmodel``), the inspector's ``xmodel`` commands and
the deploy step's check use it; it imports nothing of theirs. It imports ``pipeline.ops`` (the records
and ``ops/xir_support.py``, the definitions' vocabulary and the shape and kernel helpers), which imports
nothing of it.
"""
