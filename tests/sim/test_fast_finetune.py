"""Fast finetune (AdaQuant) against the real quantizer's files (tests/data/golden_ft), through the drop-in
API and the runner, and its bad inputs.

Acceptance (the golden README's levels): the real quantizer itself changes a few weight codes between
AVX2 and AVX-512 and between 1 and 2 threads, so everywhere: the same fix positions, at most 0.1 % of
the parameter codes off by one, outputs within 1 LSB; on an AVX-512 CPU with torch 2.13.0 at one thread
(the golden files' setting): every code, output and per-layer iteration count equal.
"""
import json
import os

import numpy as np
import pytest
import torch
from torch import nn

from tests.support import DATA, SUPPORT, make_case, python
from pipeline.apis import torch_quantizer
from pipeline.cpu import cpu_capability
from pipeline.errors import ConfigError, QuantizationError

GOLD = os.path.join(DATA, "golden_ft")
SCRIPT = os.path.join(SUPPORT, "ft_dropin_script.py")
EXACT = cpu_capability() == "AVX512" and torch.__version__.startswith("2.13.0")


def _codes(t, fix_pos):
    return torch.round(t.double() * 2.0 ** fix_pos).long()


def _compare(out, cfg, ftset):
    """Compare ``out`` (a calibration folder with test outputs) with the golden case; returns the
    number of parameter codes that differ."""
    ref = os.path.join(GOLD, "mobile", cfg, ftset)
    info, gold = (json.load(open(os.path.join(d, "quant_info.json"))) for d in (out, ref))
    assert info["fast_finetuned"] is True and gold["fast_finetuned"] is True
    assert info["param"] == gold["param"] and info["output"] == gold["output"]  # every fix position
    names = json.load(open(os.path.join(ref, "param_names.json")))
    mine = torch.load(os.path.join(out, "param.pth"))
    theirs = torch.load(os.path.join(ref, "param.pt"))
    assert list(mine) == list(theirs)  # nndct's module_<i>.weight / .bias keys, in its order
    differ, total = 0, 0
    for key, value in theirs.items():
        fp = names[key]["fix_pos"]
        a, b = _codes(mine[key], fp), _codes(value, fp)
        assert torch.equal(mine[key], a.float() * 2.0 ** -fp)  # on the grid
        assert int((a - b).abs().max()) <= 1, key
        differ += int((a != b).sum())
        total += value.numel()
    assert differ <= total // 1000, (differ, total)
    lsb = 2.0 ** -gold["output"]["MobileNet::nndct_dense_26"][0][1]
    for name in ("test_outputs.npy", "test_calib_outputs.npy"):
        got, want = np.load(os.path.join(out, name)), np.load(os.path.join(ref, name))
        assert np.abs(got - want).max() <= lsb, name
        if EXACT:
            assert np.array_equal(got, want), name
    if EXACT:
        assert differ == 0
    return differ


@pytest.mark.parametrize("cfg", ["default", "nocle"])
def test_fast_finetune_small_is_the_real_no_op_in_a_two_process_dropin_script(cfg, tmp_path):
    """The official script shape, unchanged but for the import, in two processes: on the 32 calibration
    images every layer stops after two passes with no code changed, so the outputs equal plain
    calibration's bit for bit (golden README section 4), on any machine."""
    out = str(tmp_path / "q")
    for phase in ("calib", "test"):
        r = python(SCRIPT, phase, cfg, "small", out)
        assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(f for f in os.listdir(out) if not f.endswith(".json") or f == "quant_info.json") == sorted(
        ["param.pth", "quant_info.json", "test_outputs.npy", "test_calib_outputs.npy"]
        + (["bias_corr.pth"] if cfg == "default" else []))
    assert _compare(out, cfg, "small") == 0
    for name in ("test_outputs.npy", "test_calib_outputs.npy"):  # the no-op: plain calibration's outputs
        assert np.array_equal(np.load(os.path.join(out, name)),
                              np.load(os.path.join(GOLD, "mobile", cfg, "none", name)))


