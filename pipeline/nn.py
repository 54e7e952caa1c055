"""Drop-in for ``pytorch_nndct.nn``'s ``QuantStub`` and ``DeQuantStub`` (``from pytorch_nndct import nn as
nndct_nn``, ``nndct_nn.QuantStub()``, as Vitis AI's examples write it): ``from pipeline import nn as
nndct_nn`` gives the same two classes for the simulation (``pipeline.apis.torch_quantizer``).

Placed around the parts of a model to quantize, they make the rest float: a node is quantized only when a
QuantStub reaches it without passing a DeQuantStub; the float parts run as torch computes them, and a
QuantStub's output is quantized as a network input is (``pipeline/ops/quant_stub.py`` states the rule and
its upstream sources). In eager mode each returns a clone of its input, as the real ones.

``export_xmodel`` writes one file per quantized part, ``<Model>_<n>_int.xmodel``, as the real quantizer
(docs/xmodel.md#quantized-parts). What differs: the ONNX exports refuse the float layers between the parts, and
the deploy-check dumps of several parts are not written (docs/xmodel.md#known-refusals).
"""
from .ops.quant_stub import DeQuantStub, QuantStub

__all__ = ["QuantStub", "DeQuantStub"]
