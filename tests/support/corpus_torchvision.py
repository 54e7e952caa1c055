"""The torchvision families of the model corpus: torchvision's own classes (MobileNetV3-small,
RegNetX-400MF, ShuffleNetV2, SqueezeNet 1.1, MNASNet, GoogLeNet, a ResNeXt, EfficientNet-B0, a small
ConvNeXt, a small ViT, a small Swin, DenseNet-121, LR-ASPP MobileNetV3), random weights with
randomised BatchNorm statistics and layer scales, small inputs, nothing downloaded. torchvision is a
test-only dependency, brought by the `cpu` and `image` extras with the torch it was built for (the
`dev` extra leaves torch alone); the pipeline never imports it. Without it the tests that need it are
skipped with the reason (``require_torchvision``).

``python tests/support/corpus_torchvision.py calib|test OUT_DIR [NAMES|all] [QUANT_CONFIG_FILE]`` runs one phase
for every family, exactly as ``tests/support/corpus_models.py`` does for the plain-torch corpus (same recipe,
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
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run by path
from tests.support import corpus_models  # noqa: E402

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


def require_torchvision():
    """``import_torchvision()`` in a test module; skips the module, with the reason, where torchvision
    is not installed (the `dev` extra does not install it: it would replace the torch you have)."""
    import pytest
    try:
        return import_torchvision()
    except ImportError as e:
        pytest.skip("torchvision is not installed (%s): these tests build torchvision's model classes; install the "
                    "torchvision released for your torch %s (the cpu and image extras bring one)"
                    % (e, torch.__version__), allow_module_level=True)


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


def mobilenet_v3_small():
    return import_torchvision().models.mobilenet_v3_small(num_classes=10)


def regnet_x_400mf():
    return import_torchvision().models.regnet_x_400mf(num_classes=10)


def shufflenet_v2():
    return import_torchvision().models.shufflenet_v2_x0_5(num_classes=10)


def squeezenet1_1():
    return import_torchvision().models.squeezenet1_1(num_classes=10)


def mnasnet():
    return import_torchvision().models.mnasnet0_5(num_classes=10)


def googlenet():
    return import_torchvision().models.googlenet(num_classes=10, aux_logits=False, init_weights=True)


def resnext():
    """A one-block-per-stage ResNeXt (32 groups of width 4) from torchvision's ResNet class."""
    import_torchvision()
    from torchvision.models.resnet import Bottleneck, ResNet
    return ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10, groups=32, width_per_group=4)


# name -> (maker, input shapes without the batch dimension)
CORPUS = {
    "tv_mobilenet_v3_small": (mobilenet_v3_small, [(3, 64, 64)]),
    "tv_regnet_x_400mf": (regnet_x_400mf, [(3, 64, 64)]),
    "tv_shufflenet_v2": (shufflenet_v2, [(3, 64, 64)]),
    "tv_squeezenet1_1": (squeezenet1_1, [(3, 64, 64)]),
    "tv_mnasnet": (mnasnet, [(3, 64, 64)]),
    "tv_googlenet": (googlenet, [(3, 64, 64)]),
    "tv_resnext": (resnext, [(3, 64, 64)]),
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
    model = corpus_models.seeded_model(CORPUS[name][0])
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("layer_scale"):
                p.copy_(0.2 + 0.3 * torch.rand(p.shape, generator=g))
            elif key.endswith("class_token"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return model


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    return corpus_models.seeded_inputs(CORPUS[name][1], n, seed)


if __name__ == "__main__":
    from tests.support import corpus_torchvision
    corpus_models.main(corpus_torchvision, sys.argv[1:])
