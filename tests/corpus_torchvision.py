"""The torchvision families of the model corpus: torchvision's own classes (EfficientNet-B0, a small
ConvNeXt, a small ViT, a small Swin, DenseNet-121, LR-ASPP MobileNetV3), random weights with
randomised BatchNorm statistics and layer scales, small inputs, nothing downloaded. torchvision is a
test-only dependency (the `dev` extra); the pipeline never imports it.

``python tests/corpus_torchvision.py calib|test OUT_DIR [NAMES|all] [QUANT_CONFIG_FILE]`` runs one phase
for every family, exactly as ``tests/corpus_models.py`` does for the plain-torch corpus (same recipe,
same seeds).

torchvision 0.28.0 (the release paired with torch 2.13) comes from the package index as a CUDA
build whose C++ operators do not load beside the CPU torch, and ``import torchvision`` then fails on
``operator torchvision::nms does not exist``. ``import_torchvision`` declares the schemas of the two
operators torchvision's Python registers fake kernels for (``nms``, ``qnms``; no kernel) and imports
it again: ``torchvision.models`` is pure Python and needs nothing else.
"""
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus_models  # noqa: E402

_SCHEMAS = []  # the torch.library.Library holding the declared schemas (it must stay alive)


def import_torchvision():
    """``torchvision``, imported; declares ``torchvision::nms``/``qnms`` first where its C++
    operators did not load (see the module docstring). Raises ImportError when it is not installed."""
    try:
        import torchvision
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
        for key in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[key]
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
        _SCHEMAS.append(lib)
        import torchvision
    return torchvision


class Segmentation(nn.Module):
    """A torchvision segmentation model's ``out`` map alone (its forward returns a dict)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def efficientnet_b0():
    return import_torchvision().models.efficientnet_b0(num_classes=10)


def convnext():
    import_torchvision()
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 1)],
                    stochastic_depth_prob=0.1, num_classes=10)


def vit():
    import_torchvision()
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                             num_classes=10)


def swin():
    import_torchvision()
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           stochastic_depth_prob=0.1, num_classes=10)


def densenet121():
    return import_torchvision().models.densenet121(num_classes=10)


def lraspp():
    tv = import_torchvision()
    return Segmentation(tv.models.segmentation.lraspp_mobilenet_v3_large(num_classes=4, weights=None,
                                                                          weights_backbone=None))


# name -> (maker, input shapes without the batch dimension)
CORPUS = {
    "tv_efficientnet_b0": (efficientnet_b0, [(3, 64, 64)]),
    "tv_convnext": (convnext, [(3, 32, 32)]),
    "tv_vit": (vit, [(3, 32, 32)]),
    "tv_swin": (swin, [(3, 32, 32)]),
    "tv_densenet121": (densenet121, [(3, 64, 64)]),
    "tv_lraspp": (lraspp, [(3, 64, 64)]),
}


def make_model(name):
    """The seeded model in eval mode: BatchNorm statistics randomized as in corpus_models, and the
    parameters torchvision initialises to constants that hide a path (ConvNeXt's layer scales of
    1e-6, ViT's zero class token) drawn at random too."""
    torch.manual_seed(7)
    model = CORPUS[name][0]()
    corpus_models.randomize_batchnorm(model, torch.Generator().manual_seed(8))
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("layer_scale"):
                p.copy_(0.2 + 0.3 * torch.rand(p.shape, generator=g))
            elif key.endswith("class_token"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return model.eval()


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((n,) + shape, generator=g) for shape in CORPUS[name][1]]


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    import corpus_torchvision
    corpus_models.main(corpus_torchvision, sys.argv[1:])
