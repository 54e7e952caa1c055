"""The refusal of a call: what a family's record says of a call some stage of this project refuses
(``record.OpRecord.refusals``), with its true reason. The machinery that asks and words the errors is the
capture's (``pipeline/fx/refusals.py``: ``explain``, ``NotSimulated``); the rows are the records'.

Where an op stops matters less than why, and the why is one of three:

- ``NOT_YET``: the real quantizer handles it and this project has no form for it yet (no simulation
  of its arithmetic, no XIR form, no ONNX lowering); meanwhile the real quantizer in the Vitis AI
  image does it (the runner's ``quantizer.backend: nndct``; a script imports ``pytorch_nndct.apis``
  instead of ``pipeline.apis``);
- ``TRACED_OTHERWISE``: torch.jit traces the call as other ops, and the xmodel takes its op names from
  that trace, as the real quantizer does (docs/xmodel.md#names);
- ``NOT_IN_REAL``: the real quantizer does not take it either.
"""
from collections import namedtuple

NOT_YET = "not in this project yet"
TRACED_OTHERWISE = "traced differently"
NOT_IN_REAL = "not supported by the real quantizer either"

# the stages of this project that refuse calls: the capture (before calibration), the xmodel writer, the
# ONNX exporter
SIMULATION, XMODEL, ONNX = "simulation", "xmodel", "onnx"

# what: the call as the user writes it; kind: NOT_YET, TRACED_OTHERWISE or NOT_IN_REAL; real: what the
# real quantizer does with it; stops: the stages of this project that refuse it; instead: what to do;
# several: the row is about the call's form with several outputs (x.max(dim) gives values and indices;
# x.max() and torch.max(a, b) give one tensor, which the stages take or refuse for their own reasons)
Known = namedtuple("Known", "what kind real stops instead several")

REAL_QUANTIZER = ("quantize and export it with the real quantizer in the Vitis AI image (the runner: "
                  "quantizer.backend: nndct; a script: pytorch_nndct.apis in place of pipeline.apis)")
ALL_STAGES = frozenset((SIMULATION, XMODEL, ONNX))
