"""``python -m pipeline compare REFERENCE BOARD`` and ``xmodel run --dump`` (pipeline/inspect/compare*.py,
deploy_dump.py): dumps made by the interpreter for the real golden xmodels and for a small model exported
here; faults injected at chosen ops (one code, a fix position off by one, NHWC data written as NCHW, a
missing tensor, VART's dump layout) are named FIRST, before any downstream op; identical dumps and the real
quantizer's deploy-check folders match; bad folders give one message and exit 2, never a traceback."""
import glob
import json
import os
import shutil

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.cli import main
from pipeline.inspect.deploy_dump import write_dump
from pipeline.xir import interp, reader
from tests.support import DATA, cli_in_process, cli_json
from tests.support.dropin_flow import conv, quantize

GOLDEN = os.path.join(DATA, "golden_xmodel", "golden")
REAL = os.path.join(DATA, "deploy_check_real")


def _xmodel(model, config="default"):
    return glob.glob(os.path.join(GOLDEN, model, config, "xmodel", "*.xmodel"))[0]


def _dump(folder, model, config="default"):
    """The interpreter's deploy-check dump of a golden xmodel on the references' input (eval_inputs[:1])."""
    graph = reader.check(reader.read_xmodel(_xmodel(model, config)))
    x = np.load(os.path.join(DATA, "golden", model, "eval_inputs.npy"))[:1]
    write_dump(str(folder), graph, interp.run(graph, [torch.from_numpy(x)]))
    return str(folder)


def _cli(capsys, *argv):
    return cli_in_process(capsys, "compare", *argv)


def _json(capsys, *argv):
    return cli_json(capsys, "compare", *argv)


def _codes(folder, name):
    return np.fromfile(os.path.join(folder, name + "_fix.bin"), dtype=np.int8)


def _put(folder, name, codes):
    np.asarray(codes, dtype=np.int8).tofile(os.path.join(folder, name + "_fix.bin"))


CONV_RELU = "ConvNet__ConvNet_ReLU_relu__ret_5"
CONV_POOL = "ConvNet__ConvNet_MaxPool2d_pool__458"
CONV_FC = "ConvNet__ConvNet_Linear_fc__ret"


@pytest.mark.parametrize("model", ["mlp", "convnet", "resblock"])
@pytest.mark.parametrize("config", ["default", "nocle"])
def test_compare_xmodel_run_dump_equals_the_real_deploy_check_files(tmp_path, model, config):
    """Every .bin the real quantizer wrote is written with the same bytes, but Hardswish's pair (the real
    dump holds its value before the output fix, truncated; the xmodel gives the DPU's rounded value)."""
    ours = _dump(tmp_path / "d", model, config)
    real = glob.glob(os.path.join(REAL, model, config, "deploy_check_data_int", "*"))[0]
    names = sorted(f for f in os.listdir(real) if f.endswith(".bin"))
    differ = [f for f in names if open(os.path.join(real, f), "rb").read() != open(os.path.join(ours, f), "rb").read()]
    assert differ == ([] if model != "resblock" else ["ResBlockNet__ResBlockNet_Hardswish_hs_act__ret_33.bin",
                                                      "ResBlockNet__ResBlockNet_Hardswish_hs_act__ret_33_fix.bin"])
    assert sorted(f for f in os.listdir(ours) if f.endswith(".bin")) == names


@pytest.mark.parametrize("model", ["mlp", "convnet", "resblock"])
def test_compare_real_deploy_check_against_ours_matches_both_ways(capsys, tmp_path, model):
    ours = _dump(tmp_path / "d", model)
    real = os.path.join(REAL, model, "default")
    for ref, board in ((real, ours), (ours, real)):
        for extra in ([], ["--xmodel", _xmodel(model)]):
            code, out, _ = _cli(capsys, ref, board, *extra)
            assert code == 0 and out.startswith("MATCH: all "), out


def test_compare_identical_dumps_match_with_json(capsys, tmp_path):
    ref = _dump(tmp_path / "d", "convnet")
    code, r = _json(capsys, ref, ref, "--xmodel", _xmodel("convnet"))
    assert code == 0 and r["ok"] and r["first"] is None and r["verdict"].startswith("MATCH: all 15 tensors")
    assert all(row["status"] == "match" for row in r["rows"])


