"""``python -m pipeline xmodel run --dump`` against ``export_xmodel(deploy_check=True)`` on a model with a float
parameter const (a LayerScale's gamma, no fix) that ends in ``.permute(0, 3, 1, 2)``: the same files with the
same bytes, ``compare`` treating a parameter file on one side only alike from either side, and the output's
layout printed as the file holds it (NCHW after the final transpose)."""
import os

import numpy as np
import torch
from torch import nn

from pipeline.cli import main
from tests.support import cli_in_process, cli_json
from tests.support.dropin_flow import quantize

SHAPE = (3, 6, 5)


class LayerScaleBack(nn.Module):
    """Tokens times a float parameter (its second operand), then back to NCHW: the file ends in a transpose."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.g = nn.Parameter(torch.rand(8) + 0.5)

    def forward(self, x):
        return (self.c(x).permute(0, 2, 3, 1) * self.g).permute(0, 3, 1, 2)


def _exported(tmp_path):
    q = quantize(tmp_path, LayerScaleBack(), SHAPE)
    path = q.export_xmodel(str(tmp_path / "x"), deploy_check=True)
    g = torch.Generator().manual_seed(1)  # quantize()'s first test-mode forward: the dumps' input
    for shape in ((1,) + SHAPE, (4,) + SHAPE, (4,) + SHAPE):
        torch.randn(shape, generator=g)
    x = torch.randn((1,) + SHAPE, generator=g)
    np.save(str(tmp_path / "x.npy"), x.numpy())
    with torch.no_grad():
        y = q.quant_model(x)
    return path, str(tmp_path / "x" / "deploy_check_data_int" / "LayerScaleBack"), y


def _bins(folder):
    return {f: open(os.path.join(folder, f), "rb").read() for f in os.listdir(folder) if f.endswith(".bin")}


def test_run_dump_equals_the_exports_and_prints_the_files_layout(capsys, tmp_path):
    path, export_dump, y = _exported(tmp_path)
    code, r = cli_json(capsys, "xmodel", "run", path, "--input", str(tmp_path / "x.npy"), "--dump", str(tmp_path / "d"))
    assert code == 0
    mine, real = _bins(str(tmp_path / "d")), _bins(export_dump)
    assert "LayerScaleBack__g.bin" in real and "LayerScaleBack__g_fix.bin" not in real
    assert mine == real
    (out,) = r["outputs"]
    assert out["layout"] == "NCHW" and out["shape"] == out["model_shape"] == list(y.shape)
    assert mine[out["name"] + ".bin"] == y.detach().numpy().astype(np.float32).tobytes()
    code, text, _ = cli_in_process(capsys, "xmodel", "run", path, "--input", str(tmp_path / "x.npy"))
    assert code == 0 and "dims %s (NCHW: the model's layout, after the file's transpose" % list(y.shape) in text
    code, text, _ = cli_in_process(capsys, "compare", export_dump, str(tmp_path / "d"), "--xmodel", path)
    assert code == 0 and text.startswith("MATCH"), text


def test_compare_a_parameter_file_on_one_side_only_is_no_divergence(capsys, tmp_path):
    path, export_dump, _ = _exported(tmp_path)
    assert main(["xmodel", "run", path, "--input", str(tmp_path / "x.npy"), "--dump", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    os.remove(str(tmp_path / "d" / "LayerScaleBack__g.bin"))
    for ref, board in ((export_dump, str(tmp_path / "d")), (str(tmp_path / "d"), export_dump)):
        code, text, _ = cli_in_process(capsys, "compare", ref, board, "--xmodel", path)
        assert code == 0 and text.startswith("MATCH"), text
    code, text, _ = cli_in_process(capsys, "compare", export_dump, str(tmp_path / "d"))
    assert code == 0 and "LayerScaleBack__g" in text, text


def test_run_refuses_an_input_holding_nan_or_inf(capsys, tmp_path):
    path, _, _ = _exported(tmp_path)
    for name, value in (("nan", np.nan), ("inf", np.inf)):
        x = np.load(str(tmp_path / "x.npy"))
        x[0, 0, 0, :2] = value
        np.save(str(tmp_path / (name + ".npy")), x)
        code, text, err = cli_in_process(capsys, "xmodel", "run", path, "--input", str(tmp_path / (name + ".npy")))
        assert code == 2 and "holds %d NaN and %d inf of 90 values" % ((2, 0) if name == "nan" else (0, 2)) in text + err
        assert "give a finite input" in text + err
    np.save(str(tmp_path / "big.npy"), np.full((1,) + SHAPE, 1e39))  # float64 beyond float32's range: inf
    code, text, err = cli_in_process(capsys, "xmodel", "run", path, "--input", str(tmp_path / "big.npy"))
    assert code == 2 and "0 NaN and 90 inf" in text + err


def test_run_refuses_integer_input_saying_how_to_convert_it(capsys, tmp_path):
    """Tester's finding: int8 and uint8 .npy files ran as float values with rc 0 (raw pixels or int8 codes
    gave meaningless outputs). The message names the dtype, the float input wanted, and the input's fix
    position that turns codes into values."""
    path, _, _ = _exported(tmp_path)
    code, summary = cli_json(capsys, "xmodel", "summary", path)
    fix_pos = summary["inputs"][0]["fix_pos"]
    assert code == 0 and isinstance(fix_pos, int)
    x = np.load(str(tmp_path / "x.npy"))
    for dtype in ("int8", "uint8", "int64", "bool"):
        np.save(str(tmp_path / (dtype + ".npy")), (x * 10).astype(dtype))
        code, text, err = cli_in_process(capsys, "xmodel", "run", path, "--input", str(tmp_path / (dtype + ".npy")))
        assert code == 2 and "dtype %s (integer values, e.g. raw pixels or int8 codes)" % dtype in text + err
        assert "the run takes the float input the model takes" in text + err
        assert "x = codes.astype(numpy.float32) * 2.0 ** -%d" % fix_pos in text + err
    np.save(str(tmp_path / "f16.npy"), x.astype(np.float16))  # a float dtype is still taken (as float32)
    assert cli_in_process(capsys, "xmodel", "run", path, "--input", str(tmp_path / "f16.npy"))[0] == 0


def test_run_dump_says_what_it_counts(capsys, tmp_path):
    """The --dump line counted the tensors of shape.txt but the code files of parameters too ("18 tensors
    (25 with int8 codes)"): it names both parts."""
    path, _, _ = _exported(tmp_path)
    code, text, _ = cli_in_process(capsys, "xmodel", "run", path, "--input", str(tmp_path / "x.npy"), "--dump",
                                   str(tmp_path / "d"))
    files = os.listdir(str(tmp_path / "d"))
    with open(str(tmp_path / "d" / "shape.txt")) as f:
        tensors = len(f.read().splitlines())
    params = [n for n in files if n.startswith(("LayerScaleBack__c_", "LayerScaleBack__g"))]
    codes = [n for n in files if n.endswith("_fix.bin")]
    param_codes = [n for n in params if n.endswith("_fix.bin")]
    assert code == 0 and param_codes and len(params) > len(param_codes)
    assert "dump: %d tensors and %d parameters (float32 .bin; int8 codes _fix.bin of %d tensors and %d parameters)" % (
        tensors, len(params) - len(param_codes), len(codes) - len(param_codes), len(param_codes)) in text, text
    assert len(files) == tensors + len(params) + len(codes) - len(param_codes) + 1  # and shape.txt
