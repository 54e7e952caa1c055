"""``python -m pipeline xmodel check|run|summary`` (pipeline/inspect/xmodel_cli.py) on the real quantizer's
files (tests/data/golden_xmodel, corpus_real, qat_real), on a file this project writes, and on broken
files: the verdicts, the op counts and fix positions of the file, run's outputs against the stored
real test-mode outputs and the simulation, and a clear message with a nonzero status (never a
traceback) for every bad input."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.xir import interp, reader
from tests.support import DATA, cli_in_process, cli_json
from tests.support.dropin_flow import conv, quantize

GOLDEN = os.path.join(DATA, "golden_xmodel")
CONVNET = os.path.join(GOLDEN, "golden", "convnet", "default", "xmodel", "ConvNet_int.xmodel")
REAL = sorted(glob.glob(os.path.join(GOLDEN, "*", "*", "*", "xmodel", "*.xmodel"))
              + glob.glob(os.path.join(DATA, "corpus_real", "**", "*.xmodel"), recursive=True)
              + glob.glob(os.path.join(DATA, "qat_real", "*", "deployable.xmodel")))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(capsys, *argv):
    return cli_in_process(capsys, "xmodel", *argv)


def _json(capsys, *argv):
    return cli_json(capsys, "xmodel", *argv)


def test_xmodel_cli_check_every_real_file_is_ok_as_the_real_quantizer_writes_it(capsys):
    assert len(REAL) >= 35
    for path in REAL:
        code, out, _ = _cli(capsys, "check", path)
        assert code == 0 and out.startswith("OK: an xmodel as the real Vitis AI quantizer writes it"), (path, out)


@pytest.mark.parametrize("set_name", ["golden", "golden_wide"])
def test_xmodel_cli_summary_op_counts_and_fix_positions_match_the_file(capsys, set_name):
    index = json.load(open(os.path.join(GOLDEN, set_name, "index.json")))
    for model, configs in index.items():
        for config, entry in configs.items():
            folder = os.path.join(GOLDEN, set_name, model, config, "xmodel")
            code, s = _json(capsys, "summary", os.path.join(folder, entry["file"]), "--target", "DPUCZDX8G_ISA1_B4096")
            assert code == 0 and s["ops"] == entry["op_count"] and s["op_types"] == entry["op_types"]
            graph = json.load(open(os.path.join(folder, "graph.json")))
            fixes = {op["name"]: op["attrs"]["fix_point"] for op in graph["ops"] if op["type"] == "fix"}
            assert {f["op"]: f["fix_pos"] for f in s["fix_positions"]} == fixes
            data = [op for op in graph["ops"] if op["type"] == "data"]
            assert sorted((i["name"], i["shape"]) for i in s["inputs"]) == sorted(
                (op["name"], op["output"]["shape"]) for op in data)
            assert all(i["fix_pos"] == fixes[i["name"] + "_fix"] for i in s["inputs"])
            assert s["target"]["DPU"] > 0 and s["target"]["DPU"] + s["target"]["CPU"] <= s["ops"]


def test_xmodel_cli_summary_text_lists_ops_inputs_and_devices(capsys):
    code, out, _ = _cli(capsys, "summary", CONVNET, "--target", "DPUCZDX8G_ISA1_B4096")
    assert code == 0 and "conv2d 2" in out and "fix 12" in out
    assert "input  ConvNet__input_0 dims [1, 16, 16, 3] (NHWC) fix_pos 5" in out
    assert "9 ops on the DPU, 0 on the CPU" in out


@pytest.mark.parametrize("model,config", [(m, c) for m in ("mlp", "convnet", "resblock") for c in ("default", "nocle")])
def test_xmodel_cli_run_gives_the_real_test_mode_output(capsys, tmp_path, model, config):
    """The golden README: each file was exported after one test-mode forward of row 0 of eval_inputs;
    quant_outputs.npy is the real test-mode output, row 0 included."""
    x = np.load(os.path.join(DATA, "golden", model, "eval_inputs.npy"))[:1]
    expected = np.load(os.path.join(DATA, "golden", model, config, "quant_outputs.npy"))[:1]
    np.save(str(tmp_path / "x.npy"), x)
    path = glob.glob(os.path.join(GOLDEN, "golden", model, config, "xmodel", "*.xmodel"))[0]
    code, r = _json(capsys, "run", path, "--input", str(tmp_path / "x.npy"), "--dump", str(tmp_path / "d"))
    assert code == 0 and len(r["outputs"]) == 1
    out = r["outputs"][0]
    graph = reader.check(reader.read_xmodel(path))
    producer = graph.get_op(out["name"]).inputs["input"][0].name  # the output is a fix: <producer>_fix
    got = np.fromfile(str(tmp_path / "d" / (producer + ".bin")), dtype=np.float32).reshape(out["shape"])
    if got.ndim == 4:  # the dump is in the file's layout (NHWC), the model's output NCHW
        assert list(expected.shape) == out["model_shape"]
        got = np.ascontiguousarray(got.transpose(0, 3, 1, 2))
    assert got.tobytes() == expected.astype(np.float32).tobytes()
    codes = np.fromfile(str(tmp_path / "d" / (out["name"] + ".bin")), dtype=np.int8)
    assert out["fix_pos"] is not None and np.array_equal(codes, np.trunc(
        np.fromfile(str(tmp_path / "d" / (producer + ".bin")), dtype=np.float32) * 2.0 ** out["fix_pos"]))
    # the deploy-check files: shape.txt lists every op written, each with its float file
    values = interp.run(graph, [torch.from_numpy(x)])
    lines = open(str(tmp_path / "d" / "shape.txt")).read().splitlines()
    assert r["dump"]["tensors"] == len(lines) > 0
    for line in lines:
        name = line.split("]: ")[1]
        assert os.path.isfile(str(tmp_path / "d" / (name + ".bin"))), name
    assert values[producer].shape == got.shape or got.ndim == 4


def test_xmodel_cli_nhwc_input_and_missing_batch_axis_give_the_same_output(capsys, tmp_path):
    x = np.load(os.path.join(DATA, "golden", "convnet", "eval_inputs.npy"))[:1]
    outs = []
    for name, arr, extra in (("nchw", x, []), ("nhwc", x.transpose(0, 2, 3, 1), ["--layout", "nhwc"]),
                             ("nobatch", x[0], [])):
        np.save(str(tmp_path / (name + ".npy")), arr)
        code, r = _json(capsys, "run", CONVNET, "--input", str(tmp_path / (name + ".npy")), *extra)
        assert code == 0
        outs.append(r["outputs"][0]["first"])
    assert outs[0] == outs[1] == outs[2]


def test_xmodel_cli_a_1d_conv_file_takes_the_models_ncw_input_or_the_files_nwc(capsys, tmp_path):
    """tests/data/refused_real/conv1d: the data op is NWC [1, 32, 8]; the model's NCW input runs the same."""
    path = os.path.join(DATA, "refused_real", "conv1d", "Conv1dNet_int.xmodel")
    x = np.random.RandomState(0).randn(1, 8, 32).astype(np.float32)
    outs = []
    for name, arr in (("ncw", x), ("nwc", x.transpose(0, 2, 1))):
        np.save(str(tmp_path / (name + ".npy")), arr)
        code, r = _json(capsys, "run", path, "--input", str(tmp_path / (name + ".npy")))
        assert code == 0
        outs.append(r["outputs"][0]["first"])
    assert outs[0] == outs[1]


