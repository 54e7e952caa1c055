"""``Lambda``: a test model whose forward is a function of (self, x), with named submodules."""
import torch.nn as nn


class Lambda(nn.Module):
    """A model whose forward is a function of (self, x), with named submodules."""

    def __init__(self, fn, **layers):
        super().__init__()
        self.fn = fn
        for name, layer in layers.items():
            setattr(self, name, layer)

    def forward(self, x):
        return self.fn(self, x)