@pytest.mark.slow
@pytest.mark.parametrize("cfg", ["default", "nocle"])
def test_fast_finetune_big_matches_the_real_quantizer(cfg, tmp_path):
    """256 finetune images: hundreds of codes change (438 default, 354 nocle in the real run). The
    script's phases run in this process (the small test runs them as two processes), so the
    finetune's per-layer record can be compared with the real run's trace."""
    from tests.support import ft_dropin_script
    threads = torch.get_num_threads()
    try:
        q = ft_dropin_script.main("calib", cfg, "big", str(tmp_path / "q"))
        ft_dropin_script.main("test", cfg, "big", str(tmp_path / "q"))
    finally:
        torch.set_num_threads(threads)
    _compare(str(tmp_path / "q"), cfg, "big")
    gold = json.load(open(os.path.join(GOLD, "mobile", cfg, "big", "run.json")))["trace"]["layers"]
    mine = q._finetune["layers"]
    assert len(mine) == len(gold) == 13
    changed = sum(l["weight_changed"] + l["bias_changed"] for l in mine)
    assert abs(changed - sum(l["weight_changed"] + l["bias_changed"] for l in gold)) <= 25
    if EXACT:
        for m, g in zip(mine, gold):
            assert (m["passes"], m["weight_changed"], m["bias_changed"]) == (g["n_evals"], g["weight_changed"],
                                                                           g["bias_changed"]), m["node"]
            assert np.allclose(m["evals"], g["evals"], rtol=1e-5, atol=0), m["node"]


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.relu(self.bn(self.conv(x)))), 1))


def _tiny():
    torch.manual_seed(0)
    m = _Tiny().eval()
    with torch.no_grad():
        m.conv.weight[0, 0, 0, 0] = 3.0  # an outlier: the weights quantize coarsely, lr 10x larger
        m.bn.running_mean.uniform_(-0.2, 0.2)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


def _batches(n, shape=(3, 8, 8), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((4,) + shape, generator=g) for _ in range(n)]


def _finetuned(tmp_path, batches, **kw):
    out = str(tmp_path / "q")
    model, data = _tiny(), list(batches)
    q = torch_quantizer("calib", model, (data[0],), output_dir=out, device=torch.device("cpu"), **kw)
    qm = q.quant_model

    def run(m, xs):
        for x in xs:
            m(x)

    q.fast_finetune(run, (qm, data))
    run(qm, data)
    q.export_quant_config()
    return model, out, q


def test_fast_finetune_dropin_files_and_test_mode_use_param_pth(tmp_path):
    model, out, q = _finetuned(tmp_path, _batches(6))
    info = json.load(open(os.path.join(out, "quant_info.json")))
    assert info["fast_finetuned"] is True
    state = torch.load(os.path.join(out, "param.pth"))
    assert list(state) == ["module_1.weight", "module_1.bias", "module_5.weight", "module_5.bias"]
    layers = q._finetune["layers"]
    assert [l["node"] for l in layers] == ["nndct_conv2d_1", "nndct_dense_5"]
    assert q._finetune["codes_changed"] > 0  # the outlier layer's large lr moves codes
    t = torch_quantizer("test", model, (_batches(1)[0],), output_dir=out, device=torch.device("cpu"))
    tm = t.quant_model
    t.load_ft_param()
    bare = torch_quantizer("test", model, (_batches(1)[0],), output_dir=out, device=torch.device("cpu"))
    with pytest.warns(UserWarning, match="load_ft_param\\(\\) was not called"):
        bare.quant_model(_batches(1)[0])
    for layer in layers:
        key = "module_%s" % layer["node"].rsplit("_", 1)[1]
        tuned, plain = tm.get_submodule(layer["node"]), bare.quant_model.get_submodule(layer["node"])
        assert torch.equal(tuned.weight, state[key + ".weight"])  # the finetuned codes (already on their grid)
        # without load_ft_param: the float model's codes (as nndct), which differ where the finetune moved codes
        assert torch.equal(plain.weight, tuned.weight) is (layer["weight_changed"] == 0)
        assert torch.equal(plain.bias, tuned.bias) is (layer["bias_changed"] == 0)


def test_fast_finetune_spilled_caches_give_the_same_parameters(tmp_path):
    """Memory does not grow with the finetune set: past the budget the kept batches and each
    layer's cache go to files, and the result is bit-identical to the in-memory run."""
    from pipeline.quantizers.quant_config import load_quant_config
    from pipeline.quantizers.sim.finetune import FastFinetune, FinetuneOptions
    from pipeline.quantizers.sim.session import SimSession
    results = []
    for memory_mb, spill in ((64, None), (0, str(tmp_path / "spill"))):
        session = SimSession(_tiny(), _batches(1)[0], load_quant_config(None, None))
        ft = FastFinetune(session, FinetuneOptions(memory_mb=memory_mb, spill_dir=spill))
        for b in _batches(5):
            ft.record(b)
            ft.calibrate(b)
        results.append({k: (w.clone(), b.clone()) for k, (w, b) in ft.finetune().items()})
        if spill:
            assert ft.inputs.on_disk > 0 and ft.inputs.in_memory == 0
            ft.close()
            assert os.listdir(spill) == []  # the spill folder is removed
    assert all(torch.equal(results[0][k][i], results[1][k][i]) for k in results[0] for i in (0, 1))


