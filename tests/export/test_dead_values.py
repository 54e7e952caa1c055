"""A value forward computes and never uses, through the drop-in as a user's script runs it.

The real quantizer drops it with torch.jit's dead code pass on its trace (tests/data/refused_real/dead_*:
no quant_info.json entry, no node, no xmodel op; tests/fidelity/test_refused_real.py compares the files), and
so does the simulation's capture (pipeline/fx/dead_values.py). Here: the export that used to be refused
(``nndct_permute_2 ... cannot be written``) is written and checked against the simulation, the ONNX export and
the inspector see no node of the dead value, and a call that writes its input in place stays.
"""
import json
import os

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import Inspector, torch_quantizer


class _DeadPermute(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.r = nn.ReLU()

    def forward(self, x):
        y = self.c(x)
        z = y.permute(0, 2, 3, 1)  # noqa: F841  (unused)
        return self.r(y)


def test_an_unused_permute_is_dropped_and_the_xmodel_written(tmp_path):
    torch.manual_seed(0)
    model, x = _DeadPermute().eval(), torch.randn(2, 3, 8, 8)
    out = str(tmp_path)
    q = torch_quantizer("calib", model, (x,), output_dir=out, device=torch.device("cpu"))
    q.quant_model(x)
    q.export_quant_config()
    with open(os.path.join(out, "quant_info.json")) as f:
        info = json.load(f)
    # the conv is fused with its ReLU as if the permute were not there: no entry of its own, none of a permute
    assert list(info["output"]) == ["_DeadPermute::nndct_input_0", "_DeadPermute::nndct_relu_2"]
    q = torch_quantizer("test", model, (x[:1],), output_dir=out, device=torch.device("cpu"))
    q.quant_model(x[:1])
    q.export_xmodel(output_dir=out)  # runs the written file against the simulation before writing it
    q.export_onnx_model(output_dir=out)
    assert os.path.exists(os.path.join(out, "_DeadPermute_int.xmodel"))
    import onnx
    kinds = [n.op_type for n in onnx.load(os.path.join(out, "_DeadPermute_int.onnx")).graph.node]
    assert "Transpose" not in kinds


def test_the_inspector_sees_no_node_of_an_unused_value(tmp_path):
    inspection = Inspector("DPUCZDX8G_ISA1_B4096").inspect(_DeadPermute().eval(), (torch.randn(1, 3, 8, 8),),
                                                          device=torch.device("cpu"), output_dir=str(tmp_path),
                                                          verbose_level=0)
    assert [n.op for n in inspection.nodes if n.op not in ("input",)] == ["conv2d", "relu"]


class _InPlaceLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.c(x)
        F.relu(y, inplace=True)  # its result is not assigned, y is read after it
        return y * 2


def test_a_call_that_writes_its_input_in_place_is_kept(tmp_path):
    q = torch_quantizer("calib", _InPlaceLast().eval(), (torch.randn(2, 3, 8, 8),), output_dir=str(tmp_path),
                        device=torch.device("cpu"))
    q.quant_model(torch.randn(2, 3, 8, 8))
    q.export_quant_config()
    with open(str(tmp_path / "quant_info.json")) as f:
        assert "_InPlaceLast::nndct_relu_3" in json.load(f)["output"]  # after nndct_const_0 (the 2), the input, the conv
