"""Small transformer pieces for the attention fidelity test (tests/test_attention_fidelity.py):
``nn.MultiheadAttention`` self-attention as torchvision's ViT calls it (batch first,
``need_weights=False``), a class token (a Parameter expanded to the batch and concatenated), a
position embedding (a bare Parameter added), a residual add and ``x[:, 0]``. No LayerNorm, so the
attention path is compared on its own.

``python tests/corpus_attention.py calib|test OUT_DIR [NAMES] [QUANT_CONFIG_FILE] [real]`` runs one
phase of ``corpus_models.phase`` (same recipe and seeds as the corpus) with the drop-in's
``torch_quantizer`` (or pytorch_nndct's with ``real``); ``export_onnx_model`` and ``export_xmodel``
errors are printed, not raised (neither writes these ops), and the real quantizer's ONNX export is
skipped.
"""
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus_models  # noqa: E402


class TokenAttention(nn.Module):
    """(N, 8, 16) tokens -> Linear -> [class token; tokens] + position embedding -> self-attention
    (2 heads) + residual (left out with ``attend=False``) -> the class token's row -> Linear(16, 4)."""

    def __init__(self, batch_first: bool = True, attend: bool = True) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 16)
        self.class_token = nn.Parameter(torch.zeros(1, 1, 16))
        self.pos_embedding = nn.Parameter(torch.empty(1, 9, 16).normal_(std=0.5))
        self.attention = nn.MultiheadAttention(16, 2, batch_first=batch_first)
        self.head = nn.Linear(16, 4)
        self.batch_first = batch_first
        self.attend = attend

    def forward(self, x):
        x = self.embed(x)
        token = self.class_token.expand(x.shape[0], -1, -1)
        x = torch.cat([token, x], dim=1) + self.pos_embedding
        if not self.attend:
            return self.head(x[:, 0])
        if not self.batch_first:
            x = x.transpose(0, 1)
        y, _ = self.attention(x, x, x, need_weights=False)
        x = x + y
        if not self.batch_first:
            x = x.transpose(0, 1)
        return self.head(x[:, 0])


# name -> (maker, input shapes without the batch dimension)
CORPUS = {
    "attention": (lambda: TokenAttention(True), [(8, 16)]),
    "attention_seq_first": (lambda: TokenAttention(False), [(8, 16)]),
    "tokens": (lambda: TokenAttention(True, attend=False), [(8, 16)]),
}


def make_model(name):
    """The seeded model in eval mode (the class token drawn at random: torchvision makes it 0)."""
    torch.manual_seed(7)
    model = CORPUS[name][0]()
    with torch.no_grad():
        model.class_token.copy_(0.5 * torch.randn(model.class_token.shape, generator=torch.Generator().manual_seed(9)))
    return model.eval()


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((n,) + shape, generator=g) for shape in CORPUS[name][1]]


def _factory(real, config):
    if real:
        from pytorch_nndct.apis import torch_quantizer
    else:
        from pipeline.apis import torch_quantizer

    class Quantizer:
        def __init__(self, *args, **kwargs):
            self.q = torch_quantizer(*args, quant_config_file=config, **kwargs)

        def __getattr__(self, key):
            return getattr(self.q, key)

        def export_onnx_model(self, *args, **kwargs):
            if real:
                return
            try:
                self.q.export_onnx_model(*args, **kwargs)
            except Exception as e:  # scaled_dot_product_attention has no exact ONNX form
                print("export_onnx_model:", type(e).__name__, str(e))

        def export_xmodel(self, *args, **kwargs):
            try:
                self.q.export_xmodel(*args, **kwargs)
            except Exception as e:  # the writer refuses these ops; the test checks quant_info and outputs
                print("export_xmodel:", type(e).__name__, str(e)[:200])
    return Quantizer


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    import corpus_attention
    args = sys.argv[1:] + [""] * 3
    corpus_models.phase(args[0], args[1], args[2].split(",") if args[2] else None, corpus=corpus_attention,
                        torch_quantizer=_factory(args[4] == "real", args[3] or None))
