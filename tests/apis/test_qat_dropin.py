"""The drop-in QatProcessor: its methods and files, exact_deploy's trained = deployed on every reference
model, the real behaviour's gap, the official example's two-process shape, and bad input."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline.apis import QatProcessor
from pipeline.errors import QuantizationError
from tests.support.qat_models import build

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _train(qmodel, shape, steps=4, freeze_after=2, seed=0, lr=1e-3):
    opt = torch.optim.Adam([{"params": qmodel.quantizer_parameters(), "lr": 1e-2},
                            {"params": qmodel.non_quantizer_parameters(), "lr": lr}], weight_decay=1e-4)
    g = torch.Generator().manual_seed(seed)
    qmodel.train()
    for k in range(steps):
        x = torch.randn(8, *shape, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        loss = F.cross_entropy(qmodel(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k + 1 == freeze_after:
            qmodel.freeze_bn_stats()
    return qmodel.eval()


@pytest.mark.parametrize("name", ["digits", "resnet", "mobilenet"])
def test_qat_exact_deploy_deployed_outputs_equal_trainable_eval_outputs(name, tmp_path):
    model, shape = build(name)
    qat = QatProcessor(model, torch.randn(1, *shape), exact_deploy=True)
    qmodel = _train(qat.trainable_model(), shape)
    x = torch.randn(32, *shape, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        trained = qmodel(x)
    deployed = qat.to_deployable(qmodel, str(tmp_path))(x)
    assert torch.equal(trained, deployed)
    # and the files say the same: test/ holds the raw positions, the top one what ships
    raw = json.loads((tmp_path / "test" / "quant_info.json").read_text())
    shipped = json.loads((tmp_path / "quant_info.json").read_text())
    assert set(raw["param"]) == set(shipped["param"]) and set(raw["output"]) == set(shipped["output"])
    param, output = qmodel.fix_positions(adjusted=True)
    assert {k: v[0][1] for k, v in shipped["output"].items()} == output
    assert {k: v[0][1] for k, v in shipped["param"].items()} == param


class BigHardswish(nn.Module):
    """Hard-swish straight on an input of magnitude ~300: its threshold gives the input a negative fix
    position, which the DPU constraint pass raises to 0 at export (hard-swish inputs >= 0): the deployed
    model clips what the trained one kept."""

    def __init__(self):
        super().__init__()
        self.hs = nn.Hardswish()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(self.hs(x))


@pytest.mark.parametrize("exact", [False, True])
def test_qat_real_behaviour_deploys_other_numbers_exact_deploy_does_not(exact, tmp_path):
    torch.manual_seed(0)
    model = BigHardswish()
    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(1)) * 300
    qat = QatProcessor(model, x[:1], exact_deploy=exact)
    qmodel = qat.trainable_model()
    qmodel(x)  # warm-up
    qmodel.eval()
    with torch.no_grad():
        trained = qmodel(x)
    deployed = qat.to_deployable(qmodel, str(tmp_path))(x)
    key = "BigHardswish::nndct_input_0"
    raw = json.loads((tmp_path / "test" / "quant_info.json").read_text())["output"][key][0][1]
    shipped = json.loads((tmp_path / "quant_info.json").read_text())["output"][key][0][1]
    assert raw < 0 and shipped == 0  # the constraint pass moved the input's position
    differ = int((trained != deployed).sum())
    assert (differ == 0) if exact else (differ > trained.numel() // 10)


def test_qat_official_example_shape_runs_in_two_processes(tmp_path):
    script = os.path.join(REPO, "tests", "support", "qat_example_script.py")
    env = dict(os.environ, PYTHONPATH=REPO)
    out = str(tmp_path / "qat_result")
    for mode in ("train", "deploy"):
        proc = subprocess.run([sys.executable, script, "--mode", mode, "--output_dir", out], cwd=str(tmp_path),
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["Digits_int.xmodel", "deployable.pth", "deployable_manifest.json", "model.pth",
                                    "quant_info.json", "test"]
    assert os.listdir(str(tmp_path)) == ["qat_result"]  # no .vai_qat in the working directory


def test_qat_calib_dir_starts_from_the_calibration(tmp_path):
    from pipeline.apis import torch_quantizer
    model, shape = build("resnet")
    x = torch.randn(8, *shape, generator=torch.Generator().manual_seed(2))
    cfg = tmp_path / "nocle.json"
    cfg.write_text('{"include_cle": false, "include_bias_corr": false, "target_device": "DPU"}')
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path / "cal"), device=torch.device("cpu"),
                        quant_config_file=str(cfg))
    q.quant_model(x)
    q.export_quant_config()
    info = json.loads((tmp_path / "cal" / "quant_info.json").read_text())
    qmodel = QatProcessor(model, x[:1]).trainable_model(calib_dir=str(tmp_path / "cal"))
    for group, key, quantizer in qmodel.quantizers():
        assert quantizer.own_fix_pos() == info[group][key][0][1]
        assert quantizer.warmup_enabled[0] == 0


def test_qat_calib_dir_without_a_calibration_says_so(tmp_path):
    from pipeline.errors import QuantizationError
    model, shape = build("mobilenet")
    qat = QatProcessor(model, torch.randn(1, *shape))
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("x")
    for where, got in ((tmp_path / "none", "the folder does not exist"), (tmp_path / "afile", "it is not a folder"),
                       (tmp_path / "empty", "the folder holds no quant_info.json")):
        with pytest.raises(QuantizationError) as info:
            qat.trainable_model(calib_dir=str(where))
        assert str(info.value) == (
            "trainable_model(calib_dir=%r): %s. calib_dir must be a folder holding a PTQ calibration's quant_info.json "
            "(torch_quantizer('calib', ..., output_dir=that folder), then export_quant_config()): calibrate this "
            "model there, or pass calib_dir='' to start each quantizer by a warm-up on its first batch"
            % (str(where), got))


def test_qat_trainable_model_helpers_and_state_dict_round_trip():
    model, shape = build("mobilenet")
    qat = QatProcessor(model, torch.randn(1, *shape))
    qmodel = qat.trainable_model()
    n_q, n_w = len(qmodel.quantizer_parameters()), len(qmodel.non_quantizer_parameters())
    assert n_q == sum(1 for _ in qmodel.quantizers()) and n_w > 0
    assert n_q + n_w == len(list(qmodel.parameters()))
    x = torch.randn(4, *shape)
    qmodel.disable_quant()
    float_out = qmodel(x)
    assert all(q.warmup_enabled[0] == 1 for _, _, q in qmodel.quantizers())
    qmodel.enable_quant()
    qmodel(x)
    qmodel.freeze_quant()
    assert not any(p.requires_grad for p in qmodel.quantizer_parameters())
    copy = qat.trainable_model()
    copy.load_state_dict(qmodel.state_dict())
    qmodel.eval(), copy.eval()
    assert torch.equal(qmodel(x), copy(x))
    assert not torch.equal(qmodel(x), float_out)


def test_qat_caller_model_and_inputs_are_never_modified(tmp_path):
    model, shape = build("resnet")
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(8, *shape)
    x0 = x.clone()
    qat = QatProcessor(model, x[:1])
    qmodel = _train(qat.trainable_model(), shape)
    qmodel(x)
    qat.to_deployable(qmodel, str(tmp_path))(x)
    assert torch.equal(x, x0)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert model.training


# ---- bad input -----------------------------------------------------------------------------------------
def test_qat_refuses_dataparallel_and_mix_bit():
    model, shape = build("digits")
    with pytest.raises(QuantizationError, match="wrap the trainable model"):
        QatProcessor(nn.DataParallel(model), torch.randn(1, *shape))
    with pytest.raises(QuantizationError, match="mix_bit"):
        QatProcessor(model, torch.randn(1, *shape), mix_bit=True)


@pytest.mark.cuda
def test_qat_trains_on_cuda_and_deploys_the_same_numbers_on_the_cpu(tmp_path):
    model, shape = build("mobilenet")
    model.cuda()
    qat = QatProcessor(model, torch.randn(1, *shape, device="cuda"), exact_deploy=True)
    qmodel = qat.trainable_model()
    assert next(qmodel.parameters()).is_cuda
    opt = torch.optim.Adam(qmodel.parameters(), lr=1e-3)
    x, y = torch.randn(8, *shape, device="cuda"), torch.randint(0, 10, (8,), device="cuda")
    loss = F.cross_entropy(qmodel(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    qmodel.freeze_bn_stats()
    qmodel.eval()
    deployed = qat.to_deployable(qmodel, str(tmp_path))  # on the CPU
    qmodel.cpu()
    xe = torch.randn(16, *shape)
    with torch.no_grad():
        assert torch.equal(qmodel(xe), deployed(xe))


class Functional(nn.Module):
    """What the real QAT makes users rewrite as modules: ``+``, ``torch.cat``, ``torch.add``, functional ReLU and
    pools, one ReLU module called twice."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)
        self.c = nn.Conv2d(8, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        y = torch.cat([F.relu(self.a(x)), self.relu(self.b(x))], 1)
        z = self.relu(self.c(y)) + F.max_pool2d(y[:, :4], 3, 1, 1)
        z = torch.add(z, F.relu(z))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(z, 1), 1))


