"""vitis-pipeline: a trained PyTorch model to an AMD/Xilinx DPU deploy bundle with Vitis AI.

Importing the package is cheap and works on a bare CPU machine: heavy or optional
dependencies (onnx, onnxruntime, pytorch_nndct, xir) are imported inside the functions that need them.
"""

__version__ = "0.1.0"
