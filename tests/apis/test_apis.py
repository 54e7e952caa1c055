"""The drop-in torch_quantizer: its signature, modes, files, checks and exports."""
import json
import logging
import os

import pytest
import torch
from torch import nn

from pipeline.apis import dump_xmodel, torch_quantizer
from pipeline.errors import BackendUnavailableError, ConfigError, ExportError, QuantizationError
from pipeline.xir import reader
from pipeline.safeload import safe_torch_load

from tests.support.small_net import calibrate_with_api, small_batches, small_net


def test_caller_model_and_inputs_are_never_modified(tmp_path):
    model = small_net()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batches = small_batches()
    copies = [b.clone() for b in batches]
    versions = [b._version for b in batches]
    calibrate_with_api(tmp_path, model, batches=batches)
    q = torch_quantizer("test", model, (batches[0],), output_dir=str(tmp_path), device="cpu")
    q.quant_model(batches[1])
    # the real quantizer rounds its input in place and swaps ReLU6 for ReLU in the caller's model
    assert all(torch.equal(a, b) for a, b in zip(batches, copies))
    assert [b._version for b in batches] == versions
    assert isinstance(model.act, nn.ReLU6) and model.leaky.negative_slope == 0.1
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_calib_then_test_in_one_process_equals_fresh_quantizer(tmp_path):
    calibrate_with_api(tmp_path)
    x = small_batches(1, seed=7)[0]
    first = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu").quant_model(x)
    second = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu").quant_model(x)
    assert torch.equal(first, second)


def test_files_written_and_format(tmp_path):
    q, path = calibrate_with_api(tmp_path)
    assert path == os.path.join(str(tmp_path), "quant_info.json")
    info = json.load(open(path))
    assert info["bias_corrected"] is True and info["input"] == {}
    assert "SmallNet::conv.bias" in info["param"]  # BN folding creates the bias (docs/quantizer.md#the-quant_info-format)
    assert "SmallNet::nndct_hswish_5" not in info["output"]  # quantized by the concat
    assert "SmallNet::nndct_concat_6" in info["output"]
    table = safe_torch_load(os.path.join(str(tmp_path), "bias_corr.pth"))
    assert sorted(table) == ["SmallNet::nndct_conv2d_1", "SmallNet::nndct_dense_9",
                             "SmallNet::nndct_depthwise_conv2d_3"]
    assert all(isinstance(v, list) for v in table.values())


def test_quant_mode_rules():
    x = small_batches(1)[0]
    with pytest.warns(UserWarning, match="Change it to 'calib'"):
        q = torch_quantizer("float", small_net(), (x,), device="cpu", output_dir="unused_dir_for_test")
    assert q.quant_mode == "calib"
    with pytest.warns(UserWarning, match="deprecated"):
        assert torch_quantizer(1, small_net(), (x,), device="cpu", output_dir="unused_dir_for_test").quant_mode == "calib"
    os.rmdir("unused_dir_for_test")


def test_export_quant_config_without_forward_only_logs(tmp_path, caplog):
    q = torch_quantizer("calib", small_net(), (small_batches(1)[0],), output_dir=str(tmp_path), device="cpu")
    with caplog.at_level(logging.ERROR):
        assert q.export_quant_config() is None
    assert "FORWARD" in caplog.text and os.listdir(str(tmp_path)) == []


def test_test_mode_missing_files_raise(tmp_path):
    x = small_batches(1)[0]
    with pytest.raises(QuantizationError, match="quant_info.json"):
        torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    calibrate_with_api(tmp_path)
    os.remove(os.path.join(str(tmp_path), "bias_corr.pth"))
    with pytest.raises(QuantizationError, match="bias_corr.pth"):
        torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")


def test_quant_info_of_another_model_is_rejected(tmp_path):
    calibrate_with_api(tmp_path)
    other = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    with pytest.raises(QuantizationError, match="does not match this model"):
        torch_quantizer("test", other, (small_batches(1)[0],), output_dir=str(tmp_path), device="cpu")
    # without the fingerprint (a folder written by the real quantizer) the same
    for name in ("calib_manifest.json", "calib_fingerprint.json"):
        os.remove(str(tmp_path / name))
    with pytest.raises(QuantizationError, match="does not match this model"):
        torch_quantizer("test", other, (small_batches(1)[0],), output_dir=str(tmp_path), device="cpu")