def test_qat_takes_ordinary_pytorch_code_and_deploys_it_exactly(tmp_path):
    torch.manual_seed(0)
    qat = QatProcessor(Functional(), torch.randn(1, 3, 8, 8), exact_deploy=True)
    qmodel = _train(qat.trainable_model(), (3, 8, 8), steps=3, freeze_after=0)
    x = torch.randn(8, 3, 8, 8)
    with torch.no_grad():
        assert torch.equal(qmodel(x), qat.to_deployable(qmodel, str(tmp_path))(x))


class ScaledByNumber(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x) * 0.37


def test_qat_refuses_a_quantized_python_number_with_the_rewrite():
    with pytest.raises(QuantizationError, match=r"Python number the quantizer quantizes \(0.37\).*registered buffer"):
        QatProcessor(ScaledByNumber(), torch.randn(1, 3, 8, 8)).trainable_model()


class Reused(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv2(self.relu(self.conv1(x))))


def test_qat_reused_module_needs_the_flag_or_exact_deploy():
    x = torch.randn(1, 3, 8, 8)
    with pytest.raises(QuantizationError, match=r"module 'relu' is called 2 times .*allow_reused_module=True"):
        QatProcessor(Reused(), x).trainable_model()
    shared = QatProcessor(Reused(), x).trainable_model(allow_reused_module=True)
    qs = shared.net.output_quantizers
    assert qs["nndct_relu_2"] is qs["nndct_relu_4"]  # the real quantizer's: one quantizer for both calls
    own = QatProcessor(Reused(), x, exact_deploy=True).trainable_model()
    assert own.net.output_quantizers["nndct_relu_2"] is not own.net.output_quantizers["nndct_relu_4"]


