"""Small transformer pieces for the attention fidelity test (tests/fidelity/test_attention_fidelity.py):
``nn.MultiheadAttention`` self-attention as torchvision's ViT calls it (batch first,
``need_weights=False``), a class token (a Parameter expanded to the batch and concatenated), a
position embedding (a bare Parameter added), a residual add and ``x[:, 0]``. No LayerNorm, so the
attention path is compared on its own. And a CNN flattening by a product of traced sizes (the
null output entries of shape arithmetic outside attention).

``python tests/support/corpus_attention.py calib|test OUT_DIR NAMES|all [QUANT_CONFIG_FILE]`` runs one
phase of ``corpus_models.phase`` (same recipe and seeds as the corpus) with the drop-in's
``torch_quantizer``; with a last argument ``real`` (then QUANT_CONFIG_FILE is given, ``""`` for
none) with pytorch_nndct's, its ONNX export skipped (how tests/data/attention_real was made).
"""
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run by path
from tests.support import corpus_models  # noqa: E402


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


class SizeProduct(nn.Module):
    """conv -> reshape(n, c * h * w) from traced sizes -> Linear: shape arithmetic of a quantizable
    type (``elemwise_mul`` of sizes), which nndct gives a null output entry."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = self.conv(x)
        return self.fc(y.reshape(y.size(0), y.size(1) * y.size(2) * y.size(3)))


# name -> (maker, input shapes without the batch dimension)
CORPUS = {
    "attention": (lambda: TokenAttention(True), [(8, 16)]),
    "attention_seq_first": (lambda: TokenAttention(False), [(8, 16)]),
    "tokens": (lambda: TokenAttention(True, attend=False), [(8, 16)]),
    "size_product": (SizeProduct, [(3, 8, 8)]),
}


def make_model(name):
    """The seeded model in eval mode (the class token drawn at random: torchvision makes it 0)."""
    torch.manual_seed(7)
    model = CORPUS[name][0]()
    if not hasattr(model, "class_token"):
        return model.eval()
    with torch.no_grad():
        model.class_token.copy_(0.5 * torch.randn(model.class_token.shape, generator=torch.Generator().manual_seed(9)))
    return model.eval()


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    return corpus_models.seeded_inputs(CORPUS[name][1], n, seed)


def _real_quantizer(*args, **kwargs):
    """pytorch_nndct's torch_quantizer (the reference runs), its ONNX export skipped."""
    from pytorch_nndct.apis import torch_quantizer

    class Quantizer:
        def __init__(self):
            self.q = torch_quantizer(*args, **kwargs)

        def __getattr__(self, key):
            return getattr(self.q, key)

        def export_onnx_model(self, *a, **k):
            pass
    return Quantizer()


if __name__ == "__main__":
    from tests.support import corpus_attention
    argv = sys.argv[1:]
    if argv[-1:] == ["real"]:
        corpus_models.phase(argv[0], argv[1], argv[2].split(",") if argv[2] != "all" else None,
                            corpus=corpus_attention, torch_quantizer=_real_quantizer,
                            quant_config_file=(argv[3] or None) if len(argv) > 4 else None)
    else:
        corpus_models.main(corpus_attention, argv)
