"""The drop-in's two phases on a small model, as the export tests drive them: ``conv`` makes a padded
3x3 (by default) ``nn.Conv2d``; ``quantize`` calibrates and returns the test-mode quantizer."""
import torch
from torch import nn

from pipeline.apis import torch_quantizer


def conv(cin=3, cout=8, k=3, **kw):
    """``nn.Conv2d(cin, cout, k)`` with ``k // 2`` padding (the spatial size kept)."""
    return nn.Conv2d(cin, cout, k, padding=k // 2, **kw)


def quantize(tmp_path, model, shape=(3, 8, 8)):
    """Calib mode (2 seeded batches of 4, ``export_quant_config``), then test mode with a batch-1 first
    forward, in ``tmp_path/q``; returns the test-mode quantizer. ``shape``: one sample's shape."""
    torch.manual_seed(0)
    model = model.eval()
    g = torch.Generator().manual_seed(1)
    example = torch.randn((1,) + shape, generator=g)
    out = str(tmp_path / "q")
    q = torch_quantizer("calib", model, example, output_dir=out)
    for _ in range(2):
        q.quant_model(torch.randn((4,) + shape, generator=g))
    q.export_quant_config()
    q = torch_quantizer("test", model, example, output_dir=out)
    q.quant_model(torch.randn((1,) + shape, generator=g))
    return q
