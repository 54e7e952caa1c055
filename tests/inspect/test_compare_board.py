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


def _vart(ref, folder, rename=lambda name: name):
    """A VART dump folder (``subgraph_0/{input,internal,output}/0.<tensor>.bin``) of a deploy-check folder's
    activation codes, each tensor named ``rename(name)``."""
    names = sorted(f[:-len("_fix.bin")] for f in os.listdir(ref) if f.endswith("_fix.bin")
                   and "weight" not in f and "bias" not in f)
    for name in names:
        kind = "input" if name.endswith("input_0") else ("output" if "fc" in name else "internal")
        os.makedirs(os.path.join(folder, "subgraph_0", kind), exist_ok=True)
        shutil.copy(os.path.join(ref, name + "_fix.bin"),
                    os.path.join(folder, "subgraph_0", kind, "0.%s_fix.bin" % rename(name)))
    return names


def _torch2(name):
    """The name another torch's trace gives: the last part's numbers + 2 (``ret_5`` -> ``ret_7``)."""
    head, sep, last = name.rpartition("__")
    if last.startswith("input_"):
        return name
    return head + sep + re.sub(r"[0-9]+", lambda m: str(int(m.group()) + 2), last)


def test_compare_renumbered_names_are_no_match(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    names = _vart(ref, str(tmp_path / "same"))
    code, out, _ = _cli(capsys, ref, tmp_path / "same", "--xmodel", _xmodel("convnet"))
    assert code == 0 and out.startswith("MATCH: all %d tensors match" % len(names)), out
    _vart(ref, str(tmp_path / "renamed"), _torch2)
    code, out, _ = _cli(capsys, ref, tmp_path / "renamed", "--xmodel", _xmodel("convnet"))
    renamed = [n for n in names if _torch2(n) != n]
    assert code == 2 and "MATCH" not in out, out
    assert out.startswith("UNPAIRED: only %d of the board's %d tensors are in the reference (%d only on the board); "
                          "%d of the board's tensor names differ from the reference's only in torch's trace numbers"
                          % (len(names) - len(renamed), len(names), len(renamed), len(renamed))), out
    assert "come from different exports of the model" in out and "make both from the one xmodel" in out
    code, r = _json(capsys, ref, tmp_path / "renamed", "--xmodel", _xmodel("convnet"))
    assert code == 2 and not r["ok"] and r["pairing"]["renumbered"][0][1] == [
        n for n in names if _torch2(n) == r["pairing"]["renumbered"][0][0]]
    relu = os.path.join(str(tmp_path / "renamed"), "subgraph_0", "internal", "0.%s_fix.bin" % _torch2(CONV_RELU))
    codes = np.fromfile(relu, dtype=np.int8).copy()  # the board differs at the relu: its output differs too
    codes[:] = 0
    codes.tofile(relu)
    fc = [n for n in names if "fc" in n][0]
    out_file = os.path.join(str(tmp_path / "renamed"), "subgraph_0", "output", "0.%s_fix.bin" % _torch2(fc))
    _put(os.path.dirname(out_file), "0." + _torch2(fc), _codes(ref, fc) + 1)
    code, out, _ = _cli(capsys, ref, tmp_path / "renamed", "--xmodel", _xmodel("convnet"))
    assert code == 1 and out.startswith("DIVERGED: the board differs at %s (" % fc), out
    assert "but whether an op before it differs is not known: only " in out.splitlines()[0]


INPUT = "ConvNet__input_0"


def test_compare_divergence_at_the_input_says_the_board_was_fed_other_codes(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    board = shutil.copytree(ref, str(tmp_path / "board"))
    codes = _codes(ref, INPUT).reshape(1, 16, 16, 3)
    _put(board, INPUT, codes[..., ::-1].reshape(-1))  # RGB fed as BGR
    code, out, _ = _cli(capsys, ref, board, "--xmodel", _xmodel("convnet"))
    head = out.splitlines()[0]
    assert code == 1 and head.startswith("DIVERGED: first divergence at op %s (data): " % INPUT), out
    assert head.endswith("; the model's input: the board was fed other input codes than the reference's"), head
    assert "the reference's with the 3 channels in reverse order (RGB fed as BGR, or BGR as RGB)" in out
    assert "check the board's preprocessing (channel order RGB/BGR, mean and scale, layout NHWC vs NCHW" in out
    assert "feed the board the reference's own input codes, %s_fix.bin" % INPUT in out
    other = codes.copy()
    other[0, 0, 0, 0] += 1  # another image: no channel swap said, the hint without the xmodel too
    _put(board, INPUT, other.reshape(-1))
    code, out, _ = _cli(capsys, ref, board)
    assert code == 1 and "reverse order" not in out and "the board ran on other input codes" in out, out


def test_xmodel_run_warns_when_most_of_the_input_clamps(capsys, tmp_path):
    from tests.inspect.test_compare import DATA
    x = np.load(os.path.join(DATA, "golden", "convnet", "eval_inputs.npy"))[:1]
    np.save(str(tmp_path / "x.npy"), x)
    np.save(str(tmp_path / "pixels.npy"), (x - x.min()) / (x.max() - x.min()) * 255.0)
    from tests.support import cli_in_process
    code, out, _ = cli_in_process(capsys, "xmodel", "run", _xmodel("convnet"), "--input", tmp_path / "x.npy")
    assert code == 0 and "warning" not in out, out
    code, out, _ = cli_in_process(capsys, "xmodel", "run", _xmodel("convnet"), "--input", tmp_path / "pixels.npy")
    graph = reader.check(reader.read_xmodel(_xmodel("convnet")))
    fp = int(graph.get_op(INPUT + "_fix").attr("fix_point"))
    assert code == 0 and re.search(r"warning: input %s: \d+ of 768 values \(\d+%%\) lie outside \[%g, %g\], the range "
                                   r"its fix takes at fix_pos %d \(8-bit codes -128\.\.127\), and clamp"
                                   % (INPUT, -128 * 2.0 ** -fp, 127 * 2.0 ** -fp, fp), out), out
    assert "Unnormalized pixels (0..255)?" in out


def test_compare_board_of_another_calibration_or_other_parameters_is_told(capsys, tmp_path):
    from pipeline.inspect.deploy_dump import write_dump
    from pipeline.xir import interp
    import torch
    from tests.inspect.test_compare import DATA
    ref = _dump(tmp_path / "ref", "convnet")
    other, fp = _other_calibration(tmp_path, CONV_RELU, 1)
    graph = reader.check(reader.read_xmodel(other))
    x = np.load(os.path.join(DATA, "golden", "convnet", "eval_inputs.npy"))[:1]
    write_dump(str(tmp_path / "board"), graph, interp.run(graph, [torch.from_numpy(x)]))
    code, out, _ = _cli(capsys, ref, tmp_path / "board", "--xmodel", _xmodel("convnet"))
    assert code == 1 and out.splitlines()[0].startswith("DIVERGED: first divergence at op %s (relu)" % CONV_RELU), out
    assert out.splitlines()[1] == (
        "  the board's own files were made at other fix positions than the xmodel's (%s: fix_pos %d in the xmodel, %d "
        "on the board): the board ran another calibration of the model than the reference's xmodel; run the xmodel "
        "the reference came from on the board" % (CONV_RELU, fp - 1, fp)), out
    board = shutil.copytree(ref, str(tmp_path / "params"))
    bias = "ConvNet__conv1_bias"
    _put(board, bias, _codes(ref, bias) ^ 1)
    code, out, _ = _cli(capsys, ref, board, "--xmodel", _xmodel("convnet"))
    assert code == 1 and out.splitlines()[0].endswith(
        "(const): 8 of 8 codes differ, max 1; a parameter: the board's xmodel holds other parameters than the "
        "reference's"), out
    assert "a parameter differs: the board ran another xmodel than the reference's" in out
