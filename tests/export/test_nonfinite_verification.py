"""NaN and inf in the verification of the exports (pipeline/quantizers/sim/finite.py): a file is never
"verified" on a comparison of NaN with NaN.

The rule: an input holding NaN or inf is refused before anything runs; an output element NaN or inf on
both sides alike is not compared (never agreement), on one side only it differs; a comparison of
nothing finite is refused; elements left out warn. The model divides two channels of its input: the
calibration data keeps the divisor away from 0, the verification inputs put zeros where the test wants
0 / 0 = NaN (the simulation and the files compute it alike).
"""
import os
import warnings

import pytest
import torch

from pipeline.apis import torch_quantizer
from pipeline.errors import ExportError
from pipeline.quantizers.sim.backend import SimBackend
from pipeline.quantizers.sim.export import verify_onnx
from pipeline.quantizers.sim.finite import agreement
from pipeline.xir import reader
from pipeline.quantizers.sim.xmodel import verify
from tests.support.lambda_model import Lambda

NAN, INF = float("nan"), float("inf")


def _sample(zero_row=False):
    x = torch.rand(1, 2, 4, 4, generator=torch.Generator().manual_seed(3)) + 0.5
    if zero_row:
        x[0, :, 0, :2] = 0  # 0 / 0 at two places of the output
    return x


def quantize(tmp_path, first):
    """A test-mode drop-in quantizer of x[:, :1] / x[:, 1:2], calibrated on data in [0.5, 1.5), whose first
    test-mode forward is ``first``."""
    model = Lambda(lambda s, x: x[:, :1] / x[:, 1:2]).eval()
    g = torch.Generator().manual_seed(1)
    example = torch.rand(1, 2, 4, 4, generator=g) + 0.5
    out = str(tmp_path / "q")
    q = torch_quantizer("calib", model, example, output_dir=out)
    for _ in range(2):
        q.quant_model(torch.rand(4, 2, 4, 4, generator=g) + 0.5)
    q.export_quant_config()
    q = torch_quantizer("test", model, example, output_dir=out)
    q.quant_model(first)
    return q


# ---- the rule, element by element --------------------------------------------------------------

@pytest.mark.parametrize("mine,ref,compared,differing", [
    ([NAN, 1.0], [NAN, 1.0], 1, 0),      # NaN and NaN: not compared, never agreement
    ([INF, 1.0], [INF, 1.0], 1, 0),      # the same infinity: not compared
    ([NAN, 1.0], [1.0, 1.0], 2, 1),      # NaN on one side only: differs
    ([NAN, 1.0], [INF, 1.0], 2, 1),      # NaN against inf: differs
    ([INF, 1.0], [-INF, 1.0], 2, 1),     # +inf against -inf: differs
    ([NAN, NAN], [NAN, NAN], 0, 0),      # nothing compared
])
def test_non_finite_elements_never_count_as_agreement(mine, ref, compared, differing):
    for bits in (True, False):
        a = agreement(torch.tensor(mine), torch.tensor(ref), bits=bits)
        assert (a.elements, a.mismatches, a.nonfinite) == (compared, differing, 2 - compared)
        assert a.max_abs_diff == (INF if differing else 0.0)


def test_bits_tell_minus_zero_from_zero_values_do_not():
    assert agreement(torch.tensor([-0.0]), torch.tensor([0.0]), bits=True).mismatches == 1
    assert agreement(torch.tensor([-0.0]), torch.tensor([0.0]), bits=False).mismatches == 0


# ---- the xmodel: its check runs on the first test-mode forward ------------------------------------

@pytest.mark.parametrize("value,counts", [(NAN, "32 NaN and 0 inf"), (INF, "0 NaN and 32 inf")])
def test_a_first_forward_holding_nan_or_inf_is_refused_and_nothing_is_written(tmp_path, value, counts):
    q = quantize(tmp_path, torch.full((1, 2, 4, 4), value))
    with pytest.raises(ExportError, match="the input it is verified on is not finite") as err:
        q.export_xmodel(str(tmp_path / "x"))
    assert "input 0 holds %s of 32 values" % counts in str(err.value)
    assert "quant_model(x[:1]) on a real sample" in str(err.value) and "nothing was written" in str(err.value)
    assert not os.path.exists(str(tmp_path / "x")) or os.listdir(str(tmp_path / "x")) == []


def test_an_xmodel_check_of_nothing_finite_is_refused(tmp_path):
    q = quantize(tmp_path, torch.zeros(1, 2, 4, 4))  # finite, but every output is 0 / 0
    with pytest.raises(ExportError, match="compared nothing finite: all 16 output elements are NaN or inf"):
        q.export_xmodel(str(tmp_path / "x"))
    assert not os.path.exists(str(tmp_path / "x")) or os.listdir(str(tmp_path / "x")) == []


def test_xmodel_elements_nan_in_both_are_not_compared_and_warn(tmp_path):
    q = quantize(tmp_path, _sample(zero_row=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = q.export_xmodel(str(tmp_path / "x"))
    assert any("2 of 16 output elements are NaN or inf in the simulation and in the file alike and were not "
               "compared" in str(w.message) for w in caught)
    report = verify.compare(reader.check(reader.read_xmodel(path)), q._session, q.quant_model,
                            [_sample(zero_row=True)])
    assert (report["elements"], report["nonfinite"], report["mismatches"]) == (14, 2, 0)


# ---- ONNX: checked in ONNX Runtime on the verification batch -----------------------------------

def test_onnx_verification_refuses_a_non_finite_input_and_nothing_finite(tmp_path):
    q = quantize(tmp_path, _sample())
    path = q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)
    bad = _sample()
    bad[0, 1, 2, 3] = NAN
    with pytest.raises(ExportError, match=r"ONNX: the input it is verified on is not finite \(input 0 holds 1 NaN"):
        verify_onnx(q.quant_model, path, bad)
    with pytest.raises(ExportError, match=r"ONNX \(exact flavour\): the verification compared nothing finite"):
        verify_onnx(q.quant_model, path, torch.zeros(2, 2, 4, 4))
    report = verify_onnx(q.quant_model, path, torch.cat([_sample(zero_row=True), torch.zeros(1, 2, 4, 4)]))
    assert (report["elements"], report["nonfinite"], report["mismatches"]) == (14, 18, 0)


def test_the_backend_warns_about_elements_left_out_and_rejects_a_file_checked_on_nothing(tmp_path):
    q = quantize(tmp_path, _sample())
    path = q.export_onnx_model(str(tmp_path / "o"), native_onnx=False)
    files = {"onnx_exact": path}
    reports, notes = SimBackend().verify(q.quant_model, files, lambda: _sample(zero_row=True), {"onnx_exact": 0})
    assert reports["onnx_exact"]["nonfinite"] == 2
    assert notes == ["onnx_exact: 2 of 16 output elements are NaN or inf in the simulation and in the file alike "
                     "and were not compared; the verification covers the other 14. The model computes NaN or inf "
                     "there from finite data (a division by zero, a log or a sqrt)"]
    with pytest.raises(ExportError, match="compared nothing finite"):
        SimBackend().verify(q.quant_model, files, lambda: torch.zeros(1, 2, 4, 4), {"onnx_exact": 0})
    assert os.path.exists(path + ".rejected") and not os.path.exists(path)