def test_device_kwargs_and_config_handling(tmp_path):
    x = small_batches(1)[0]
    if not torch.cuda.is_available():
        with pytest.warns(UserWarning, match=r"CUDA \(HIP\) is not available, change device to CPU"):
            torch_quantizer("calib", small_net(), (x,), output_dir=str(tmp_path))
    with pytest.raises(TypeError, match="nonsense"):
        torch_quantizer("calib", small_net(), (x,), output_dir=str(tmp_path), device="cpu", nonsense=1)
    with pytest.warns(UserWarning, match="mix_bit"):
        torch_quantizer("calib", small_net(), (x,), output_dir=str(tmp_path), device="cpu", mix_bit=True)
    bad = tmp_path / "bad.json"
    bad.write_text('{"include_cle": false}')
    with pytest.raises(ConfigError, match="target_device"):
        torch_quantizer("calib", small_net(), (x,), output_dir=str(tmp_path), device="cpu", quant_config_file=str(bad))
    gpu = tmp_path / "gpu.json"
    gpu.write_text('{"target_device": "GPU"}')
    with pytest.raises(QuantizationError, match="DPU only"):
        torch_quantizer("calib", small_net(), (x,), output_dir=str(tmp_path), device="cpu", quant_config_file=str(gpu))


def test_target_is_checked_against_the_registry(tmp_path):
    x = small_batches(1)[0]

    def make(target, config=None):
        return torch_quantizer("calib", small_net(), (x,), output_dir=str(tmp_path), device="cpu",
                               target=target, quant_config_file=config)

    with pytest.raises(ConfigError, match=r"'DPUCZDX8G_ISA1_B4069'.*closest: DPUCZDX8G_ISA1_B4096"):
        make("DPUCZDX8G_ISA1_B4069")
    with pytest.raises(ConfigError, match="of Vitis AI 3.x"):
        make("DPUCZDX8G_ISA0_B4096_MAX_BG2")  # ISA0 names expired in 3.x (docs/targets.md#expired-names)
    with pytest.raises(ConfigError, match="not the fingerprint"):
        make("0x0101000056010499")
    with pytest.raises(ConfigError, match="a str"):
        make(4096)
    with pytest.warns(UserWarning, match=r"does not do hardware-aware quantization.*default DPU flow"):
        q = make("DPUCZDX8G_ISA1_B4096")
    assert q.target == "DPUCZDX8G_ISA1_B4096"
    with pytest.warns(UserWarning, match="does not do hardware-aware"):
        make("0x0101000056010407")  # B4096's fingerprint (docs/targets.md#names-and-fingerprints)
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"target_device": "DPU"}')
    with pytest.warns(UserWarning, match="hardware-aware mode is off"):
        make("DPUCV2DX8G_ISA1_C20B14", str(cfg))
    with pytest.raises(ConfigError, match="closest"):
        make("DPUCV2DX8G_ISA1_C20B41", str(cfg))
    # the fix positions are the default flow's: a target changes nothing in quant_info.json
    batches = small_batches()
    with pytest.warns(UserWarning, match="hardware-aware"):
        q = torch_quantizer("calib", small_net(), (batches[0],), output_dir=str(tmp_path / "t"), device="cpu",
                            target="DPUCZDX8G_ISA1_B4096")
    for b in batches:
        q.quant_model(b)
    q.export_quant_config()
    calibrate_with_api(tmp_path / "plain", batches=batches)
    assert open(str(tmp_path / "t" / "quant_info.json")).read() == \
        open(str(tmp_path / "plain" / "quant_info.json")).read()


def test_state_dict_file_is_loaded_into_a_copy(tmp_path):
    trained, fresh = small_net(0), small_net(5)
    path = str(tmp_path / "w.pt")
    torch.save(trained.state_dict(), path)
    before = fresh.conv.weight.clone()
    a = tmp_path / "a"
    b = tmp_path / "b"
    calibrate_with_api(a, trained)
    batches = small_batches()
    q = torch_quantizer("calib", fresh, (batches[0],), state_dict_file=path, output_dir=str(b), device="cpu")
    for x in batches:
        q.quant_model(x)
    q.export_quant_config()
    assert torch.equal(fresh.conv.weight, before)
    assert open(str(a / "quant_info.json")).read() == open(str(b / "quant_info.json")).read()


