"""The model corpus of the tests: well-known architectures written here in plain torch (random
weights, small widths and inputs so that the whole corpus runs in seconds), and the two phases
of a real quantize script, each meant for its own process.

``python tests/support/corpus_models.py calib|test OUT_DIR`` runs one phase for every model:
``calib`` = ``torch_quantizer('calib', ...)``, 2 forwards of 4, ``export_quant_config()``;
``test`` = a fresh ``torch_quantizer('test', ...)``, one forward of the first eval sample alone (the
xmodel's shapes), one of the 4 eval samples (outputs saved as ``OUT_DIR/<model>/y_<j>.npy``),
``export_onnx_model(native_onnx=False)`` (the exact flavour) and ``export_xmodel`` (which runs the file
against the simulation before writing it). The architectures follow the papers' block structure (ResNet-50 bottlenecks 3-4-6-3,
MobileNetV2 inverted residuals, MobileNetV3-small with Hardswish and squeeze-excite, ShuffleNetV2
units, SqueezeNet fire modules, a DenseNet block, EfficientNet-lite MBConv blocks, EfficientNet MBConv
blocks with in-place SiLU and StochasticDepth, a UNet, a
YOLO-style two-output detector, an MLP on (N, F), a two-input net).
"""
import contextlib
import hashlib
import math
import os
import sys

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn


def cbr(i, o, k=3, s=1, g=1, act=nn.ReLU):
    layers = [nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(o)]
    return nn.Sequential(*(layers + ([act()] if act is not None else [])))


class Bottleneck(nn.Module):
    def __init__(self, i, mid, s):
        super().__init__()
        o = mid * 4
        self.body = nn.Sequential(cbr(i, mid, 1), cbr(mid, mid, 3, s), cbr(mid, o, 1, act=None))
        self.down = cbr(i, o, 1, s, act=None) if s != 1 or i != o else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        skip = x if self.down is None else self.down(x)
        return self.relu(self.body(x) + skip)


