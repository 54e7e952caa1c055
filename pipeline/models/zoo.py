"""The project's model zoo: small DPU-friendly networks written here (torchvision is not a dependency).

Every model takes float32 NCHW input and uses only operators that map onto the DPU
(conv + BN + ReLU/ReLU6 groups, max/average pooling, add, global average pooling, linear;
docs/targets.md#dpuczdx8g-operator-limits). Each activation is its own module, so that graph capture with
torch.fx sees one node per use.
"""
from typing import Any, Callable, Dict, List

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> List[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]


class DigitsCNN(nn.Module):
    """A small CNN for the 8x8 scikit-learn digits.

    Input: float32 NCHW ``(N, in_channels, 8, 8)``, normalized pixels (about -1..3).
    Output: float32 ``(N, num_classes)`` logits.
    Layers: three conv3x3-BN-ReLU blocks (16, 32, 64 channels) with a 2x2 max pool after the
    second, global average pooling (a 4x4 average: factor 16, exact on the DPU), flatten and a
    linear head. About 24k parameters.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(in_channels, 16, 3)
        self.relu1 = nn.ReLU()
        self.conv2, self.bn2 = _conv_bn(16, 32, 3)
        self.relu2 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv3, self.bn3 = _conv_bn(32, 64, 3)
        self.relu3 = nn.ReLU()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.pool(self.relu2(self.bn2(self.conv2(x))))
        x = self.relu3(self.bn3(self.conv3(x)))
        return self.fc(self.flatten(self.gap(x)))


class BasicBlock(nn.Module):
    """ResNet basic block: two conv3x3-BN with a ReLU between, a skip (1x1 conv-BN when the shape
    changes), add, ReLU. Input and output float32 NCHW."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(cin, cout, 3, stride)
        self.relu1 = nn.ReLU()
        self.conv2, self.bn2 = _conv_bn(cout, cout, 3)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(*_conv_bn(cin, cout, 1, stride))
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(out + identity)


class ResNet18(nn.Module):
    """ResNet-18-shaped network (He et al. 2016, "Deep Residual Learning", table 1, 18-layer column).

    Input: float32 NCHW ``(N, in_channels, H, W)``, 224x224 in the classic setting.
    Output: float32 ``(N, num_classes)`` logits. 11.7M parameters for 1000 classes.
    """

    def __init__(self, num_classes: int = 1000, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(in_channels, 64, 7, 2)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        widths = [64, 128, 256, 512]
        cin = 64
        layers = []
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, w, stride), BasicBlock(w, w)))
            cin = w
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flatten(self.avgpool(x)))


class InvertedResidual(nn.Module):
    """MobileNetV2 inverted residual: 1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1 linear
    projection, with an add when stride is 1 and the channel count is kept."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers = []  # type: List[nn.Module]
        if expand != 1:
            layers += _conv_bn(cin, hidden, 1) + [nn.ReLU6()]
        layers += _conv_bn(hidden, hidden, 3, stride, groups=hidden) + [nn.ReLU6()]
        layers += _conv_bn(hidden, cout, 1)
        self.block = nn.Sequential(*layers)
        self.use_residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.use_residual else out


class MobileNetV2(nn.Module):
    """MobileNetV2-shaped network (Sandler et al. 2018, table 2), width multiplier 1.0.

    Input: float32 NCHW ``(N, in_channels, H, W)``, 224x224 in the classic setting.
    Output: float32 ``(N, num_classes)`` logits. 3.5M parameters for 1000 classes.
    """

    # (expansion t, output channels c, repeats n, first stride s), table 2 of the paper
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000, in_channels: int = 3) -> None:
        super().__init__()
        layers = _conv_bn(in_channels, 32, 3, 2) + [nn.ReLU6()]  # type: List[nn.Module]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += _conv_bn(cin, 1280, 1) + [nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.avgpool(self.features(x))))


MAX_CLASSES = 100000  # a 100,000-way head on ResNet-18 is 51M parameters; larger is a typo
MAX_IN_CHANNELS = 64


def check_counts(num_classes: Any, in_channels: Any) -> None:
    """Raise ConfigError unless ``num_classes`` is an int in 1..MAX_CLASSES and ``in_channels`` in
    1..MAX_IN_CHANNELS (a negative or huge count would fail deep inside torch, or try to allocate
    terabytes)."""
    from ..errors import ConfigError
    for key, value, top in (("num_classes", num_classes, MAX_CLASSES), ("in_channels", in_channels, MAX_IN_CHANNELS)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ConfigError("model.kwargs.%s: expected a whole number from 1 to %d, got %r" % (key, top, value))


def digits_cnn(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """The digits CNN (see DigitsCNN), randomly initialized."""
    check_counts(num_classes, in_channels)
    return DigitsCNN(num_classes, in_channels)


def resnet18(num_classes: int = 1000, in_channels: int = 3) -> nn.Module:
    """A ResNet-18-shaped model (see ResNet18), randomly initialized."""
    check_counts(num_classes, in_channels)
    return ResNet18(num_classes, in_channels)


def mobilenet_v2(num_classes: int = 1000, in_channels: int = 3) -> nn.Module:
    """A MobileNetV2-shaped model (see MobileNetV2), randomly initialized."""
    check_counts(num_classes, in_channels)
    return MobileNetV2(num_classes, in_channels)


# Literal registry: YAML ``model.zoo`` name -> factory.
ZOO = {
    "digits_cnn": digits_cnn,
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
}  # type: Dict[str, Callable[..., nn.Module]]


def randomize_bn(model: nn.Module, seed: int) -> nn.Module:
    """Give every ``BatchNorm2d`` of ``model`` non-trivial statistics and affine parameters, in place,
    from a generator seeded with ``seed``: running mean 0.1*randn, running var 0.5+rand, weight
    0.5+rand, bias 0.1*randn. A freshly initialised zoo model otherwise folds to identity BNs, which
    hides what BN folding does; the tests and ``scripts/bench_quant.py`` use it. Returns ``model``
    in eval mode."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(0.1 * torch.randn(c, generator=g))
            m.running_var.copy_(0.5 + torch.rand(c, generator=g))
            m.weight.data.copy_(0.5 + torch.rand(c, generator=g))
            m.bias.data.copy_(0.1 * torch.randn(c, generator=g))
    return model.eval()
