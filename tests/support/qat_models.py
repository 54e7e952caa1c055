"""The QAT reference models: a ResNet-style and a MobileNetV2-style net, small enough that every
gradient of every step fits in ``tests/data/qat_real``.

Each takes ``add`` (a factory of the two-input add module), ``stub_in`` and ``stub_out`` (factories
of the modules the input and output pass through). The defaults are ordinary PyTorch (``x + y``,
``nn.Identity``); the real quantizer's QAT needs its own ``functional.Add`` and ``QuantStub`` /
``DeQuantStub`` there. None of them holds a parameter, so the state_dict keys are the same either way.

``build(name)`` makes a model as the references were made: ``torch.manual_seed(1234)``, the
constructor, then ``pipeline.models.zoo.randomize_bn(model, 1235)``; eval mode.
"""
from typing import Callable, Tuple

import torch
from torch import nn

from pipeline.models.zoo import digits_cnn, randomize_bn


class Add(nn.Module):
    """``x + y`` as a module (the default ``add``)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout))


class Block(nn.Module):
    """ResNet basic block (conv-BN-ReLU, conv-BN, skip, add, ReLU)."""

    def __init__(self, cin: int, cout: int, stride: int, add: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.a = _conv_bn(cin, cout, 3, stride)
        self.relu1 = nn.ReLU()
        self.b = _conv_bn(cout, cout, 3)
        self.down = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None
        self.add = add()
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.down is None else self.down(x)
        return self.relu2(self.add(self.b(self.relu1(self.a(x))), skip))


class TinyResNet(nn.Module):
    """Input float32 NCHW (N, 3, 16, 16); output (N, 10) logits."""

    def __init__(self, add: Callable[[], nn.Module] = Add, stub_in: Callable[[], nn.Module] = nn.Identity,
                 stub_out: Callable[[], nn.Module] = nn.Identity) -> None:
        super().__init__()
        self.quant = stub_in()
        self.stem = _conv_bn(3, 8, 3)
        self.relu = nn.ReLU()
        self.block1 = Block(8, 8, 1, add)
        self.block2 = Block(8, 16, 2, add)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)
        self.dequant = stub_out()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.block1(self.relu(self.stem(self.quant(x)))))
        return self.dequant(self.fc(torch.flatten(self.pool(x), 1)))


class Inverted(nn.Module):
    """MobileNetV2 inverted residual: 1x1 expand-BN-ReLU6, 3x3 depthwise-BN-ReLU6, 1x1 project-BN,
    add when the shape is kept."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, add: Callable[[], nn.Module]) -> None:
        super().__init__()
        hidden = cin * expand
        self.expand = nn.Sequential(_conv_bn(cin, hidden, 1), nn.ReLU6())
        self.dw = nn.Sequential(_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6())
        self.project = _conv_bn(hidden, cout, 1)
        self.residual = stride == 1 and cin == cout
        self.add = add() if self.residual else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.dw(self.expand(x)))
        return self.add(y, x) if self.add is not None else y


class TinyMobileNetV2(nn.Module):
    """Input float32 NCHW (N, 3, 16, 16); output (N, 10) logits. Depthwise convs, BN, ReLU6, a 4x4
    average pool (DPU factor 16*... : an adaptive pool to 1x1)."""

    def __init__(self, add: Callable[[], nn.Module] = Add, stub_in: Callable[[], nn.Module] = nn.Identity,
                 stub_out: Callable[[], nn.Module] = nn.Identity) -> None:
        super().__init__()
        self.quant = stub_in()
        self.stem = nn.Sequential(_conv_bn(3, 8, 3, 2), nn.ReLU6())
        self.ir1 = Inverted(8, 8, 1, 2, add)
        self.ir2 = Inverted(8, 16, 2, 2, add)
        self.head = nn.Sequential(_conv_bn(16, 32, 1), nn.ReLU6())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)
        self.dequant = stub_out()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.ir2(self.ir1(self.stem(self.quant(x)))))
        return self.dequant(self.fc(torch.flatten(self.pool(x), 1)))


class Digits(nn.Module):
    """``pipeline.models.zoo.DigitsCNN`` between the two stubs: input (N, 1, 8, 8), output (N, 10).
    Its state_dict keys are the zoo model's with the prefix ``net.``."""

    def __init__(self, add: Callable[[], nn.Module] = Add, stub_in: Callable[[], nn.Module] = nn.Identity,
                 stub_out: Callable[[], nn.Module] = nn.Identity) -> None:
        super().__init__()
        self.quant = stub_in()
        self.net = digits_cnn()
        self.dequant = stub_out()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.net(self.quant(x)))


MODELS = {"digits": (Digits, (1, 8, 8)), "resnet": (TinyResNet, (3, 16, 16)),
          "mobilenet": (TinyMobileNetV2, (3, 16, 16))}


def build(name: str, **kw) -> Tuple[nn.Module, Tuple[int, int, int]]:
    """The reference model ``name`` (``digits``, ``resnet``, ``mobilenet``) with its seeded weights,
    in eval mode, and its input shape (C, H, W). ``kw`` goes to the constructor (add, stubs)."""
    cls, shape = MODELS[name]
    torch.manual_seed(1234)
    model = cls(**kw)
    return randomize_bn(model, 1235), shape
