"""The layer-norm fidelity model and its data (tests/fidelity/test_layernorm_fidelity.py; the real
quantizer's references in tests/data/layernorm/ were made from exactly this recipe).

``LNNet`` holds what the torchvision ConvNeXt/ViT/Swin families use, with weights that do not hide
a path (torchvision initialises layer norms to weight 1, bias 0, where quantizing them changes
nothing): a torchvision-style ``LayerNorm2d`` (an ``nn.LayerNorm`` subclass calling
``F.layer_norm`` between two permutes), ``nn.LayerNorm`` with random weight and bias (one with
weights large enough for a fix position of 4), GELU, a layer scale parameter in a plain multiply,
a parameter added directly (as ViT's position embedding), an ``nn.LayerNorm`` without affine
parameters and a layer norm as the model output.
"""
import torch
import torch.nn.functional as F
from torch import nn

INPUT_SHAPE = (3, 8, 8)


class LayerNorm2d(nn.LayerNorm):
    """torchvision.ops.misc.LayerNorm2d: a layer norm over the channels of an NCHW tensor."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class LNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.norm2d = LayerNorm2d(16, eps=1e-6)
        self.fc1 = nn.Linear(16, 24)
        self.act = nn.GELU()
        self.norm = nn.LayerNorm(24)
        self.fc2 = nn.Linear(24, 16)
        self.layer_scale = nn.Parameter(torch.ones(16, 1, 1))
        self.offset = nn.Parameter(torch.zeros(1, 16, 1, 1))
        self.plain = nn.LayerNorm(16, elementwise_affine=False)
        self.head = nn.Linear(16, 12)
        self.head_norm = nn.LayerNorm(12, eps=1e-6)

    def forward(self, x):
        y = self.norm2d(self.conv(x))
        z = self.fc2(self.norm(self.act(self.fc1(y.permute(0, 2, 3, 1))))).permute(0, 3, 1, 2)
        y = y + self.layer_scale * z
        y = y + self.offset
        y = F.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.head_norm(self.head(self.plain(y)))


def make_model():
    """The seeded model in eval mode (layer norm weights and biases, the layer scale and the
    offset drawn at random)."""
    torch.manual_seed(11)
    model = LNNet()
    g = torch.Generator().manual_seed(12)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("norm") or name.startswith("head_norm"):
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.5 * torch.randn(p.shape, generator=g))
            elif name in ("layer_scale", "offset"):
                p.copy_(0.2 + 0.3 * torch.rand(p.shape, generator=g))
        model.head_norm.weight.mul_(6.0)  # |w| up to ~10: fix position 3 or 4
    return model.eval()


def make_inputs(n, seed):
    """One float32 batch (n, 3, 8, 8)."""
    return torch.randn((n,) + INPUT_SHAPE, generator=torch.Generator().manual_seed(seed))


def finetune_batches():
    """The fast-finetune data: four batches of 4 (seeds 1, 2, 4, 5)."""
    return [make_inputs(4, s) for s in (1, 2, 4, 5)]


def run_finetune_phase(torch_quantizer, which, out):
    """Fast finetune with the default config: calib: ``fast_finetune(evaluate, (quant_model,
    batches))`` (evaluate runs the batches), the re-calibration forwards on the first two,
    export_quant_config; test: ``load_ft_param()``, a batch-1 forward, then the 4 eval samples,
    whose output is returned."""
    def evaluate(model, batches):
        with torch.no_grad():
            for x in batches:
                model(x)

    q = torch_quantizer(which, make_model(), (make_inputs(4, 1),), output_dir=out, device=torch.device("cpu"))
    if which == "calib":
        q.fast_finetune(evaluate, (q.quant_model, finetune_batches()))
        evaluate(q.quant_model, finetune_batches()[:2])
        q.export_quant_config()
        return q, None
    q.load_ft_param()
    with torch.no_grad():
        q.quant_model(make_inputs(4, 3)[:1])
        return q, q.quant_model(make_inputs(4, 3))


def run_phase(torch_quantizer, which, out, quant_config_file=None):
    """The corpus recipe (tests/support/corpus_models.py ``phase``) on LNNet: calib: two forwards of 4 and
    export_quant_config; test: a batch-1 forward, then the 4 eval samples, whose output is returned."""
    q = torch_quantizer(which, make_model(), (make_inputs(4, 1),), output_dir=out, device=torch.device("cpu"),
                        quant_config_file=quant_config_file)
    with torch.no_grad():
        if which == "calib":
            for seed in (1, 2):
                q.quant_model(make_inputs(4, seed))
            q.export_quant_config()
            return q, None
        q.quant_model(make_inputs(4, 3)[:1])
        return q, q.quant_model(make_inputs(4, 3))