def test_fast_finetune_bad_input_raises_clear_errors(tmp_path):
    model = _tiny()
    x = _batches(1)[0]
    q = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path / "a"), device=torch.device("cpu"))
    one = _batches(1)
    with pytest.raises(QuantizationError, match="at least 2 batches of finetune data, got 1"):
        q.fast_finetune(lambda m, xs: [m(b) for b in xs], (q.quant_model, one))
    other = _batches(2) + _batches(1, shape=(3, 10, 10))
    with pytest.raises(QuantizationError, match=r"batch 3 of run_fn's data has per-sample shape \[3, 10, 10\], "
                                                r"input_args has \[3, 8, 8\]"):
        q.fast_finetune(lambda m, xs: [m(b) for b in xs], (q.quant_model, other))
    flips = iter([3, 2])
    with pytest.raises(QuantizationError, match="gave 3 batches when its inputs were kept and 2 when it was calibrated"):
        q.fast_finetune(lambda m: [m(b) for b in _batches(next(flips))], (q.quant_model,))
    # export_quant_config straight after fast_finetune: nndct logs and writes nothing; the log says why
    q2 = torch_quantizer("calib", model, (x,), output_dir=str(tmp_path / "b"), device=torch.device("cpu"))
    q2.fast_finetune(lambda m, xs: [m(b) for b in xs], (q2.quant_model, _batches(2)))
    import logging
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("pipeline.apis").addHandler(handler)
    try:
        assert q2.export_quant_config() is None
    finally:
        logging.getLogger("pipeline.apis").removeHandler(handler)
    assert any("after fast_finetune(), run the calibration forwards again" in r.getMessage() for r in records)
    assert not os.path.exists(str(tmp_path / "b" / "quant_info.json"))
    # nothing half-done: the quantizer still calibrates and exports normally
    q.quant_model(x)
    q.export_quant_config()
    assert not os.path.exists(str(tmp_path / "a" / "param.pth"))
    t = torch_quantizer("test", model, (x,), output_dir=str(tmp_path / "a"), device=torch.device("cpu"))
    with pytest.raises(QuantizationError, match="fast_finetune needs calib mode"):
        t.fast_finetune(lambda: None, ())
    with pytest.raises(QuantizationError, match="not from a fast-finetuned calibration"):
        t.load_ft_param()
    # param.pth is committed with the calibration: an edited one is refused as a mix ...
    _, out, _ = _finetuned(tmp_path, _batches(3))
    state = torch.load(os.path.join(out, "param.pth"))
    state["module_1.weight"] = state["module_1.weight"][:4]
    torch.save(state, os.path.join(out, "param.pth"))
    with pytest.raises(QuantizationError, match=r"param.pth is not the file the calibration wrote"):
        torch_quantizer("test", _tiny(), (x,), output_dir=out, device=torch.device("cpu"))
    # ... and in a folder without a manifest (the real quantizer's), one made for another model is named
    os.remove(os.path.join(out, "calib_manifest.json"))
    with pytest.raises(QuantizationError, match=r"param.pth has no module_1.weight tensor of shape \[8, 3, 3, 3\]"):
        torch_quantizer("test", _tiny(), (x,), output_dir=out, device=torch.device("cpu")).load_ft_param()


