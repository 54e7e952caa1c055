"""Export of the simulated quantized model to ONNX and its verification with ONNX Runtime.

- :func:`export_onnx` writes a lowered test-mode model (a ``torch.fx.GraphModule``, see
  ``pipeline.quantizers.sim``) as ONNX in the ``qdq`` or the bit-exact ``exact`` flavour.
- :func:`verify_onnx` runs the file with ONNX Runtime and compares it with the simulation;
  :func:`check_agreement` turns that report into an ``ExportError`` when it is out of tolerance;
  :func:`verify_qdq` checks a qdq file bit for bit against :func:`qdq_reference` (the simulation
  rounding half to even) and reports its difference from the simulation.

onnx and onnxruntime are imported inside the functions, so importing this package is cheap.
"""
from .onnx import FLAVOURS, OPSET, export_onnx
from .verify import check_agreement, qdq_reference, qdq_warning, verify_onnx, verify_qdq

__all__ = ["FLAVOURS", "OPSET", "export_onnx", "verify_onnx", "verify_qdq", "qdq_reference", "qdq_warning",
           "check_agreement"]
