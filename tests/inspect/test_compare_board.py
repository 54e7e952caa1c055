"""``python -m pipeline compare`` on the board loop's wrong inputs (pipeline/inspect/compare*.py): an xmodel
of another calibration than the reference's (refused, naming the tensor and both fix positions), a float
file off its fix position's grid told as what it is, names that differ only in torch's trace numbers
(another export of the model: no clean MATCH), and a divergence at the input tensor (the board's
preprocessing: a channel swap, another image)."""
import os
import re
import shutil

import numpy as np

from pipeline.xir import reader
from tests.inspect.test_compare import CONV_RELU, _cli, _codes, _dump, _json, _put, _xmodel


def _other_calibration(tmp_path, node, delta):
    """The golden convnet's xmodel with ``node``'s output fix position moved by ``delta``: the same model,
    another calibration."""
    msg = reader.read_xmodel(_xmodel("convnet"))
    fix = next(op for op in msg.op_node if op.op_type == "fix" and op.op_name == node + "_fix")
    fix.op_attr["fix_point"].int32_value += delta
    path = str(tmp_path / "other.xmodel")
    with open(path, "wb") as f:
        f.write(msg.SerializeToString())
    return path, fix.op_attr["fix_point"].int32_value


def test_compare_refuses_an_xmodel_of_another_calibration(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    other, fp = _other_calibration(tmp_path, CONV_RELU, 1)
    code, out, err = _cli(capsys, ref, ref, "--xmodel", other)
    assert code == 2 and "MATCH" not in out and "DIVERGED" not in out
    assert err.startswith("error: --xmodel %s is another calibration than the reference's: 1 tensor of REFERENCE"
                          % other), err
    assert "%s: fix_pos %d in the xmodel, %d in the reference" % (CONV_RELU, fp, fp - 1) in err
    assert "give the xmodel the reference came from" in err
    code, out, _ = _cli(capsys, ref, ref, "--xmodel", _xmodel("convnet"))  # its own xmodel: a match
    assert code == 0 and out.startswith("MATCH: all 15 tensors match"), out


def test_compare_off_grid_float_note_only_where_true(capsys, tmp_path):
    """Without the reference's codes of a node the xmodel's fix position cannot be checked; its float file off
    that grid is then not said to be a Hardswish's value before its fix, and the board's own codes count."""
    ref = _dump(tmp_path / "ref", "convnet")
    board = shutil.copytree(ref, str(tmp_path / "board"))
    os.remove(os.path.join(ref, CONV_RELU + "_fix.bin"))
    other, fp = _other_calibration(tmp_path, CONV_RELU, -1)
    code, r = _json(capsys, ref, board, "--xmodel", other)
    notes = "\n".join(r["notes"])
    assert "Hardswish" not in notes, notes
    assert "%s.bin's values are not on the grid of fix_pos %d" % (CONV_RELU, fp) in notes
    assert "%s_fix.bin was not made at fix_pos %d from %s.bin; its own codes are compared" % (
        CONV_RELU, fp, CONV_RELU) in notes
    assert code == 1 and r["first"]["node"] == CONV_RELU and "times 2^1" in r["first"]["why"]
