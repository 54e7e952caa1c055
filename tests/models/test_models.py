"""Model zoo shapes and safe checkpoint loading."""
import os
import pickle

import pytest
import torch

from pipeline.errors import ConfigError, PipelineError
from pipeline.models.loading import build_model, load_weights, resolve_factory
from pipeline.models.zoo import ZOO


@pytest.mark.parametrize("name,shape,classes,params", [
    ("digits_cnn", (2, 1, 8, 8), 10, 24058),
    ("resnet18", (1, 3, 64, 64), 1000, 11689512),       # torchvision's resnet18 has 11,689,512 too
    ("mobilenet_v2", (1, 3, 64, 64), 1000, 3504872),    # torchvision's mobilenet_v2 has 3,504,872 too
])
def test_zoo_models_have_the_published_sizes(name, shape, classes, params):
    model = build_model(name, None, {})
    assert not model.training
    assert model(torch.randn(*shape)).shape == (shape[0], classes)
    assert sum(p.numel() for p in model.parameters()) == params


def test_factory_by_import_path_and_kwargs():
    model = build_model(None, "pipeline.models.zoo:digits_cnn", {"num_classes": 3})
    assert model(torch.zeros(1, 1, 8, 8)).shape == (1, 3)


@pytest.mark.parametrize("zoo,factory,match", [
    ("resnet50", None, "model.zoo: expected one of"),
    (None, "no_such_module_xyz:build", "cannot import module 'no_such_module_xyz'"),
    (None, "pipeline.models.zoo:nope", "has no attribute 'nope'"),
    (None, "pipeline.models.zoo", "import path 'package.module:function'"),
    (None, "pipeline.models.zoo:ZOO", "is not callable"),
])
def test_bad_model_specs_are_config_errors(zoo, factory, match):
    with pytest.raises(ConfigError, match=match):
        resolve_factory(zoo, factory)


def test_factory_must_return_a_module():
    with pytest.raises(ConfigError, match="expected a torch.nn.Module"):
        build_model(None, "os.path:join", {"a": "x"})


def test_state_dict_round_trip(tmp_path):
    torch.manual_seed(0)
    a = ZOO["digits_cnn"]()
    path = str(tmp_path / "w.pt")
    torch.save(a.state_dict(), path)
    b = load_weights(ZOO["digits_cnn"](), path)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch %s" % _Evil.marker,))


def test_pickle_that_carries_code_is_refused_and_nothing_executes(tmp_path):
    _Evil.marker = str(tmp_path / "pwned")
    path = str(tmp_path / "evil.pt")
    with open(path, "wb") as f:
        pickle.dump({"conv1.weight": _Evil()}, f)
    with pytest.raises(PipelineError, match="refused: it is not a plain state_dict"):
        load_weights(ZOO["digits_cnn"](), path)
    assert not os.path.exists(_Evil.marker)


def test_checkpoint_that_does_not_fit_names_the_keys(tmp_path):
    path = str(tmp_path / "w.pt")
    torch.save({"conv1.weight": torch.zeros(16, 1, 3, 3), "extra.bias": torch.zeros(1)}, path)
    with pytest.raises(PipelineError) as err:
        load_weights(ZOO["digits_cnn"](), path)
    assert "missing keys" in str(err.value) and "extra.bias" in str(err.value)


def test_checkpoint_with_wrong_shapes_is_a_clear_error(tmp_path):
    path = str(tmp_path / "w.pt")
    state = ZOO["digits_cnn"]().state_dict()
    state["fc.weight"] = torch.zeros(3, 64)
    torch.save(state, path)
    with pytest.raises(PipelineError, match="fc.weight"):
        load_weights(ZOO["digits_cnn"](), path)


def test_training_checkpoint_gets_a_hint_to_the_nested_state_dict(tmp_path):
    path = str(tmp_path / "ckpt.pt")
    torch.save({"state_dict": ZOO["digits_cnn"]().state_dict(), "epoch": 3}, path)
    with pytest.raises(PipelineError, match=r"weights seem to be under 'state_dict'"):
        load_weights(ZOO["digits_cnn"](), path)


def test_dataparallel_prefix_gets_a_hint(tmp_path):
    path = str(tmp_path / "dp.pt")
    torch.save({"module." + k: v for k, v in ZOO["digits_cnn"]().state_dict().items()}, path)
    with pytest.raises(PipelineError, match=r"saved from nn.DataParallel"):
        load_weights(ZOO["digits_cnn"](), path)


def test_refusal_names_the_global_without_torchs_advice_to_disable_safety(tmp_path):
    _Evil.marker = str(tmp_path / "pwned")
    path = str(tmp_path / "evil.pt")
    torch.save({"conv1.weight": _Evil()}, path)
    with pytest.raises(PipelineError) as err:
        load_weights(ZOO["digits_cnn"](), path)
    assert "posix.system" in str(err.value) and "weights_only` set to `False`" not in str(err.value)
    assert not os.path.exists(_Evil.marker)
