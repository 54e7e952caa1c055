"""QatProcessor against the real quantizer's QAT (tests/data/qat_real, its README says how it was made): the
same warm-up thresholds, forward outputs, losses, gradients, weights, thresholds and BN statistics after every
optimizer step (BN training, then frozen), eval outputs, to_deployable's files and the deployable model's outputs.

On the references' environment (torch 2.13, this CPU capability) everything is bit-identical except the summed
threshold gradients, which may differ in their last bit (at most 1e-10 here; the next step's thresholds are
bit-identical again). Elsewhere (e.g. torch 1.13) outputs, losses and fix positions must still agree and the
gradients and weights stay within twice the real quantizer's own largest drift between 1 and 2 threads on
these models (drift.json)."""
import json
import os

import numpy as np
import pytest
import torch
import torch.nn as nn

from pipeline.apis import QatProcessor
from pipeline.cpu import cpu_capability
from tests.support.qat_models import build

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "qat_real")
REFERENCE_ENV = torch.__version__.split("+")[0] == "2.13.0" and cpu_capability() == "AVX512"
SUFFIXES = ("weight", "bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
            "weight_quantizer.log_threshold", "bias_quantizer.log_threshold", "weight_quantizer.bitwidth",
            "weight_quantizer.warmup_enabled", "bias_quantizer.bitwidth", "bias_quantizer.warmup_enabled")


def _load(name, *parts):
    path = os.path.join(DATA, name, *parts)
    if path.endswith(".npy"):
        return torch.from_numpy(np.load(path))
    if path.endswith(".json"):
        with open(path) as f:
            return json.load(f)
    return torch.load(path, weights_only=True)


def _names(qmodel, name):
    """The real trainable model's state names -> this one's."""
    names = {}
    for node, (path, _) in qmodel._shared.layer_paths.items():
        names.update((path + "." + s, "net.layers.%s.%s" % (node, s)) for s in SUFFIXES)
    real = [e["trainable_quantizer"] for e in _load(name, "quantizer_map.json") if e["quant_info_section"] == "output"]
    ours = [key.split("::")[1] for group, key, _ in qmodel.quantizers() if group == "output"]
    assert len(real) == len(ours)
    for r, o in zip(real, ours):
        names.update((r + "." + s, "net.output_quantizers.%s.%s" % (o, s))
                     for s in ("log_threshold", "bitwidth", "warmup_enabled"))
    return names


def _drift():
    """Twice the real quantizer's largest difference between 1 and 2 threads over the reference models, per kind
    the same bound for every model."""
    per_step = [s for m in ("digits", "resnet", "mobilenet") for s in _load(m, "drift.json")["per_step"]]
    return {k: 2 * max(s[k]["max_abs_diff"] for s in per_step) for k in ("grads", "state", "state_after_forward")}


def _same(mine, ref, tol, what):
    if REFERENCE_ENV and tol is not None and tol < 0:
        assert torch.equal(mine, ref), what
        return
    bound = abs(tol) if tol is not None else 0.0
    diff = float((mine.double() - ref.double()).abs().max()) if mine.numel() else 0.0
    assert diff <= bound, "%s: differs by %g (allowed %g)" % (what, diff, bound)


def _trainable(name, calib_dir=""):
    model, shape = build(name)
    model.load_state_dict(_load(name, "float_state_dict.pt"))
    model.train()  # as the references were made (the real trainable_model asserts conv.training)
    qat = QatProcessor(model, _load(name, "example_input.npy"), bitwidth=8)
    return qat, qat.trainable_model(calib_dir=calib_dir)


def _loss(qmodel, out, y):
    loss = nn.CrossEntropyLoss()(out, y)
    l2_norm = 0.0
    for param in qmodel.quantizer_parameters():  # the official example's quantizer_norm
        l2_norm += torch.pow(param, 2.0)[0]
    return loss + 1e-4 * torch.sqrt(l2_norm)


def _check_steps(qmodel, names, steps, x, y, drift):
    mine = dict(qmodel.named_parameters())
    mine.update(qmodel.named_buffers())
    opt = torch.optim.Adam([{"params": qmodel.quantizer_parameters(), "lr": 1e-2},
                            {"params": qmodel.non_quantizer_parameters(), "lr": 1e-3}], weight_decay=1e-4)
    qmodel.train()
    for k, ref in enumerate(steps):
        if k == 3:
            qmodel.freeze_bn_stats()
        out = qmodel(x[8 * k:8 * k + 8].clone())
        for key, v in ref.get("state_after_forward", {}).items():  # step 0: the warm-up's thresholds
            _same(mine[names[key]].detach(), v, -drift["state_after_forward"], "step %d after forward %s" % (k, key))
        loss = _loss(qmodel, out, y[8 * k:8 * k + 8])
        opt.zero_grad()
        loss.backward()
        opt.step()
        _same(out.detach(), ref["output"], -1, "step %d output" % k)
        assert abs(float(loss.detach()) - float(ref["loss"])) <= (0.0 if REFERENCE_ENV else 1e-6), "step %d loss" % k
        for key, g in ref["grads"].items():
            tol = 1e-10 if "log_threshold" in key else -drift["grads"]
            _same(mine[names[key]].grad, g, tol if REFERENCE_ENV else drift["grads"], "step %d grad %s" % (k, key))
        for key, v in ref["state"].items():
            _same(mine[names[key]].detach(), v, -drift["state"], "step %d state %s" % (k, key))