class WithBN1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.fc(x))


def test_qat_refuses_batchnorm1d_with_the_reason():
    with pytest.raises(QuantizationError, match=r"BatchNorm that follows no conv .*#555"):
        QatProcessor(WithBN1d().eval(), torch.randn(2, 6)).trainable_model()


def test_qat_to_deployable_misuse_writes_nothing(tmp_path):
    model, shape = build("digits")
    qat = QatProcessor(model, torch.randn(1, *shape))
    out = tmp_path / "out"
    with pytest.raises(QuantizationError, match=r"call trainable_model\(\) first"):
        qat.to_deployable(None, str(out))
    qmodel = qat.trainable_model()
    other_model, other_shape = build("resnet")
    other = QatProcessor(other_model, torch.randn(1, *other_shape)).trainable_model()
    with pytest.raises(QuantizationError, match=r"the trainable model of another float model \(TinyResNet"):
        qat.to_deployable(other, str(out))
    with pytest.raises(QuantizationError, match=r"expected the model trainable_model\(\) returned"):
        qat.to_deployable(model, str(out))
    qmodel(torch.randn(4, *shape))
    with torch.no_grad():
        qmodel.net.output_quantizers["nndct_relu_4"].log_threshold.fill_(float("nan"))
    with pytest.raises(QuantizationError, match=r"nndct_relu_4.log_threshold holds 1 NaN/Inf"):
        qat.to_deployable(qmodel, str(out))
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))
    fused = qat.trainable_model()
    fused(torch.randn(4, *shape))
    fused.fuse_conv_bn()
    with pytest.raises(QuantizationError, match="fuse_conv_bn"):
        qat.to_deployable(fused, str(out))