class ResNet50(nn.Module):
    def __init__(self, width=4, classes=10):
        super().__init__()
        self.stem = nn.Sequential(cbr(3, 8, 3, 2), nn.MaxPool2d(2))
        layers, i = [], 8
        for n, mid, s in ((3, width, 1), (4, 2 * width, 2), (6, 4 * width, 2), (3, 8 * width, 2)):
            for b in range(n):
                layers.append(Bottleneck(i, mid, s if b == 0 else 1))
                i = mid * 4
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(i, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    def __init__(self, i, o, s, t, k=3, act=nn.ReLU6):
        super().__init__()
        h = i * t
        self.use_res = s == 1 and i == o
        self.block = nn.Sequential(*([cbr(i, h, 1, act=act)] if t != 1 else []),
                                   cbr(h, h, k, s, g=h, act=act), cbr(h, o, 1, act=None))

    def forward(self, x):
        return x + self.block(x) if self.use_res else self.block(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        cfg = ((1, 8, 1, 1), (6, 8, 2, 2), (6, 16, 2, 2), (6, 16, 1, 1))
        layers, i = [cbr(3, 8, 3, 2, act=nn.ReLU6)], 8
        for t, c, n, s in cfg:
            for b in range(n):
                layers.append(InvertedResidual(i, c, s if b == 0 else 1, t))
                i = c
        self.features = nn.Sequential(*layers, cbr(i, 32, 1, act=nn.ReLU6))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // r, 1)
        self.fc2 = nn.Conv2d(c // r, c, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.fc2(F.relu(self.fc1(s))))


class MBv3Block(nn.Module):
    def __init__(self, i, h, o, k, s, se, act):
        super().__init__()
        self.use_res = s == 1 and i == o
        self.expand = cbr(i, h, 1, act=act) if h != i else nn.Identity()
        self.dw = cbr(h, h, k, s, g=h, act=act)
        self.se = SqueezeExcite(h) if se else nn.Identity()
        self.project = cbr(h, o, 1, act=None)

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.use_res else y


class MobileNetV3Small(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        hs, re = nn.Hardswish, nn.ReLU
        cfg = ((8, 8, 8, 3, 2, True, re), (8, 24, 12, 3, 2, False, re), (12, 32, 12, 3, 1, False, re),
               (12, 48, 16, 5, 2, True, hs), (16, 64, 16, 5, 1, True, hs))
        self.stem = cbr(3, 8, 3, 2, act=hs)
        self.blocks = nn.Sequential(*[MBv3Block(*c) for c in cfg])
        self.last = cbr(16, 48, 1, act=hs)
        self.head = nn.Sequential(nn.Linear(48, 32), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, x):
        x = self.last(self.blocks(self.stem(x))).mean((2, 3))
        return self.head(x)


def channel_shuffle(x, groups):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, i, o, s):
        super().__init__()
        h = o // 2
        self.s = s
        if s == 2:
            self.branch1 = nn.Sequential(cbr(i, i, 3, 2, g=i, act=None), cbr(i, h, 1))
        bin_ = i if s == 2 else h
        self.branch2 = nn.Sequential(cbr(bin_, h, 1), cbr(h, h, 3, s, g=h, act=None), cbr(h, h, 1))

    def forward(self, x):
        if self.s == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch2(b)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(cbr(3, 8, 3, 2), nn.MaxPool2d(2))
        self.stages = nn.Sequential(ShuffleUnit(8, 16, 2), ShuffleUnit(16, 16, 1), ShuffleUnit(16, 32, 2),
                                    ShuffleUnit(32, 32, 1))
        self.conv5 = cbr(32, 64, 1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        return self.fc(self.conv5(self.stages(self.stem(x))).mean([2, 3]))


class Fire(nn.Module):
    def __init__(self, i, sq, e):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(i, sq, 1), nn.ReLU(inplace=True))
        self.e1 = nn.Sequential(nn.Conv2d(sq, e, 1), nn.ReLU(inplace=True))
        self.e3 = nn.Sequential(nn.Conv2d(sq, e, 3, padding=1), nn.ReLU(inplace=True))

    def forward(self, x):
        x = self.squeeze(x)
        return torch.cat([self.e1(x), self.e3(x)], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                                      Fire(16, 4, 8), Fire(16, 4, 8), nn.MaxPool2d(2), Fire(16, 8, 16))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(32, classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class DenseLayer(nn.Module):
    def __init__(self, i, growth):
        super().__init__()
        self.norm = nn.BatchNorm2d(i)  # pre-activation: a BatchNorm no conv precedes (kept unfused)
        self.conv1 = nn.Conv2d(i, 2 * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(2 * growth)
        self.conv2 = nn.Conv2d(2 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.conv1(F.relu(self.norm(x)))
        return torch.cat([x, self.conv2(F.relu(self.norm2(y)))], 1)


class DenseBlockNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(cbr(3, 8, 3, 1), nn.MaxPool2d(2))
        self.block = nn.Sequential(DenseLayer(8, 4), DenseLayer(12, 4), DenseLayer(16, 4))
        self.transition = nn.Sequential(nn.BatchNorm2d(20), nn.ReLU(), nn.Conv2d(20, 12, 1, bias=False),
                                        nn.AvgPool2d(2))
        self.fc = nn.Linear(12, classes)

    def forward(self, x):
        x = self.transition(self.block(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class EfficientNetLite(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = cbr(3, 8, 3, 2, act=nn.ReLU6)
        self.blocks = nn.Sequential(InvertedResidual(8, 8, 1, 1), InvertedResidual(8, 12, 2, 6),
                                    InvertedResidual(12, 12, 1, 6), InvertedResidual(12, 16, 2, 6, k=5),
                                    InvertedResidual(16, 16, 1, 6, k=5))
        self.head = cbr(16, 32, 1, act=nn.ReLU6)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.head(self.blocks(self.stem(x))), 1), 1))


def stochastic_depth(input, p, mode, training=True):
    """torchvision.ops.stochastic_depth in plain torch (torchvision wraps it for torch.fx as here):
    in eval mode (or p == 0) the input itself, else the input times a random row (or batch) mask."""
    if not training or p == 0.0:
        return input
    survival = 1.0 - p
    size = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device).bernoulli_(survival)
    if survival > 0.0:
        noise.div_(survival)
    return input * noise


torch.fx.wrap("stochastic_depth")


class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth in plain torch."""
    def __init__(self, p, mode="row"):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, input):
        return stochastic_depth(input, self.p, self.mode, self.training)


class MBConv(nn.Module):
    """EfficientNet's MBConv without squeeze-excite: SiLU(inplace=True) activations and a
    StochasticDepth on the residual branch."""
    def __init__(self, i, o, s, t, k, p):
        super().__init__()
        h = i * t
        act = lambda: nn.SiLU(inplace=True)  # noqa: E731
        self.use_res = s == 1 and i == o
        self.block = nn.Sequential(*([cbr(i, h, 1, act=act)] if t != 1 else []),
                                   cbr(h, h, k, s, g=h, act=act), cbr(h, o, 1, act=None))
        self.stochastic_depth = StochasticDepth(p)

    def forward(self, x):
        r = self.block(x)
        return x + self.stochastic_depth(r) if self.use_res else r


class EfficientNetInplace(nn.Module):
    """What torchvision's EfficientNet adds to the lite blocks: in-place activations (nndct keeps
    the trailing underscore of aten::silu_ in its node names) and StochasticDepth, which in eval
    mode returns its input before any op is traced (no node in nndct). Also ReLU, ReLU6 and
    Hardswish modules with inplace=True and F.silu(x, inplace=True)."""
    def __init__(self, classes=10):
        super().__init__()
        self.stem = cbr(3, 8, 3, 2, act=lambda: nn.SiLU(inplace=True))
        self.blocks = nn.Sequential(MBConv(8, 8, 1, 1, 3, 0.0), MBConv(8, 12, 2, 4, 3, 0.05),
                                    MBConv(12, 12, 1, 4, 3, 0.1), MBConv(12, 16, 2, 4, 5, 0.15),
                                    MBConv(16, 16, 1, 4, 5, 0.2))
        self.c1 = cbr(16, 16, 3, act=lambda: nn.ReLU(inplace=True))
        self.c2 = cbr(16, 16, 1, act=lambda: nn.ReLU6(inplace=True))
        self.c3 = cbr(16, 16, 3, act=lambda: nn.Hardswish(inplace=True))
        self.head = nn.Conv2d(16, 32, 1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = self.c3(self.c2(self.c1(self.blocks(self.stem(x)))))
        x = F.silu(self.head(x), inplace=True)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class UNet(nn.Module):
    def __init__(self, c=8, classes=3):
        super().__init__()
        self.d1 = nn.Sequential(cbr(3, c), cbr(c, c))
        self.d2 = nn.Sequential(nn.MaxPool2d(2), cbr(c, 2 * c), cbr(2 * c, 2 * c))
        self.d3 = nn.Sequential(nn.MaxPool2d(2), cbr(2 * c, 4 * c))
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, 2)
        self.u2 = cbr(4 * c, 2 * c)
        self.up1 = nn.Upsample(scale_factor=2, mode="nearest")
        self.u1 = nn.Sequential(cbr(3 * c, c), nn.Conv2d(c, classes, 1))

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(a)
        y = self.u2(torch.cat([self.up2(self.d3(b)), b], 1))
        return self.u1(torch.cat([self.up1(y), a], 1))


class YoloTiny(nn.Module):
    def __init__(self, c=8, anchors=3, classes=2):
        super().__init__()
        no = anchors * (5 + classes)
        act = lambda: nn.LeakyReLU(0.1)  # noqa: E731
        self.b1 = nn.Sequential(cbr(3, c, act=act), cbr(c, 2 * c, 3, 2, act=act), cbr(2 * c, 4 * c, 3, 2, act=act))
        self.b2 = nn.Sequential(nn.MaxPool2d(2), cbr(4 * c, 8 * c, act=act))
        self.lat = cbr(8 * c, 4 * c, 1, act=act)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.fuse = cbr(8 * c, 4 * c, act=act)
        self.head_small = nn.Conv2d(4 * c, no, 1)
        self.head_large = nn.Conv2d(4 * c, no, 1)

    def forward(self, x):
        c3 = self.b1(x)
        p4 = self.lat(self.b2(c3))
        return self.head_large(p4), self.head_small(self.fuse(torch.cat([self.up(p4), c3], 1)))


class MLP(nn.Module):
    def __init__(self, features=24, hidden=32, classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


class TwoInputNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.image = nn.Sequential(cbr(3, 8, 3, 2), cbr(8, 8))
        self.depth = cbr(1, 4, 3, 2)
        self.mix = cbr(12, 16, 3, 2)
        self.fc = nn.Linear(16, classes)

    def forward(self, image, depth):
        x = self.mix(torch.cat([self.image(image), self.depth(depth)], 1))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class OpsNet(nn.Module):
    """Operators the families above do not use: max pool with ceil_mode, average pool without
    the padding in its count, dilated and non-square convs, a ZeroPad2d the conv absorbs,
    interpolate to a size, cat of a tensor with a scaled copy, a channel slice."""
    def __init__(self, classes=5):
        super().__init__()
        self.c1 = cbr(3, 8)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.c2 = nn.Conv2d(8, 8, (3, 1), stride=(1, 2), padding=(1, 0))
        self.avg = nn.AvgPool2d(2, 2, count_include_pad=False)
        self.c3 = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.pad = nn.ZeroPad2d((1, 1, 1, 1))
        self.c4 = nn.Conv2d(8, 8, 3)
        self.fc = nn.Linear(8 * 4 * 4, classes)

    def forward(self, x):
        x = self.avg(F.relu(self.c2(self.pool(self.c1(x)))))
        x = F.relu6(self.c3(x)) + x
        x = F.interpolate(self.c4(self.pad(x)), size=(4, 4), mode="nearest")
        y = torch.cat([x, x * 0.5], 1)[:, :8]
        return self.fc(y.reshape(y.size(0), -1))


class PadArithNet(nn.Module):
    """Asymmetric F.pad (an XIR pad op), leaky ReLU, x * sigmoid(x), and number operands on either
    side of a tensor (c - x, c * x, c + x, x - c, x / c) on two branches: nndct numbers those
    constants in the order of its depth-first walk, per operator kind, not in program order."""
    def __init__(self, classes=4):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3)
        self.c2 = nn.Conv2d(8, 8, 3)
        self.c3 = nn.Conv2d(8, 8, 1)
        self.c5 = nn.Conv2d(8, 8, 1)
        self.c4 = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        x = F.leaky_relu(F.relu(self.c1(F.pad(x, (2, 0, 1, 1)))), 0.1)
        x = self.c2(F.pad(torch.sigmoid(x) * x, (1, 1, 1, 1), value=0.0))
        p = 2.0 * self.c3(1.5 - x)
        q = self.c5(x) + 0.75
        return self.c4((p - 0.25 + q * 1.5) / 4.0).mean(dim=(2, 3))


class UpConvNet(nn.Module):
    """The two exact-doubling ConvTranspose2d of decoder heads: kernel 4 stride 2 padding 1, and
    kernel 2 stride 2."""
    def __init__(self):
        super().__init__()
        self.c = cbr(3, 8)
        self.up = nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(6, 6, 2, stride=2)
        self.head = nn.Conv2d(6, 4, 1)

    def forward(self, x):
        return self.head(F.relu(self.up2(F.relu(self.up(self.c(x))))))

# name -> (class, input shapes without the batch dimension)
CORPUS = {
    "resnet50": (ResNet50, [(3, 32, 32)]),
    "mobilenet_v2": (MobileNetV2, [(3, 32, 32)]),
    "mobilenet_v3_small": (MobileNetV3Small, [(3, 32, 32)]),
    "shufflenet_v2": (ShuffleNetV2, [(3, 32, 32)]),
    "squeezenet": (SqueezeNet, [(3, 33, 33)]),
    "densenet_block": (DenseBlockNet, [(3, 16, 16)]),
    "efficientnet_lite": (EfficientNetLite, [(3, 32, 32)]),
    "efficientnet_inplace": (EfficientNetInplace, [(3, 32, 32)]),
    "unet": (UNet, [(3, 16, 16)]),
    "yolo_tiny": (YoloTiny, [(3, 32, 32)]),
    "mlp": (MLP, [(24,)]),
    "two_input": (TwoInputNet, [(3, 16, 16), (1, 16, 16)]),
    "ops": (OpsNet, [(3, 16, 16)]),
    "pad_arith": (PadArithNet, [(3, 10, 10)]),
    "upconv": (UpConvNet, [(3, 8, 8)]),
}
TARGET = "DPUCZDX8G_ISA1_B4096"


def randomize_batchnorm(model, g):
    """Draw every BatchNorm's statistics and affine parameters from ``g`` (so folding and CLE act)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_(0.3 * torch.randn(c, generator=g))
                m.running_var.copy_(0.5 + torch.rand(c, generator=g))
                m.weight.copy_(0.5 + torch.rand(c, generator=g))
                m.bias.copy_(0.2 * torch.randn(c, generator=g))


def _trunc_normal_as_references(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    # torch 2.13's nn.init.trunc_normal_ where [a, b] holds over 30% of the mass (torchvision's std 0.02
    # in [-2, 2]): normal_ draws, the values outside [a, b] drawn again until none is
    p = (math.erf((b - mean) / std / math.sqrt(2.0)) - math.erf((a - mean) / std / math.sqrt(2.0))) / 2.0
    if p <= 0.3:
        raise NotImplementedError("trunc_normal_ of a band holding %.3g of the mass: torch 2.13's rejection "
                                  "sampler for it is not reproduced here" % p)
    with torch.no_grad():
        lo, hi = tensor.new_tensor(a).item(), tensor.new_tensor(b).item()
        result = tensor.normal_(mean, std, generator=generator)
        while True:
            mask = (result < lo) | (result > hi)
            if not mask.any():
                break
            result = torch.where(mask, torch.empty_like(result).normal_(mean, std, generator=generator), result)
        if tensor is not result:
            tensor.copy_(result)
    return tensor


@contextlib.contextmanager
def references_random_init():
    """Within the block, ``torch.nn.init.trunc_normal_`` draws as in torch 2.13, the torch the stored
    references were made with (tests/data/README.md): ``normal_`` values, those outside the band drawn
    again. torch 1.13's drew ``uniform_`` values and mapped them through ``erfinv_``: other values, and
    the global random stream left elsewhere, so every parameter drawn after it (torchvision's
    ``ShiftedWindowAttention`` draws its bias table between layers) differed. ``normal_`` and
    ``uniform_`` draw the same streams in both torches, so under this block the seeds make the
    references' weights in both (``seeded_sha256`` checks it). Restored on exit."""
    saved = torch.nn.init.trunc_normal_
    torch.nn.init.trunc_normal_ = _trunc_normal_as_references
    try:
        yield
    finally:
        torch.nn.init.trunc_normal_ = saved


def seeded_model(maker):
    """``maker()`` under the corpus seeds (``trunc_normal_`` drawing as the references' torch:
    ``references_random_init``), in eval mode, BatchNorm statistics randomized (so folding and CLE
    act)."""
    torch.manual_seed(7)
    with references_random_init():
        model = maker()
    randomize_batchnorm(model, torch.Generator().manual_seed(8))
    return model.eval()


def seeded_inputs(shapes, n, seed):
    """One float32 batch of ``n`` per input shape (without the batch dimension; a list)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((n,) + shape, generator=g) for shape in shapes]


def make_model(name):
    """The seeded model (seeded_model)."""
    return seeded_model(CORPUS[name][0])


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    return seeded_inputs(CORPUS[name][1], n, seed)


def seeded_sha256(name, corpus=None):
    """sha256 of what the seeds make for ``name``: the weights (state_dict in key order, float32
    bytes) and the calibration and test batches. A stored reference (tests/data/corpus_real) holds
    only for the data it was made from; this tells a change of torch's random streams apart from
    a change of the quantizer."""
    corpus = corpus or sys.modules[__name__]
    h = hashlib.sha256()
    for key, value in corpus.make_model(name).state_dict().items():
        h.update(key.encode())
        h.update(value.detach().float().contiguous().numpy().tobytes())
    for seed in (1, 2, 3):
        for x in corpus.make_inputs(name, 4, seed):
            h.update(x.numpy().tobytes())
    return h.hexdigest()


def phase(which, out_root, names=None, corpus=None, torch_quantizer=None, quant_config_file=None):
    """Run the calib or the test phase of every model of ``corpus`` (a module with CORPUS,
    make_model and make_inputs; this one by default) with ``torch_quantizer`` (the drop-in's by
    default) and ``quant_config_file`` (see the module docstring). A model whose export the drop-in
    refuses with its clear error (ExportError: the exact ONNX flavour or the xmodel cannot express a
    node) gets the message in ``onnx_refused.txt`` / ``xmodel_refused.txt`` beside its outputs;
    the tests say which refusals they expect."""
    from pipeline.errors import ExportError
    if torch_quantizer is None:
        from pipeline.apis import torch_quantizer
    corpus = corpus or sys.modules[__name__]
    make_model, make_inputs = corpus.make_model, corpus.make_inputs
    for name in names or corpus.CORPUS:
        out = os.path.join(out_root, name)
        example = make_inputs(name, 4, 1)
        q = torch_quantizer(which, make_model(name), tuple(example), output_dir=out, device=torch.device("cpu"),
                            quant_config_file=quant_config_file)
        with torch.no_grad():
            if which == "calib":
                for seed in (1, 2):
                    q.quant_model(*make_inputs(name, 4, seed))
                q.export_quant_config()
                continue
            q.quant_model(*[x[:1] for x in make_inputs(name, 4, 3)])  # batch 1 first: the xmodel's shapes
            y = q.quant_model(*make_inputs(name, 4, 3))
            for j, t in enumerate(y if isinstance(y, tuple) else (y,)):
                np.save(os.path.join(out, "y_%d.npy" % j), t.numpy())
            _export(out, "onnx", lambda: q.export_onnx_model(out, native_onnx=False), ExportError)
        # checked and run against the simulation before it is written, or it raises
        _export(out, "xmodel", lambda: q.export_xmodel(os.path.join(out, "xmodel")), ExportError)


def _export(out, kind, export, refusal):
    try:
        export()
    except refusal as e:
        with open(os.path.join(out, kind + "_refused.txt"), "w") as f:
            f.write(str(e))


def run_phases(script, root, configs, env=None):
    """Both phases of every model of the corpus ``script`` (its ``main``), each in a new process,
    once per config (name -> quant_config_file content, or None): ``{cfg: <root>/<cfg>}``, where
    each model's files are in ``<root>/<cfg>/<model>``."""
    import json
    import subprocess
    out = {}
    for cfg, content in configs.items():
        args = [os.path.join(str(root), cfg), "all"]
        if content is not None:
            args.append(os.path.join(str(root), cfg + ".json"))
            with open(args[-1], "w") as f:
                json.dump(content, f)
        for which in ("calib", "test"):
            proc = subprocess.run([sys.executable, script, which] + args, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, universal_newlines=True, env=env)
            assert proc.returncode == 0, proc.stdout[-3000:]
        out[cfg] = args[0]
    return out


def exact_onnx_outputs(folder, inputs):
    """The outputs ONNX Runtime computes (CPU, graph optimisations off) from the one
    ``*_int.onnx`` file in ``folder`` on ``inputs`` (tensors, in the model's input order)."""
    import onnxruntime as ort
    path = [f for f in os.listdir(folder) if f.endswith("_int.onnx")]
    assert len(path) == 1, path
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(os.path.join(folder, path[0]), sess_options=options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})


def exported(folder, kind, refusal=None):
    """Whether the test phase wrote the ``kind`` export ("onnx" or "xmodel") of the model in
    ``folder``. With ``refusal`` (a word of the expected reason) the export must have been refused
    with a message containing it (False); without, it must not have been refused (True)."""
    path = os.path.join(folder, kind + "_refused.txt")
    if refusal is None:
        assert not os.path.exists(path), path
        return True
    with open(path) as f:
        assert refusal in f.read()
    return False


def rerun_xmodel(folder, corpus, name):
    """The one xmodel the test phase wrote in ``<folder>/xmodel``, read back, checked, and run
    against the simulation (the calibration in ``folder``) on a batch-1 input the export did not
    see: ``pipeline.quantizers.sim.xmodel.verify.compare``'s report."""
    from pipeline.apis import torch_quantizer
    from pipeline.xir import reader
    from pipeline.quantizers.sim.xmodel import verify
    files = os.listdir(os.path.join(folder, "xmodel"))
    assert len(files) == 1 and files[0].endswith("_int.xmodel"), files
    graph = reader.check(reader.read_xmodel(os.path.join(folder, "xmodel", files[0])))
    q = torch_quantizer("test", corpus.make_model(name), tuple(corpus.make_inputs(name, 4, 1)), output_dir=folder,
                        device=torch.device("cpu"))
    return verify.compare(graph, q._session, q.quant_model, [x[:1] for x in corpus.make_inputs(name, 4, 9)])


def main(corpus, argv):
    """``calib|test OUT_DIR [NAMES] [QUANT_CONFIG_FILE]`` (NAMES comma-separated, or ``all``), at
    ``PIPELINE_TEST_THREADS`` torch threads where set (tests.support.pinned_threads)."""
    if os.environ.get("PIPELINE_TEST_THREADS"):
        torch.set_num_threads(int(os.environ["PIPELINE_TEST_THREADS"]))
    names = argv[2].split(",") if len(argv) > 2 and argv[2] != "all" else None
    phase(argv[0], argv[1], names, corpus=corpus, quant_config_file=argv[3] if len(argv) > 3 else None)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    # the models of the module the tests import, not of __main__: the target of a torch.fx-wrapped
    # function (stochastic_depth) names its module, and so does the calibration's graph hash
    from tests.support import corpus_models
    corpus_models.main(corpus_models, sys.argv[1:])
