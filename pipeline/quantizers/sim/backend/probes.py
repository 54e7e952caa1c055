"""What ``check-env`` runs to say whether the simulation works here, not only whether its packages
are installed: each probe runs one feature of the backend class it is given (the sim's,
``Requirement.probe``) end to end on a tiny model, in a temporary folder it removes, and returns one line saying what it did; it raises whatever the feature
raises when the feature does not work in this environment (a torch, Python, onnx or protobuf that
lacks something the feature uses).

The models are seeded and small (a 3x8x8 input; under a second per probe on one core): a conv, batch
norm, ReLU, max pool and linear layer (:class:`TinyNet`), and a token model with an
``nn.MultiheadAttention`` self-attention as torchvision's ViT calls it (:class:`TinyAttention`),
whose capture depends most on what torch offers (docs/environment.md#supported-versions).
"""
import shutil
import tempfile
from typing import Any, Callable

import torch
from torch import nn

from ...base import QuantSettings


class TinyNet(nn.Module):
    """conv 3->4 (3x3, pad 1) -> BatchNorm -> ReLU -> 2x2 max pool -> flatten -> linear 64->5.
    Input float32 NCHW (N, 3, 8, 8); output (N, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(64, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2), 1))


class TinyAttention(nn.Module):
    """Each image row as a token (8 tokens of 3 channels x 8 columns) -> linear 24->8 -> self-attention
    (2 heads, batch first, ``need_weights=False``) -> mean over tokens -> linear 8->5.
    Input float32 (N, 3, 8, 8); output (N, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(24, 8)
        self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x.permute(0, 2, 1, 3).reshape(x.shape[0], 8, 24))
        out, _ = self.attention(tokens, tokens, tokens, need_weights=False)
        return self.head(out.mean(1))


def _calibrated(backend: Any, model: nn.Module, folder: str) -> torch.fx.GraphModule:
    """``backend``'s test-mode handle of ``model`` after a calibration of two seeded batches of 4."""
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(4, 3, 8, 8, generator=g) for _ in range(2)]
    settings = QuantSettings()
    backend.calibrate(model, batches[0][:1], batches, folder, settings)
    return backend.load_test(model, batches[0][:1], folder, settings)


def _in_temporary_folder(run: Callable[[str], str]) -> str:
    folder = tempfile.mkdtemp(prefix="pipeline-probe-")
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            return run(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def probe_calib_test(backend_class: Any) -> str:
    """Calibrate and run test mode on :class:`TinyNet` and :class:`TinyAttention` (the attention is
    inlined as the real quantizer's trace records it, ``pipeline.fx.attention``) with ``backend_class``."""
    def run(folder: str) -> str:
        for model in (TinyNet().eval(), TinyAttention().eval()):
            handle = _calibrated(backend_class(), model, folder)
            out = handle(torch.ones(1, 3, 8, 8))
            if tuple(out.shape) != (1, 5) or not bool(torch.isfinite(out).all()):
                raise RuntimeError("test mode of %s gave %s, expected a finite (1, 5) output"
                                   % (type(model).__name__, tuple(out.shape)))
        return "calibrated and tested a conv/BN/linear model and an nn.MultiheadAttention model"
    return _in_temporary_folder(run)


def probe_export_onnx(backend_class: Any) -> str:
    """Export :class:`TinyNet` to both ONNX flavours with ``backend_class`` and check them in ONNX Runtime
    against the simulation (exact: bit for bit; qdq: bit for bit against the half-to-even simulation)."""
    def run(folder: str) -> str:
        backend = backend_class()
        handle = _calibrated(backend, TinyNet().eval(), folder)
        example = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
        files = backend.export(handle, example, folder, ["onnx_exact", "onnx_qdq"])
        report, _ = backend.verify(handle, files, lambda: example.repeat(4, 1, 1, 1), {"onnx_exact": 0})
        return "exported a conv/BN/linear model to bit-exact and QDQ ONNX; ONNX Runtime agrees (%d of %d " \
               "elements differ in the exact file)" % (report["onnx_exact"]["mismatches"],
                                                      report["onnx_exact"]["elements"])
    return _in_temporary_folder(run)


def probe_export_xmodel(backend_class: Any) -> str:
    """Write :class:`TinyNet`'s xmodel with ``backend_class`` (read back, checked and run against the
    simulation before it is kept, ``pipeline.quantizers.sim.xmodel``)."""
    def run(folder: str) -> str:
        backend = backend_class()
        handle = _calibrated(backend, TinyNet().eval(), folder)
        backend.export(handle, torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)), folder, ["xmodel"])
        return "wrote a conv/BN/linear model's xmodel, read it back and ran it against the simulation"
    return _in_temporary_folder(run)
