"""The three golden models, rebuilt from golden/README.md, and loaders for their data.

The architectures follow the README's "Models" section; the weights come from
``<model>/float_state_dict.pt`` (strict load), so nothing here is random.
"""
import os

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("mlp", "convnet", "resblock")
CONFIGS = ("default", "nocle")
NOCLE_CONFIG = {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(48, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.relu6 = nn.ReLU6()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.relu6(self.bn2(self.conv2(x)))
        return self.fc(self.flatten(self.gap(x)))


class ResBlockNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem_conv = nn.Conv2d(3, 16, 3, padding=1)
        self.stem_bn = nn.BatchNorm2d(16)
        self.stem_relu = nn.ReLU()
        self.res_conv1 = nn.Conv2d(16, 16, 3, padding=1)
        self.res_bn1 = nn.BatchNorm2d(16)
        self.res_relu1 = nn.ReLU()
        self.res_conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.res_bn2 = nn.BatchNorm2d(16)
        self.res_relu_out = nn.ReLU()
        self.dw_conv = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.dw_bn = nn.BatchNorm2d(16)
        self.dw_act = nn.LeakyReLU(0.1)
        self.pw_conv = nn.Conv2d(16, 16, 1)
        self.avgpool = nn.AvgPool2d(3, stride=1, padding=1)
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.hs_conv = nn.Conv2d(16, 16, 1)
        self.hs_act = nn.Hardswish()
        self.head = nn.Conv2d(32, 4, 1)

    def forward(self, x):
        s = self.stem_relu(self.stem_bn(self.stem_conv(x)))
        r = self.res_bn2(self.res_conv2(self.res_relu1(self.res_bn1(self.res_conv1(s)))))
        y = self.res_relu_out(torch.add(s, r))
        y = self.dw_act(self.dw_bn(self.dw_conv(y)))
        y = self.avgpool(self.pw_conv(y))
        u = self.upsample(y)
        h = self.hs_act(self.hs_conv(u))
        return self.head(torch.cat([u, h], dim=1))


CLASSES = {"mlp": MLP, "convnet": ConvNet, "resblock": ResBlockNet}


def load_model(name):
    """The golden float model ``name`` in eval mode, weights from float_state_dict.pt."""
    model = CLASSES[name]()
    state = torch.load(os.path.join(HERE, name, "float_state_dict.pt"), weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_array(name, filename):
    """A float32 tensor from ``<name>/<filename>`` (an .npy file)."""
    return torch.from_numpy(np.load(os.path.join(HERE, name, filename)))


def config_dir(name, config):
    return os.path.join(HERE, name, config)