def test_compare_with_another_model_s_xmodel_says_so(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    code, out, err = _cli(capsys, ref, ref, "--xmodel", _xmodel("mlp"))
    assert code == 2 and "MATCH" not in out
    assert err.startswith("error: --xmodel %s describes another model: none of its " % _xmodel("mlp"))
    assert "is a tensor of REFERENCE (e.g. ConvNet__" in err


def test_compare_one_code_changed_names_that_op_first_not_the_downstream_one(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    board = shutil.copytree(ref, str(tmp_path / "board"))
    relu = _codes(board, CONV_RELU).copy()
    relu[37] += 1
    _put(board, CONV_RELU, relu)
    fc = _codes(board, CONV_FC).copy()  # a downstream op differs too: the relu must still come first
    fc[:] = 0
    _put(board, CONV_FC, fc)
    code, out, _ = _cli(capsys, ref, board, "--xmodel", _xmodel("convnet"))
    assert code == 1
    assert out.splitlines()[0] == ("DIVERGED: first divergence at op %s (relu): 1 of 2048 codes differ, max 1; its "
                                   "input ConvNet__ConvNet_Conv2d_conv1__ret_1 matches" % CONV_RELU), out
    assert "its inputs match, so the difference arises in this op" in out
    code, r = _json(capsys, ref, board)  # without the xmodel: shape.txt's order
    assert code == 1 and r["first"]["node"] == CONV_RELU and r["first"]["differ"] == 1


def test_compare_wrong_fix_position_is_told_as_codes_scaled(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    board = shutil.copytree(ref, str(tmp_path / "board"))
    pool = _codes(board, CONV_POOL).astype(np.int32)
    _put(board, CONV_POOL, np.clip(pool * 2, -128, 127))
    code, out, _ = _cli(capsys, ref, board, "--xmodel", _xmodel("convnet"))
    assert code == 1 and "first divergence at op %s (maxpool2d)" % CONV_POOL in out.splitlines()[0], out
    assert "times 2^1" in out and "fix position off by +1" in out and "%s (relu), fix_pos 5: matches" % CONV_RELU in out


def test_compare_nchw_layout_is_told(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    board = shutil.copytree(ref, str(tmp_path / "board"))
    relu = _codes(board, CONV_RELU).reshape(1, 16, 16, 8)
    _put(board, CONV_RELU, relu.transpose(0, 3, 1, 2).reshape(-1))
    code, out, _ = _cli(capsys, ref, board)
    assert code == 1 and "first divergence at op %s" % CONV_RELU in out.splitlines()[0]
    assert "in NCHW order" in out and "NHWC [1, 16, 16, 8]" in out


def test_compare_missing_tensor_in_a_full_dump(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "resblock")
    board = shutil.copytree(ref, str(tmp_path / "board"))
    name = "ResBlockNet__ResBlockNet_LeakyReLU_dw_act__ret_25"
    for suffix in (".bin", "_fix.bin"):
        os.remove(os.path.join(board, name + suffix))
    code, out, _ = _cli(capsys, ref, board, "--xmodel", _xmodel("resblock"))
    assert code == 1 and out.splitlines()[0].startswith(
        "DIVERGED: first divergence at op %s (leaky-relu): missing on the board side" % name), out
    assert "LeakyReLU: the DPU's slope is 26/256 = 0.1015625" in out


def test_compare_vart_dump_layout_and_avgpool_approximation(capsys, tmp_path):
    """VART's XLNX_ENABLE_DUMP=1 layout: dump/<subgraph>/{input,internal,output}/<engine>.<tensor>.bin, codes."""
    ref = _dump(tmp_path / "ref", "resblock")
    sub = tmp_path / "dump" / "subgraph_ResBlockNet__ResBlockNet_Conv2d_stem_conv__ret_1"
    names = [f[:-4] for f in os.listdir(ref) if f.endswith("_fix.bin") and "weight" not in f and "bias" not in f]
    for name in names:
        kind = "input" if "input_0" in name else ("output" if "head" in name else "internal")
        os.makedirs(str(sub / kind), exist_ok=True)
        shutil.copy(os.path.join(ref, name + ".bin"), str(sub / kind / ("0." + name + ".bin")))
    code, out, _ = _cli(capsys, ref, tmp_path / "dump")
    assert code == 0 and out.startswith("MATCH: all %d tensors match (%d as int8 codes, 0 as float32)"
                                        % (len(names), len(names))), out
    assert "not dumped by the board" in out
    pool = "ResBlockNet__ResBlockNet_AvgPool2d_avgpool__806"
    path = str(sub / "internal" / ("0." + pool + "_fix.bin"))
    codes = np.fromfile(path, dtype=np.int8).copy()
    codes[3] -= 1
    codes.tofile(path)
    code, out, _ = _cli(capsys, ref, tmp_path / "dump", "--xmodel", _xmodel("resblock"))
    assert code == 1 and "first divergence at op %s (mul): 1 of 2304 codes differ" % pool in out.splitlines()[0]
    assert "average pool 3x3" in out and "0.984375 (avgpool_dpu_scale)" in out


def test_compare_a_model_exported_here_deploy_check_vs_xmodel_run_dump(capsys, tmp_path):
    model = nn.Sequential(conv(), nn.ReLU(), conv(8, 8), nn.LeakyReLU(0.1), nn.Flatten(), nn.Linear(8 * 8 * 8, 4))
    q = quantize(tmp_path, model)
    path = q.export_xmodel(str(tmp_path / "x"), deploy_check=True)
    g = torch.Generator().manual_seed(1)  # quantize()'s first test-mode forward: the dumps' input
    for shape in ((1, 3, 8, 8), (4, 3, 8, 8), (4, 3, 8, 8)):
        torch.randn(shape, generator=g)
    np.save(str(tmp_path / "x.npy"), torch.randn((1, 3, 8, 8), generator=g).numpy())
    assert main(["xmodel", "run", path, "--input", str(tmp_path / "x.npy"), "--dump", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    code, out, _ = _cli(capsys, tmp_path / "x", tmp_path / "d", "--xmodel", path)
    assert code == 0 and out.startswith("MATCH"), out
    graph = reader.check(reader.read_xmodel(path))
    convs = [op.name for op in graph.ops if op.type == "conv2d"]
    first = convs[1]  # the second conv, quantized at its LeakyReLU: its float file
    data = np.fromfile(str(tmp_path / "d" / (first + ".bin")), dtype=np.float32).copy()
    data[0] += 0.5
    data.tofile(str(tmp_path / "d" / (first + ".bin")))
    code, out, _ = _cli(capsys, tmp_path / "x", tmp_path / "d", "--xmodel", path)
    assert code == 1 and "first divergence at op %s (conv2d): 1 of %d float32 values differ, max 0.5" % (
        first, data.size) in out.splitlines()[0], out
    assert "fix positions: " in out and "DPU shifts" not in out.splitlines()[0]


def test_compare_bad_folders_say_what_is_wrong(capsys, tmp_path):
    ref = _dump(tmp_path / "ref", "convnet")
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("x")
    other = _dump(tmp_path / "mlp", "mlp")
    short = shutil.copytree(ref, str(tmp_path / "short"))
    for f in os.listdir(short):
        if f.endswith(".bin"):
            open(os.path.join(short, f), "wb").write(b"\x01\x02\x03")
    vart = tmp_path / "dump" / "subgraph_x" / "internal"
    vart.mkdir(parents=True)
    (vart / ("0." + CONV_RELU + "_fix.bin")).write_bytes(b"\0" * 100)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "weights.bin").write_bytes(b"\0" * 8)
    cases = [(tmp_path / "empty", "empty: not a dump folder"), (tmp_path / "nothere", "no such folder"),
             (tmp_path / "afile", "a file, not a folder"), (other, "the dumps of another model"),
             (short, "not a float32 file"), (tmp_path / "dump", "another size"),
             (junk, "not named <engine>.<tensor>.bin")]
    for board, words in cases:
        code, out, err = _cli(capsys, ref, board)
        assert code == 2 and err.startswith("error: ") and words in err, (board, err)
    code, out, err = _cli(capsys, tmp_path / "empty", ref)
    assert code == 2 and "REFERENCE" in err and "deploy-check folder" in err
    code, out, err = _cli(capsys, ref, ref, "--xmodel", tmp_path / "afile")
    assert code == 2 and err.startswith("error: --xmodel")
    code, r = _json(capsys, ref, tmp_path / "empty")
    assert code == 2 and r["usable"] is False


def test_an_unknown_fix_position_is_said_in_words():
    from pipeline.inspect.compare_explain import fix_positions_line
    assert fix_positions_line({"input": None, "weights": 7, "output": 4}) == (
        "fix positions: input unknown (no fix op in the xmodel), weights 7, output 4")
