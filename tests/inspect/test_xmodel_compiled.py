"""``python -m pipeline xmodel check`` on a compiled xmodel (vai_c_xir's output: DPU subgraphs, ``*-fix`` ops;
pipeline/inspect/xmodel_file.py, xmodel_check.py): said to be one, with what check does and does not check
for it, never "export it again"."""
import pytest

from pipeline.inspect.xmodel_file import COMPILED_TO_DO
from pipeline.xir import reader
from tests.inspect.test_compare import _xmodel
from tests.support import cli_in_process, cli_json


@pytest.mark.parametrize("fix_ops", [True, False])
def test_xmodel_check_on_a_compiled_file_says_what_it_is(capsys, tmp_path, fix_ops):
    msg = reader.read_xmodel(_xmodel("convnet"))
    child = msg.subg_root.subg_child.add()  # a compiled file: the root's child subgraphs (DPU, CPU)
    child.subgraph_name = "subgraph_ConvNet__input_0"
    if fix_ops:
        next(op for op in msg.op_node if op.op_type == "conv2d").op_type = "conv2d-fix"
    path = str(tmp_path / "compiled.xmodel")
    with open(path, "wb") as f:
        f.write(msg.SerializeToString())
    code, out, _ = cli_in_process(capsys, "xmodel", "check", path)
    what = "ops of types conv2d-fix" if fix_ops else "DPU/CPU subgraphs"
    assert code == 1 and out.startswith("NOT CHECKED: %s is a compiled xmodel (vai_c_xir's output: %s). xmodel "
                                        "check, run and summary read the quantized xmodel" % (path, what)), out
    assert "are not checked" in out and "export it again" not in out and "BROKEN" not in out
    code, report = cli_json(capsys, "xmodel", "check", path)
    assert code == 1 and report["to_do"] == COMPILED_TO_DO and "export it again" not in str(report)