def test_export_onnx_model(tmp_path):
    calibrate_with_api(tmp_path)
    x = small_batches(1)[0]
    q = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match="export_onnx_model: run at least one forward"):
        q.export_onnx_model(output_dir=str(tmp_path))  # nndct logs and returns None; here it raises
    q.quant_model(x)
    path = q.export_onnx_model(output_dir=str(tmp_path))
    assert path == os.path.join(str(tmp_path), "SmallNet_int.onnx") and os.path.isfile(path)


def test_export_xmodel_follows_the_first_forward_batch_rule_and_writes_the_file(tmp_path):
    calib, _ = calibrate_with_api(tmp_path)
    with pytest.raises(QuantizationError, match="needs test mode"):
        calib.export_xmodel(output_dir=str(tmp_path), deploy_check=False, dynamic_batch=False)
    x = small_batches(1)[0]
    q = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match="at least one forward"):
        q.export_xmodel(output_dir=str(tmp_path))
    q.quant_model(x)  # batch 4 first: the real quantizer would write a batch-4 xmodel
    q.quant_model(x[:1])  # a later batch-1 forward does not change that
    with pytest.raises(ExportError, match="first forward of quant_model in test mode had batch size 4.*nothing"):
        q.export_xmodel(output_dir=str(tmp_path / "x4"), deploy_check=False, dynamic_batch=False)
    assert not os.path.exists(str(tmp_path / "x4"))
    q = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    q.quant_model(x[1:2])  # batch 1 first, then anything
    q.quant_model(x)
    path = q.export_xmodel(output_dir=str(tmp_path / "x1"))
    assert path == str(tmp_path / "x1" / "SmallNet_int.xmodel") and os.listdir(str(tmp_path / "x1")) == ["SmallNet_int.xmodel"]
    graph = reader.check(reader.read_xmodel(path))
    data = [op for op in graph.ops if op.type == "data"]
    assert [op.shape for op in data] == [[1, 8, 8, 3]]  # batch 1, NHWC
    dump_xmodel(str(tmp_path / "dump"), deploy_check=True)  # the quantizer that ran last, with the check data
    assert sorted(os.listdir(str(tmp_path / "dump"))) == ["SmallNet_int.xmodel", "deploy_check_data_int"]
    with open(path, "rb") as a, open(str(tmp_path / "dump" / "SmallNet_int.xmodel"), "rb") as b:
        assert a.read() == b.read()


def _bits(t):
    return t.contiguous().view(torch.int32)


@pytest.mark.filterwarnings("ignore:.*torch.jit:DeprecationWarning")
def test_export_torch_script_refuses_an_example_holding_nan(tmp_path):
    """The bit-for-bit check of the trace would pass NaN against NaN: a NaN example is refused."""
    from pipeline.errors import ExportError
    calibrate_with_api(tmp_path)
    x = small_batches(1)[0].clone()
    x[0, 0, 0, 0] = float("nan")
    q = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    q.quant_model(x[1:])
    with pytest.raises(ExportError, match="export_torch_script") as err:
        q.export_torch_script(output_dir=str(tmp_path / "ts"))
    assert "nothing was written" in str(err.value)
    assert not (tmp_path / "ts").exists() or os.listdir(str(tmp_path / "ts")) == []


@pytest.mark.filterwarnings("ignore:.*torch.jit:DeprecationWarning")
def test_export_torch_script_is_bit_exact_after_reload(tmp_path):
    calibrate_with_api(tmp_path)
    x = small_batches(1)[0]
    q = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    out = tmp_path / "ts"
    with pytest.raises(QuantizationError, match="at least one forward"):
        q.export_torch_script(output_dir=str(out))
    q.quant_model(x)  # batch 4: the trace still uses the batch-1 example
    script = q.export_torch_script(output_dir=str(out), verbose=False)
    assert isinstance(script, torch.jit.ScriptModule)
    assert os.listdir(str(out)) == ["SmallNet_int.pt"]  # nothing else (no temporary file) left
    loaded = torch.jit.load(str(out / "SmallNet_int.pt"))
    # inputs on half-LSB ties of the input fix position: half_up sends them up, half-even would not
    p_in = q.quant_model.quant_info["output"]["SmallNet::nndct_input_0"][0][1]
    codes = torch.randint(-128, 127, (6, 3, 8, 8), generator=torch.Generator().manual_seed(3))
    ties = (codes.float() + 0.5) * 2.0 ** -p_in
    for batch in (ties, small_batches(1, seed=11)[0], x[:1]):
        expect = q.quant_model(batch)
        for _ in range(3):  # the JIT's profiling executor optimizes after the first runs
            assert torch.equal(_bits(loaded(batch)), _bits(expect))
            assert torch.equal(_bits(script(batch)), _bits(expect))


