"""The ``sim`` quantizer backend: a CPU simulation of the Vitis AI 3.5 quantizer (pytorch_nndct).

It reproduces the real quantizer's numbers bit for bit (tests/sim/test_sim_golden.py):

- ``pipeline.fx.capture`` (shared with inspect and the exporter): torch.fx capture of a working copy (``pipeline.fx.work_copy``),
  nndct rewrites (ReLU6 -> ReLU with CLE, dropout removal, Conv+BN folding) and nndct node names
  (``nndct_conv2d_1``, ...), graph md5; ``pipeline.ops``: the op table;
- ``plan``: where the quantization points are and the export-time fix_pos adjustments;
- ``cle``: cross-layer equalization; ``ops``: nndct's operator approximations;
- ``calib``: calibration (per-batch diffs search, modal fix_pos, bias correction);
- ``lowered``: the test-mode ``torch.fx.GraphModule`` of standard ops plus ``fake_quant``;
- ``session``: one quantization session tying these together;
- ``backend.SimBackend``: the backend contract of ``pipeline.quantizers.base`` on this library (a room of its
  own, above the library and its ``xmodel``, ``export`` and ``qat``: docs/architecture.md#floors).
"""
