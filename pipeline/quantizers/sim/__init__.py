"""The ``sim`` quantizer backend: a CPU simulation of the Vitis AI 3.5 quantizer (pytorch_nndct).

It reproduces the real quantizer's numbers bit for bit: the same quantization points and node
names (``graph``, ``plan``), the same calibration statistics, CLE and bias correction
(``rewrites``, ``calib``), and a lowered test-mode model built from standard torch ops plus
``pipeline.quantizers.fixpoint.fake_quant`` (``lowered``). ``backend.SimBackend`` implements
the backend contract of ``pipeline.quantizers.base``.
"""