def test_xmodel_cli_a_file_this_project_writes(capsys, tmp_path):
    model = nn.Sequential(conv(), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 4))
    q = quantize(tmp_path, model)
    path = q.export_xmodel(str(tmp_path / "x"))
    code, out, _ = _cli(capsys, "check", path)
    assert code == 0 and out.startswith("OK: an xmodel written by this project"), out
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(7))
    np.save(str(tmp_path / "x.npy"), x.numpy())
    code, r = _json(capsys, "run", path, "--input", str(tmp_path / "x.npy"), "--dump", str(tmp_path / "d"))
    assert code == 0
    with torch.no_grad():
        sim = q.quant_model(x)
    graph = reader.check(reader.read_xmodel(path))
    producer = graph.get_op(r["outputs"][0]["name"]).inputs["input"][0].name
    got = np.fromfile(str(tmp_path / "d" / (producer + ".bin")), dtype=np.float32)
    assert got.tobytes() == sim.detach().numpy().astype(np.float32).tobytes()
    code, s = _json(capsys, "summary", path)
    assert code == 0 and s["op_types"]["conv2d"] == 1 and s["op_types"]["matmul"] == 1


def _broken(capsys, path, *words):
    code, out, err = _cli(capsys, "check", str(path))
    assert code == 1 and out.startswith("BROKEN: "), out
    assert all(w in out for w in words), out
    code, j = _json(capsys, "check", str(path))
    assert code == 1 and j["ok"] is False and j["verdict"].startswith("BROKEN")
    return out


