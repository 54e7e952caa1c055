"""``inspect`` and the xmodel agree: each inspected node names the op the quantized xmodel holds for it
(docs/xmodel.md#names), and the nodes inspect sends to the CPU are the xmodel's float operators.

The names are this torch's (they follow torch.jit's trace numbering): where it numbers trace values
otherwise than the references' torch, the real file's ops are renamed by position to the names of the
simulation's file of the same case first (tests/support/xmodel_compare.py)."""
import os

import pytest

from pipeline.inspect import inspect_model
from pipeline.xir import reader
from tests.support.xmodel_compare import numbering_matches_references, reference_for_this_torch
from tests.support.xmodel_golden_helper import CASES, folder, golden_file, model_and_data

DEFAULT_CASES = [(s, m) for s, m, c in CASES if c == "default"]
FLOAT_OPS = {"sigmoid", "tanh", "gelu", "aten::silu", "nndct_clamp", "div", "sub", "aten::mean", "softmax"}


@pytest.mark.parametrize("set_name,name", DEFAULT_CASES)
def test_xmodel_op_names_in_inspect_are_the_real_files_ops(set_name, name, request):
    model, calib, _ = model_and_data(set_name, name)
    inspection = inspect_model(model, tuple(c[:4] for c in calib) if len(calib) > 1 else calib[0][:4],
                               "DPUCZDX8G_ISA1_B4096")
    real = golden_file(set_name, name, "default")
    if not numbering_matches_references():  # the simulation's file of the case (conftest.golden_xmodels) names them
        mine = os.path.join(folder(request.getfixturevalue("golden_xmodels"), set_name, name, "default"), "xmodel",
                            os.path.basename(real))
        real = reference_for_this_torch(real, mine)
    ops = {op.name: op.type for op in reader.check(reader.read_xmodel(real)).ops}
    named = [n for n in inspection.nodes if n.xmodel_op]
    assert named and all(n.xmodel_op in ops for n in named), [n.xmodel_op for n in named if n.xmodel_op not in ops]
    for n in inspection.nodes:  # folded away: a BatchNorm into its conv, a pad into its conv
        if n.op == "batch_norm" and n.fused_into or name == "floatops" and n.op == "pad":
            assert n.xmodel_op is None
    # every float operator of the xmodel is a node inspect sends to the CPU, under the same name
    cpu = {n.xmodel_op for n in inspection.nodes if n.device == "CPU"}
    assert {op for op, kind in ops.items() if kind in FLOAT_OPS} <= cpu
    if name == "floatops":  # and here the CPU holds nothing else
        assert cpu == {op for op, kind in ops.items() if kind in FLOAT_OPS} and len(cpu) == 9