def test_qat_untrained_quantizers_warn_as_the_real_one(tmp_path):
    model, shape = build("digits")
    qat = QatProcessor(model, torch.randn(1, *shape))
    qmodel = qat.trainable_model()
    with pytest.warns(UserWarning, match=r"Exported scale values are not trained: Digits::net.conv1.weight"):
        qat.to_deployable(qmodel, str(tmp_path))


def test_qat_deployable_model_needs_its_files_and_this_model(tmp_path):
    model, shape = build("digits")
    qat = QatProcessor(model, torch.randn(1, *shape))
    with pytest.raises(QuantizationError, match="needs deployable.pth and quant_info.json"):
        qat.deployable_model(str(tmp_path))
    with pytest.raises(QuantizationError, match=r"export_xmodel: call deployable_model"):
        qat.export_xmodel(str(tmp_path))
    other, other_shape = build("resnet")
    oq = QatProcessor(other, torch.randn(1, *other_shape))
    m = oq.trainable_model()
    m(torch.randn(2, *other_shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oq.to_deployable(m, str(tmp_path))
    with pytest.raises(QuantizationError, match="was made for another model"):
        qat.deployable_model(str(tmp_path))


def test_qat_export_xmodel_needs_a_batch_1_first_forward(tmp_path):
    from pipeline.errors import ExportError
    model, shape = build("digits")
    qat = QatProcessor(model, torch.randn(1, *shape))
    qmodel = _train(qat.trainable_model(), shape, steps=1)
    qat.to_deployable(qmodel, str(tmp_path))
    dmodel = qat.deployable_model(str(tmp_path), used_for_xmodel=True)
    dmodel(torch.randn(4, *shape))
    with pytest.raises(ExportError, match="had batch size 4"):
        qat.export_xmodel(str(tmp_path))
    assert not (tmp_path / "Digits_int.xmodel").exists()


def test_qat_torch_quantizer_qat_proc_works_end_to_end(tmp_path):
    from pipeline.apis import torch_quantizer
    model, shape = build("digits")
    out = str(tmp_path / "qat")
    q = torch_quantizer("calib", model, torch.randn(1, *shape), output_dir=out, qat_proc=True)
    qmodel = q.quant_model
    assert q.quant_model is qmodel
    _train(qmodel, shape, steps=2)
    assert q.export_quant_config() == os.path.join(out, "quant_info.json")
    # another process would do this: a fresh quantizer reads the files
    q2 = torch_quantizer("test", model, torch.randn(1, *shape), output_dir=out, qat_proc=True)
    q2.deploy_model(torch.randn(1, *shape))
    assert os.path.isfile(q2.export_xmodel(out))
    with pytest.raises(QuantizationError, match="qat_proc=True"):
        q2.fast_finetune(None, None)


def test_qat_a_diverged_threshold_stops_the_forward_naming_it():
    model, shape = build("digits")
    qmodel = QatProcessor(model, torch.randn(1, *shape)).trainable_model()
    x = torch.randn(4, *shape)
    qmodel(x)
    with torch.no_grad():
        qmodel.net.output_quantizers["nndct_relu_2"].log_threshold.fill_(float("inf"))
    with pytest.raises(QuantizationError, match=r"threshold of nndct_relu_2 is inf: the training diverged"):
        qmodel(x)


def test_qat_a_float_model_changed_after_trainable_model_is_refused(tmp_path):
    model, shape = build("digits")
    qat = QatProcessor(model, torch.randn(1, *shape))
    qmodel = qat.trainable_model()
    qmodel(torch.randn(4, *shape))
    model.net.fc = nn.Linear(64, 12)
    with pytest.raises(QuantizationError, match="parameters changed since QatProcessor was made"):
        qat.to_deployable(qmodel, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_qat_export_xmodel_deploy_check_writes_the_dumps(tmp_path):
    model, shape = build("digits")
    qat = QatProcessor(model, torch.randn(1, *shape), exact_deploy=True)
    qmodel = _train(qat.trainable_model(), shape, steps=2)
    qat.to_deployable(qmodel, str(tmp_path))
    x = torch.randn(1, *shape)
    dmodel = qat.deployable_model(str(tmp_path), used_for_xmodel=True)
    dmodel(x)
    qat.export_xmodel(str(tmp_path), deploy_check=True)
    folder = tmp_path / "deploy_check_data_int" / "Digits"
    assert (folder / "shape.txt").is_file()
    fixed = sorted(p.name for p in folder.iterdir() if p.name.endswith("_fix.bin"))
    assert fixed and any("Linear_fc" in n for n in fixed)
    # the output's codes are the trained model's output on the grid of the shipped fix position
    info = json.loads((tmp_path / "quant_info.json").read_text())
    fp = info["output"]["Digits::nndct_dense_10"][0][1]
    codes = np.fromfile(str(folder / [n for n in fixed if "Linear_fc" in n][0]), dtype=np.int8)
    qmodel.eval()
    with torch.no_grad():
        expected = (qmodel(x) * 2.0 ** fp).round().numpy().astype(np.int8).ravel()
    assert codes.tolist() == expected.tolist()


def test_qat_deployable_folder_mixing_two_runs_is_refused(tmp_path):
    model, shape = build("digits")
    qat = QatProcessor(model, torch.randn(1, *shape))
    runs = []
    for seed in (0, 1):
        out = tmp_path / str(seed)
        qat.to_deployable(_train(qat.trainable_model(), shape, steps=2, seed=seed), str(out))
        runs.append(out)
    (runs[0] / "deployable.pth").write_bytes((runs[1] / "deployable.pth").read_bytes())
    with pytest.raises(QuantizationError, match=r"deployable.pth is not the file to_deployable wrote with the others"):
        qat.deployable_model(str(runs[0]))
    (runs[0] / "deployable_manifest.json").unlink()  # as the real quantizer writes the folder: taken as it is
    qat.deployable_model(str(runs[0]))


def test_qat_calib_dir_of_another_bit_width_is_refused(tmp_path):
    from pipeline.apis import torch_quantizer
    model, shape = build("digits")
    x = torch.randn(8, *shape)
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path), device=torch.device("cpu"))
    q.quant_model(x)
    q.export_quant_config()
    with pytest.raises(QuantizationError, match=r"another bit width .*8\) than this model trains \(4 bits\)"):
        QatProcessor(model, x[:1], bitwidth=4).trainable_model(calib_dir=str(tmp_path))
    with pytest.warns(UserWarning, match="calibrated with bias correction"):
        QatProcessor(model, x[:1]).trainable_model(calib_dir=str(tmp_path))


def test_qat_nan_in_the_warm_up_batch_is_named():
    model, shape = build("digits")
    qmodel = QatProcessor(model, torch.randn(1, *shape)).trainable_model()
    x = torch.randn(4, *shape)
    x[0, 0, 0, 0] = float("nan")
    with pytest.raises(QuantizationError, match=r"warm-up batch of nndct_input_0 holds 1 NaN/Inf"):
        qmodel(x)