class _TwoInputs(nn.Module):
    def forward(self, x, y):
        return x + y


def test_inputs_must_be_float32_nchw_tensors(tmp_path):
    x = small_batches(1)[0]
    expect = r"expected a float32 torch.Tensor \(N, C, H, W\), got "
    with pytest.raises(QuantizationError, match=expect + r"numpy.ndarray of shape \(4, 3, 8, 8\).*torch.from_numpy"):
        torch_quantizer("calib", small_net(), (x.numpy(),), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match=r"input_args\[1\]: " + expect + "numpy.ndarray"):
        torch_quantizer("calib", _TwoInputs(), (x, x.numpy()), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match=r"takes 1 inputs \(x\), got 2 example tensors"):
        torch_quantizer("calib", small_net(), (x, x), output_dir=str(tmp_path), device="cpu")
    q = torch_quantizer("calib", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match=r"calibration forward 1\): " + expect + "numpy.ndarray"):
        q.quant_model(x.numpy())
    with pytest.raises(QuantizationError, match=r"calibration forward 1\): " + expect + "a 3-D"):
        q.quant_model(x[0])
    with pytest.raises(QuantizationError, match=r"calibration forward 1\): the model takes 1 input tensors"):
        q.quant_model(x, x)
    assert q.export_quant_config() is None  # the refused forwards calibrated nothing
    calibrate_with_api(tmp_path)
    t = torch_quantizer("test", small_net(), (x,), output_dir=str(tmp_path), device="cpu")
    for bad, match in ((x.numpy(), "numpy.ndarray"), (x[0], "a 3-D"), (x.double(), r"a 4-D torch.float64.*\.float\(\)")):
        with pytest.raises(QuantizationError, match=r"quant_model input: " + expect + match):
            t.quant_model(bad)
    with pytest.raises(QuantizationError, match="at least one forward"):  # refused forwards do not count
        t.export_torch_script(output_dir=str(tmp_path / "ts"))


def test_non_finite_calibration_batch_is_skipped_with_a_warning(tmp_path):
    b0, b1, b2 = small_batches(3)
    bad = b1.clone()
    bad[0, 0, 0, 0], bad[2, 1, 3, 3], bad[3, 2, 5, 5] = float("nan"), float("inf"), -float("inf")
    no_corr = tmp_path / "no_corr.json"
    no_corr.write_text('{"include_bias_corr": false, "target_device": "DPU"}')
    with pytest.warns(UserWarning, match=r"calibration forward 2: the input holds 3 non-finite values "
                                         r"\(NaN/Inf\) of 768.*nan_to_num"):
        calibrate_with_api(tmp_path / "with", config=str(no_corr), batches=[b0, bad, b2])
    calibrate_with_api(tmp_path / "without", config=str(no_corr), batches=[b0, b2])
    # the skipped batch left no trace in the fix positions, as in nndct
    assert open(str(tmp_path / "with" / "quant_info.json")).read() == \
        open(str(tmp_path / "without" / "quant_info.json")).read()
    # with bias correction on, the NaN error ends the correction (nndct's eval_qnoise): b2 changes nothing
    with pytest.warns(UserWarning, match="calibration forward 2"):
        calibrate_with_api(tmp_path / "corr3", batches=[b0, bad, b2])
        calibrate_with_api(tmp_path / "corr2", batches=[b0, bad])
    tables = [safe_torch_load(str(tmp_path / d / "bias_corr.pth")) for d in ("corr3", "corr2")]
    assert tables[0] == tables[1]


def test_calibration_batch_must_be_float32(tmp_path):
    q = torch_quantizer("calib", small_net(), (small_batches(1)[0],), output_dir=str(tmp_path), device="cpu")
    with pytest.raises(QuantizationError, match="float32"):
        q.quant_model(small_batches(1)[0].double())
