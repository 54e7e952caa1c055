"""The small model the drop-in API and sim backend tests share, its batches, and a calibration."""
import torch
from torch import nn

from pipeline.apis import torch_quantizer


class SmallNet(nn.Module):
    """conv-BN-ReLU6, depthwise conv-BN-LeakyReLU, Hardswish, concat, pooled linear head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU6()
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.dw_bn = nn.BatchNorm2d(8)
        self.leaky = nn.LeakyReLU(0.1)
        self.hs = nn.Hardswish()
        self.drop = nn.Dropout(0.5)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        y = self.act(self.bn(self.conv(x)))
        z = self.leaky(self.dw_bn(self.dw(y)))
        c = torch.cat([y, self.hs(z)], dim=1)
        return self.fc(torch.flatten(self.drop(self.gap(c)), 1))


def small_net(seed=0):
    """SmallNet in eval mode with seeded weights and non-trivial BN statistics."""
    torch.manual_seed(seed)
    m = SmallNet()
    g = torch.Generator().manual_seed(seed + 1)
    for bn in (m.bn, m.dw_bn):
        bn.running_mean.copy_(0.3 * torch.randn(8, generator=g))
        bn.running_var.copy_(0.5 + torch.rand(8, generator=g))
    return m.eval()


def small_batches(n=4, seed=2):
    """``n`` seeded float32 batches of shape (4, 3, 8, 8)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 3, 8, 8, generator=g) for _ in range(n)]


def calibrate_with_api(tmp, model=None, config=None, batches=None):
    """Calibrate through the drop-in API into ``tmp``; returns (quantizer, export_quant_config())."""
    batches = batches or small_batches()
    q = torch_quantizer("calib", model or small_net(), (batches[0],), output_dir=str(tmp),
                        device=torch.device("cpu"), quant_config_file=config)
    for b in batches:
        q.quant_model(b)
    return q, q.export_quant_config()
