"""Every public entry point leaves the caller's tensors, arrays and models bit-identical, also for
models that write in place (issue 14, item 1): the drop-in ``torch_quantizer`` in both modes, its
``quant_model`` forwards and exports, ``pipeline.run`` on the caller's array or tensor, and the
inspector."""
import hashlib
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import pipeline
from pipeline.apis import torch_quantizer
from pipeline.inspect import inspect_model


class InplaceNet(nn.Module):
    """Its first op writes into its input (``act`` in place); the adaptive pool makes the test-mode
    model read the example's shapes; BatchNorm in train mode would update running statistics."""

    def __init__(self, act: nn.Module, num_classes: int = 10) -> None:
        super().__init__()
        self.act = act
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.relu(self.bn(self.conv(self.act(x))))), 1))


def inplace_relu_net(num_classes: int = 10) -> nn.Module:
    """``model.factory`` for the runner: the in-place model with ReLU(inplace=True) first."""
    return InplaceNet(nn.ReLU(inplace=True), num_classes)


ACTS = {"relu": lambda: nn.ReLU(inplace=True), "hardswish": lambda: nn.Hardswish(inplace=True),
        "leaky": lambda: nn.LeakyReLU(0.1, inplace=True), "relu6": lambda: nn.ReLU6(inplace=True)}


def _state(obj):
    """A digest of everything the caller owns: tensor bytes, shape, strides and _version; a model's
    state_dict and training flags; an array's bytes and flags."""
    h = hashlib.sha256()
    if isinstance(obj, nn.Module):
        h.update(repr([(n, m.training) for n, m in obj.named_modules()]).encode())
        for name, t in obj.state_dict().items():
            h.update(name.encode())
            h.update(_state(t).encode())
        return h.hexdigest()
    if isinstance(obj, torch.Tensor):
        h.update(repr((tuple(obj.shape), obj.stride(), obj._version, obj.dtype)).encode())
        h.update(obj.detach().contiguous().numpy().tobytes())
        return h.hexdigest()
    h.update(repr((obj.shape, obj.strides, obj.dtype, obj.flags.writeable)).encode())
    h.update(np.ascontiguousarray(obj).tobytes())
    return h.hexdigest()


class Guard:
    """Records the state of the caller's objects; ``check(where)`` asserts none changed."""

    def __init__(self, **objects):
        self.objects = objects
        self.before = {k: _state(v) for k, v in objects.items()}

    def check(self, where):
        changed = [k for k, v in self.objects.items() if _state(v) != self.before[k]]
        assert not changed, "%s changed the caller's %s" % (where, changed)