@pytest.mark.parametrize("name", ["digits", "resnet", "mobilenet"])
def test_qat_matches_the_real_quantizer_step_by_step(name, tmp_path):
    torch.set_num_threads(1)
    qat, qmodel = _trainable(name)
    names = _names(qmodel, name)
    init = _load(name, "init_state.pt")
    assert set(init) <= set(names)  # every tensor of the real trainable model has its twin here
    x, y = _load(name, "train_inputs.npy"), _load(name, "train_labels.npy")
    _check_steps(qmodel, names, _load(name, "steps.pt"), x, y, _drift())
    qmodel.eval()
    evals = _load(name, "eval_inputs.npy")
    with torch.no_grad():
        _same(qmodel(evals.clone()), _load(name, "trainable_eval_outputs.npy"), -1, "trainable eval outputs")
    deployable = qat.to_deployable(qmodel, str(tmp_path))
    for mine, ref in (("quant_info.json", "quant_info.json"), (os.path.join("test", "quant_info.json"), "quant_info_raw.json")):
        with open(os.path.join(str(tmp_path), mine)) as f:
            a = json.load(f)
        b = _load(name, ref)
        assert a["param"] == b["param"], mine
        assert list(a["output"].values()) == list(b["output"].values()), mine  # keys: the stub shifts nndct's numbers
    state, ref_state = torch.load(str(tmp_path / "deployable.pth"), weights_only=True), _load(name, "deployable.pth")
    assert list(state) == list(ref_state)
    for key in ref_state:
        _same(state[key], ref_state[key], -_drift()["state"], "deployable.pth " + key)
    with torch.no_grad():
        _same(deployable(evals.clone()), _load(name, "deployable_outputs.npy"), -1, "deployable outputs")


def test_qat_calib_dir_start_matches_the_real_quantizer(tmp_path):
    torch.set_num_threads(1)
    ref = _load("resnet", "calib_init", "quant_info.json")
    qat, probe = _trainable("resnet")
    ours = [key for group, key, _ in probe.quantizers() if group == "output"]
    assert len(ours) == len(ref["output"])
    # the real model has a QuantStub, one more node: the same tensors under names numbered one higher
    ref["output"] = dict(zip(ours, ref["output"].values()))
    (tmp_path / "quant_info.json").write_text(json.dumps(ref))
    qat, qmodel = _trainable("resnet", calib_dir=str(tmp_path))
    names = _names(qmodel, "resnet")
    mine = dict(qmodel.named_parameters())
    mine.update(qmodel.named_buffers())
    for key, v in _load("resnet", "calib_init", "init_state.pt").items():
        if key in names:
            assert torch.equal(mine[names[key]].detach(), v), key
    x, y = _load("resnet", "train_inputs.npy"), _load("resnet", "train_labels.npy")
    _check_steps(qmodel, names, _load("resnet", "calib_init", "steps.pt"), x, y, _drift())


@pytest.mark.parametrize("name", ["digits", "resnet", "mobilenet"])
def test_qat_deployable_xmodel_is_the_real_quantizers(name, tmp_path):
    """The real deployable model's xmodel (deployable.xmodel: its deployable.pth and quant_info.json, a batch-1
    forward, export_xmodel) against the drop-in's from the same files. The real model has a QuantStub and a
    DeQuantStub: its trace numbers every op one higher, its input op is named after the stub, and nndct names the
    quantized region's graph ``<Class>_0`` (the subgraph of the stubs' partition, ``nndct_shared/compile/
    deploy_optimizer.py``); ops are therefore compared by position, the graph name aside."""
    from pipeline.xir import schema
    from tests.support import xmodel_compare
    model, shape = build(name)
    model.load_state_dict(_load(name, "float_state_dict.pt"))
    qat = QatProcessor(model, _load(name, "example_input.npy"))
    info = _load(name, "quant_info.json")
    ours = [key for group, key, _ in qat.trainable_model().quantizers() if group == "output"]
    info["output"] = dict(zip(ours, info["output"].values()))
    (tmp_path / "quant_info.json").write_text(json.dumps(info))
    torch.save(_load(name, "deployable.pth"), str(tmp_path / "deployable.pth"))
    qat.deployable_model(str(tmp_path), used_for_xmodel=True)(_load(name, "eval_inputs.npy")[:1])
    mine = xmodel_compare.load(qat.export_xmodel(str(tmp_path)))
    real = xmodel_compare.load(os.path.join(DATA, name, "deployable.xmodel"))
    assert [o.op_type for o in mine.op_node] == [o.op_type for o in real.op_node]
    xmodel_compare.rename_ops(mine, xmodel_compare.op_names(real))
    assert real.graph_name == mine.graph_name + "_0"
    mine.graph_name = real.graph_name
    assert schema.canonical(mine) == schema.canonical(real), xmodel_compare.differences(mine, real)