def test_fast_finetune_in_the_runner_end_to_end_on_digits(tmp_path):
    """The runner's calib step finetunes on the configured split (through the stages and the boundary,
    one copy per batch in its own ledger), writes param.pth, and test and export use it."""
    cfg, _ = make_case(tmp_path, data={"batch_size": 10},
                       quantizer={"max_accuracy_drop": 1.0,
                                  "fast_finetune": {"enabled": True, "method": "adaquant_plus", "passes": 5}})
    r = python("scripts/run_pipeline.py", cfg, "--steps", "train,calib,test,export")
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "run"
    calib = json.load(open(str(run / "steps" / "calib.json")))
    ft = calib["fast_finetune"]
    assert ft["method"] == "adaquant_plus" and ft["batches"] == 4  # 40 calib images in batches of 10
    assert all(l["passes"] <= 5 for l in ft["layers"])
    assert ft["ledger"]["copies_per_batch"] == 1 and calib["ledger"]["copies_per_batch"] == 1
    assert set(ft["candidates"]) == {"adaquant_plus", "plain"}  # the result, and what plain calibration gives
    assert [l["node"] for l in ft["layers"]][-1].startswith("nndct_dense")
    info = json.load(open(str(run / "quantize_result" / "quant_info.json")))
    assert info["fast_finetuned"] is True and os.path.isfile(str(run / "quantize_result" / "param.pth"))
    manifest = json.load(open(str(run / "quantize_result" / "calib_manifest.json")))
    assert "param.pth" in json.dumps(manifest)  # committed with the calibration
    assert not os.path.exists(str(run / ".finetune-spill"))
    report = (run / "report.md").read_text()
    assert "## Fast finetune" in report and "| plain" in report and "| nndct_dense_" in report
    assert os.path.isfile(str(run / "export" / "DigitsCNN_int.xmodel"))


def test_fast_finetune_exports_carry_the_finetuned_weights(tmp_path):
    """The test handle and the xmodel use param.pth: a code changed there shows in both."""
    from pipeline.quantizers.base import QuantSettings
    from pipeline.quantizers.sim.backend import SimBackend
    from pipeline.xir import reader
    model, out, _ = _finetuned(tmp_path, _batches(3))
    state = torch.load(os.path.join(out, "param.pth"))
    info = json.load(open(os.path.join(out, "quant_info.json")))
    fp = info["param"]["_Tiny::conv.weight"][0][1]
    state["module_1.weight"][0, 0, 0, 0] += 2.0 ** -fp  # one code up
    torch.save(state, os.path.join(out, "param.pth"))
    backend = SimBackend()
    handle = backend.load_test(model, _batches(1)[0], out, QuantSettings())
    w = handle.get_submodule("nndct_conv2d_1").weight
    assert torch.equal(w, state["module_1.weight"])
    files = backend.export(handle, _batches(1)[0], str(tmp_path / "x"), ["xmodel"])
    graph = reader.check(reader.read_xmodel(files["xmodel"]))
    consts = [op for op in graph.ops if op.type == "const" and int(np.prod(op.shape)) == w.numel()]
    assert any(np.array_equal(np.sort(op.data().ravel()), np.sort(w.numpy().ravel())) for op in consts)


def test_fast_finetune_memory_budget_keeps_the_calibration_valid(tmp_path):
    """memory_mb moves caches between memory and files (same result): not part of the calibration's settings."""
    from pipeline.config import load_config
    settings = []
    for memory_mb in (1024, 16):
        cfg, _ = make_case(tmp_path, quantizer={"fast_finetune": {"enabled": True, "memory_mb": memory_mb}})
        settings.append(load_config(cfg).calib_settings())
    assert settings[0] == settings[1]
    cfg, _ = make_case(tmp_path, quantizer={"fast_finetune": {"enabled": True, "passes": 7}})
    assert load_config(cfg).calib_settings() != settings[0]


def test_fast_finetune_config_is_checked(tmp_path):
    from pipeline.config import load_config
    for section, message in (({"data": "eval"}, "fast_finetune.data"), ({"batches": 1}, "fast_finetune.batches"),
                             ({"method": "adaround"}, "fast_finetune.method"), ({"passes": 0}, "fast_finetune.passes")):
        cfg, _ = make_case(tmp_path, quantizer={"fast_finetune": dict({"enabled": True}, **section)})
        with pytest.raises(ConfigError, match=message):
            load_config(cfg)
    cfg, _ = make_case(tmp_path, quantizer={"backend": "nndct",
                                            "fast_finetune": {"enabled": True, "method": "adaquant_plus"}})
    with pytest.raises(ConfigError, match="fast_finetune.method: the nndct backend runs adaquant, got 'adaquant_plus'"):
        load_config(cfg)


def test_fast_finetune_worse_than_plain_calibration_is_said():
    from pipeline.steps.calib import _worse_than_plain
    record = {"method": "adaquant", "candidates": {"adaquant": {"mse": 2.0e-3}, "plain": {"mse": 1.9e-3}}}
    assert "further from float than plain calibration" in _worse_than_plain(record)
    assert "adaquant_plus" in _worse_than_plain(record)
    record["candidates"]["adaquant"]["mse"] = 1.8e-3
    assert _worse_than_plain(record) is None