@pytest.mark.parametrize("act", sorted(ACTS))
def test_the_drop_in_api_and_the_inspector_never_change_caller_data(tmp_path, act):
    torch.manual_seed(0)
    model = InplaceNet(ACTS[act]()).train()  # train mode: a forward on it would move BN statistics
    example = torch.randn(2, 1, 8, 8)  # negative values: an in-place ReLU on it would change it
    batches = [torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    weights = str(tmp_path / "w.pt")
    torch.save(model.state_dict(), weights)
    guard = Guard(model=model, example=example, **{"batch%d" % i: b for i, b in enumerate(batches)})
    out = str(tmp_path / "q")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch_quantizer("calib", model, (example,), output_dir=out, device="cpu", state_dict_file=weights)
        guard.check("torch_quantizer('calib')")
        for b in batches:
            q.quant_model(b)
        guard.check("calib quant_model")
        q.export_quant_config()
        guard.check("export_quant_config")
        q = torch_quantizer("test", model, (example,), output_dir=out, device="cpu")
        guard.check("torch_quantizer('test')")
        with torch.no_grad():
            q.quant_model(example[:1])  # batch 1 first: the xmodel's shapes
            for b in batches:
                q.quant_model(b)
        guard.check("test quant_model")
        q.export_onnx_model(output_dir=out)
        guard.check("export_onnx_model")
        q.export_torch_script(output_dir=out)
        guard.check("export_torch_script")
        q.export_xmodel(output_dir=out)
        guard.check("export_xmodel")
        inspect_model(model, example, "DPUCZDX8G_ISA1_B4096")
        guard.check("inspect_model")


@pytest.mark.parametrize("kind", ["array", "tensor"])
def test_pipeline_run_never_changes_the_callers_images(tmp_path, kind):
    from tests.support import digits_u8, make_case
    images, labels = digits_u8()
    images, labels = images[:300], labels[:300]
    factory = "tests.boundary.test_caller_unchanged:inplace_relu_net"
    config, _ = make_case(tmp_path, model={"zoo": None, "factory": factory, "train": {"epochs": 1}})
    data = images if kind == "array" else torch.from_numpy(images.copy())
    guard = Guard(images=data, labels=labels)
    pipeline.run(config, steps=["train", "inspect", "calib", "export"], images=data, labels=labels)
    guard.check("pipeline.run")


class WritesItsInput(nn.Module):
    """Its forward writes its input in place with tensor methods (``x.sub_(0.5).mul_(-2.0)``), as a
    model that normalizes its own input may; the writes reach the caller's tensor in a float forward. A
    second forward on the written tensor flips its sign: a quantized run after the float one on the same
    batch would score about chance."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(8 * 8 * 8, num_classes)

    def forward(self, x):
        x.sub_(0.5).mul_(-2.0)
        return self.fc(torch.flatten(self.relu(self.conv(x)), 1))


def writes_its_input(num_classes: int = 10) -> nn.Module:
    """``model.factory`` for the runner: :class:`WritesItsInput`."""
    return WritesItsInput(num_classes)


def test_a_model_that_writes_its_input_leaves_the_callers_tensors_and_exports(tmp_path):
    """Tester's finding: ``x.sub_(0.5).mul_(2.0)`` in forward changed every calibration batch and test
    input, and export_xmodel/export_torch_script failed on the written first input."""
    torch.manual_seed(0)
    model = WritesItsInput().eval()
    example = torch.rand(1, 1, 8, 8)
    batches = [torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    guard = Guard(model=model, example=example, **{"batch%d" % i: b for i, b in enumerate(batches)})
    out = str(tmp_path / "q")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch_quantizer("calib", model, (example,), output_dir=out, device="cpu")
        for b in batches:
            q.quant_model(b)
        guard.check("calib quant_model")
        q.export_quant_config()
        q = torch_quantizer("test", model, (example,), output_dir=out, device="cpu")
        first = q.quant_model(batches[0][:1])
        outs = [q.quant_model(b) for b in batches]
        guard.check("test quant_model")
        assert torch.equal(q.quant_model(batches[0]), outs[0])  # the same input gives the same output
        assert torch.equal(q._first_inputs[0], batches[0][:1])  # the first input the caller gave
        with torch.no_grad():
            expect = model(batches[0].clone())  # the float model on the caller's values
        assert torch.nn.functional.cosine_similarity(outs[0].flatten(), expect.flatten(), 0) > 0.99
        assert q.export_xmodel(output_dir=out).endswith("WritesItsInput_int.xmodel")
        guard.check("export_xmodel")
        script = q.export_torch_script(output_dir=out)
        guard.check("export_torch_script")
    x = batches[0][:1].clone()
    assert torch.equal(script(x), first) and torch.equal(x, batches[0][:1])  # the file copies its input too


def test_the_runner_compares_float_and_quantized_on_the_same_batch(tmp_path):
    """The test step ran the float model first on the batch the quantized model then read: a model that
    writes its input gave the quantized model its written values (here: the sign flipped)."""
    import json
    from tests.support import digits_u8, make_case
    images, labels = digits_u8()
    factory = "tests.boundary.test_caller_unchanged:writes_its_input"
    config, _ = make_case(tmp_path, images[:400], labels[:400], export={"formats": ["xmodel"]},
                          model={"zoo": None, "factory": factory, "train": {"epochs": 2}})
    data = torch.from_numpy(images[:400].copy())
    guard = Guard(images=data)
    pipeline.run(config, steps=["train", "calib", "test", "export"], images=data, labels=labels[:400])
    guard.check("pipeline.run")
    with open(str(tmp_path / "run" / "steps" / "test.json")) as f:
        test = json.load(f)
    assert test["float_accuracy"] > 0.5
    assert test["quant_accuracy"] > test["float_accuracy"] - 0.05, test


class _Calls(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body
        self.conv = nn.Conv2d(3, 3, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.body(self, x)


@pytest.mark.parametrize("body,written", [
    (lambda m, x: m.conv(x.sub_(0.5).mul_(2.0)), (0,)),
    (lambda m, x: m.relu(x), (0,)),  # an inplace module on the input
    (lambda m, x: x.view(-1).mul_(2.0), (0,)),  # through a view
    (lambda m, x: torch.relu_(x[:, :1]), (0,)),
    (lambda m, x: x.T.add_(1.0), (0,)),
    (lambda m, x: x.float().add_(1.0), (0,)),  # x itself when float32
    (lambda m, x: m.conv(x), ()),
    (lambda m, x: m.relu(m.conv(x)).add_(1.0), ()),  # a new tensor written
    (lambda m, x: (x * 2.0).mul_(2.0), ()),
    (lambda m, x: torch.cat([x, x]).mul_(2.0), ()),
])
def test_written_inputs_finds_the_inputs_a_graph_may_write(body, written):
    from pipeline.fx.in_place import written_inputs
    gm = torch.fx.symbolic_trace(_Calls(body))
    assert written_inputs(gm, gm.graph) == written
