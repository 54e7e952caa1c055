"""vitis-pipeline: a trained PyTorch model to an AMD/Xilinx DPU deploy bundle with Vitis AI.

Public API (imported lazily, so ``import pipeline`` is cheap and works on a bare CPU machine;
onnx, onnxruntime, pytorch_nndct and xir are imported only by the functions that need them):

- ``pipeline.run(config, steps=None, overrides=None, images=None, labels=None)``: run a YAML config
  (see ``pipeline.runner.driver.run_config``).
- ``pipeline.load_config(path, overrides=None)``: validate a config without running it.
- ``pipeline.apis.torch_quantizer``: a drop-in for ``pytorch_nndct.apis.torch_quantizer`` running
  the CPU simulation.
"""
from typing import Any

from ._version import __version__

__all__ = ["__version__", "run", "load_config"]


def run(*args: Any, **kwargs: Any) -> Any:
    """See ``pipeline.runner.driver.run_config``."""
    from .runner.driver import run_config
    return run_config(*args, **kwargs)


def load_config(*args: Any, **kwargs: Any) -> Any:
    """See ``pipeline.config.load_config``."""
    from .config import load_config as _load
    return _load(*args, **kwargs)
