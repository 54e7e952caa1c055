"""The train step's Adam and cosine schedule against torch.optim's, step by step."""
import importlib
import inspect
import subprocess
import sys

import torch

from pipeline.models.zoo import digits_cnn
from pipeline.train import Adam, cosine_lr, train_model


def _batches(seed, n=6):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(n)]


def _torch_reference(model, batches, epochs, lr, weight_decay):
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    loss_fn = torch.nn.CrossEntropyLoss()
    lrs = []
    for _ in range(epochs):
        lrs.append(opt.param_groups[0]["lr"])
        for x, y in batches:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        sched.step()
    return lrs


def test_adam_and_cosine_schedule_match_torch_optim():
    # torch 2.x moves the first moment with lerp_ (this module's formula); torch 1.13 with
    # mul_/add_, one rounding apart: the same values within float32 noise there
    exact = "exp_avg.lerp_(" in inspect.getsource(importlib.import_module("torch.optim.adam"))
    batches = _batches(0)
    for weight_decay in (0.0, 1e-3):
        torch.manual_seed(1)
        ours, theirs = digits_cnn(), digits_cnn()
        theirs.load_state_dict(ours.state_dict())
        lrs = _torch_reference(theirs, batches, 5, 0.003, weight_decay)
        assert cosine_lr(0.003, 5) == lrs  # the same Python floats
        torch.manual_seed(2)
        train_model(ours, lambda: batches, 5, 0.003, weight_decay, seed=2)
        for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
            if exact:
                assert torch.equal(a, b), name
            else:
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), name


def test_adam_skips_parameters_without_gradients_and_frozen_ones():
    a = torch.nn.Parameter(torch.ones(3))
    b = torch.nn.Parameter(torch.ones(2))
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    opt = Adam([a, b, frozen], lr=0.1)
    (a * torch.tensor([1.0, -2.0, 0.0])).sum().backward()
    opt.step()
    assert torch.allclose(a.detach(), torch.tensor([0.9, 1.1, 1.0]))  # first Adam step: lr * sign(grad)
    assert torch.equal(b.detach(), torch.ones(2)) and torch.equal(frozen.detach(), torch.ones(2))
    opt.zero_grad()
    assert a.grad is None


def test_training_imports_neither_dynamo_nor_torch_optim_machinery():
    code = ("import sys, torch\n"
            "from pipeline.models.zoo import digits_cnn\n"
            "from pipeline.train import train_model\n"
            "x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))\n"
            "train_model(digits_cnn(), lambda: [(x, y)], 2, 0.01, 0.0, seed=0)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    assert out.strip() == "False"