def test_xmodel_cli_broken_files_get_a_verdict_not_a_traceback(capsys, tmp_path):
    data = open(CONVNET, "rb").read()
    cases = {
        "truncated.xmodel": (data[:len(data) // 2], "do not parse"),
        "random.xmodel": (np.random.default_rng(3).integers(0, 256, 5000, dtype=np.uint8).tobytes(), "got"),
        "empty.xmodel": (b"", "empty file"),
        "flip_parse.xmodel": (bytes([0x0F]) + data[1:], "do not parse"),  # field 1 with wire type 7: no protobuf
    }
    for name, (content, word) in cases.items():
        (tmp_path / name).write_bytes(content)
        _broken(capsys, tmp_path / name, word, "expected an XIR .xmodel", "To do:")
    _broken(capsys, tmp_path, "a folder")
    _broken(capsys, tmp_path / "missing.xmodel", "does not exist")
    torch.save({"w": torch.zeros(2)}, str(tmp_path / "model.pt"))
    _broken(capsys, tmp_path / "model.pt", "zip archive", ".pt")
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    onnx.save(helper.make_model(graph), str(tmp_path / "model.onnx"))
    _broken(capsys, tmp_path / "model.onnx", "ONNX")
    # run and summary refuse a broken file the same way
    for cmd in (["run", str(tmp_path / "truncated.xmodel"), "--input", "x.npy"], ["summary", str(tmp_path / "model.pt")]):
        code, out, err = _cli(capsys, *cmd)
        assert code == 1 and err.startswith("BROKEN: ") and out == ""


def test_xmodel_cli_a_flipped_byte_that_parses_but_breaks_a_check(capsys, tmp_path):
    data = open(CONVNET, "rb").read()
    # a weight's fix position 8 -> 7: the const's values are no longer on its grid
    at = data.index(b"fix_point\x12\x02\x28", data.index(b"ConvNet__conv1_weight_fix")) + len(b"fix_point\x12\x02\x28")
    assert data[at] == 8
    (tmp_path / "fix.xmodel").write_bytes(data[:at] + bytes([7]) + data[at + 1:])
    out = _broken(capsys, tmp_path / "fix.xmodel", "fix positions", "ConvNet__conv1_weight", "not multiples of 2^-7")
    # the input's height 16 -> 17 in its output tensor: XIR's shape inference disagrees
    dims = b"ConvNet__input_0\x12\x04\x01\x10\x10\x03"
    at = data.index(dims) + len(dims) - 2
    (tmp_path / "dims.xmodel").write_bytes(data[:at] + b"\x11" + data[at + 1:])
    out = _broken(capsys, tmp_path / "dims.xmodel", "shapes", "ConvNet__input_0", "shape inference")
    assert "To do:" in out


def test_xmodel_cli_run_with_another_models_input_or_a_batch(capsys, tmp_path):
    np.save(str(tmp_path / "mlp.npy"), np.load(os.path.join(DATA, "golden", "mlp", "eval_inputs.npy"))[:1])
    code, out, err = _cli(capsys, "run", CONVNET, "--input", str(tmp_path / "mlp.npy"))
    assert code == 2 and "does not fit the file's data op 'ConvNet__input_0'" in err and "NCHW [1, 3, 16, 16]" in err
    np.save(str(tmp_path / "b4.npy"), np.load(os.path.join(DATA, "golden", "convnet", "eval_inputs.npy"))[:4])
    code, out, err = _cli(capsys, "run", CONVNET, "--input", str(tmp_path / "b4.npy"))
    assert code == 2 and "a batch of 4" in err and "x[:1]" in err
    code, out, err = _cli(capsys, "run", CONVNET, "--input", str(tmp_path / "b4.npy"), "--input", str(tmp_path / "b4.npy"))
    assert code == 2 and "2 --input given, the file has 1 data op" in err
    (tmp_path / "text.npy").write_bytes(b"hello")
    code, out, err = _cli(capsys, "run", CONVNET, "--input", str(tmp_path / "text.npy"))
    assert code == 2 and "not a .npy array" in err
    code, j = _json(capsys, "run", CONVNET, "--input", str(tmp_path / "missing.npy"))
    assert code == 2 and j["ok"] is False and "no such file" in j["verdict"]


def test_xmodel_cli_as_a_process_prints_no_traceback(tmp_path):
    (tmp_path / "random.xmodel").write_bytes(np.random.default_rng(4).integers(0, 256, 999, dtype=np.uint8).tobytes())
    for argv, code in ((["check", str(tmp_path / "random.xmodel")], 1), (["summary", CONVNET, "--target", "NOPE"], 2)):
        p = subprocess.run([sys.executable, "-m", "pipeline", "xmodel"] + argv, cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == code and "Traceback" not in p.stderr + p.stdout, p.stderr
        assert (p.stdout + p.stderr).strip()
