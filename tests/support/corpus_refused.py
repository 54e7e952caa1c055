"""The ops the simulation refuses somewhere (pipeline/fx/refusals.py, docs/xmodel.md#known-refusals),
one small seeded model each, with a conv or two around the op so that it sits where models put it.

The same conventions as tests/support/corpus_models.py (``CORPUS``, ``make_model``, ``make_inputs``,
``main``), so that ``corpus_models.phase`` drives either quantizer over them; :func:`staged_phase`
runs one phase of one model and records the stage that refuses it instead of raising (the real
quantizer refuses some of these, and the simulation others, at capture, calibration or export).
The references are in tests/data/refused_real/ (tests/data/README.md); tests/fidelity/test_refused_real.py
compares the simulation with them.

``python tests/support/corpus_refused.py calib|test OUT_DIR [NAMES] [QUANT_CONFIG_FILE] [--nndct_quant_off]``
runs a phase of ``corpus_models.phase`` with the drop-in (``--nndct_quant_off`` is left on the command line
for whoever reads it there: pytorch_nndct when imported, and so ``pipeline.apis``, ``pipeline/apis/options.py``).

``quantstub``: pytorch_nndct's ``QuantStub``/``DeQuantStub`` mark where quantization starts and ends;
placed around a float middle they make the model several graphs. The model is built with the classes in
:data:`STUBS`, the drop-in's ``pipeline.nn.QuantStub`` and ``DeQuantStub`` unless a caller puts others
there (the reference was made with ``pytorch_nndct.nn.QuantStub`` and ``DeQuantStub``).

``quant_off``: a plain conv net; its reference was made with the real quantizer's quantization-off
flow: ``NndctOption.nndct_quant_off`` (name ``quant_off``), set only from the command line, as
``--nndct_quant_off``, which ``pytorch_nndct/__init__.py`` reads from ``sys.argv`` when imported
(``--quant_off`` is not recognised: the option is looked up by its attribute name); then every fix
position is null, the outputs are float and ``export_xmodel`` writes ``<Model>_float.xmodel``; the drop-in
reads the same flag (``pipeline/apis/options.py``).
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from pipeline import nn as pipeline_nn  # noqa: E402
from tests.support import corpus_models  # noqa: E402
from tests.support.corpus_models import seeded_inputs, seeded_model  # noqa: E402,F401


# the stub classes the quantstub model is built with: {"quant": cls, "dequant": cls}; the drop-in's
# (pipeline.nn), which the reference's maker replaced with pytorch_nndct.nn's own
STUBS = {"quant": pipeline_nn.QuantStub, "dequant": pipeline_nn.DeQuantStub}


class LayerNormTokens(nn.Module):
    """Patch embedding (4x4 conv, stride 4), tokens (N, 16, 8), nn.LayerNorm, a linear head per token."""
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 4, stride=4)
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        return self.fc(self.norm(t))


class LayerNormChannelsLast(nn.Module):
    """ConvNeXt's block: a depthwise conv, permute to NHWC, nn.LayerNorm over C, a pointwise linear,
    GELU, permute back, a conv."""
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 7, padding=3, groups=8)
        self.norm = nn.LayerNorm(8, eps=1e-6)
        self.pw = nn.Linear(8, 16)
        self.act = nn.GELU()
        self.pw2 = nn.Linear(16, 8)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(self.act(self.pw(self.norm(y)))).permute(0, 3, 1, 2)
        return self.head(x + y)


class ExpandClsToken(nn.Module):
    """ViT's class token: ``cls.expand(n, -1, -1)`` concatenated before the patch tokens, the class
    token's row to a linear head."""
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 4, stride=4)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        return self.fc(t)


class IndexGather(nn.Module):
    """Swin's relative position bias: ``table[idx.view(-1)]`` of a parameter table by a constant index
    buffer, reshaped and added to the tokens."""
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 4, stride=4)
        self.table = nn.Parameter(0.1 * torch.randn(7, 8))
        coords = torch.arange(4)
        rel = (coords[:, None] - coords[None, :]) + 3  # (4, 4) in 0..6
        self.register_buffer("idx", rel.repeat(1, 1).reshape(4, 4))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)  # (N, 16, 8)
        bias = self.table[self.idx.view(-1)].view(16, 8)
        return self.fc(t + bias)


class Conv1dNet(nn.Module):
    """nn.Conv1d on (N, 8, 32): two convs with a ReLU, a mean over time, a linear head."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(8, 16, 3, padding=1)
        self.c2 = nn.Conv1d(16, 8, 3, stride=2)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.c2(F.relu(self.c1(x))).mean(2))


class PixelShuffleNet(nn.Module):
    """Sub-pixel upsampling: conv to 4C, nn.PixelShuffle(2), conv."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.c2(self.shuffle(F.relu(self.c1(x))))


class InstanceNormNet(nn.Module):
    """Style-transfer block: conv, nn.InstanceNorm2d(affine=True), ReLU, conv."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.InstanceNorm2d(8, affine=True)
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)
        with torch.no_grad():
            self.norm.weight.copy_(0.5 + torch.rand(8))
            self.norm.bias.copy_(0.2 * torch.randn(8))

    def forward(self, x):
        return self.c2(F.relu(self.norm(self.c1(x))))


class PadNet(nn.Module):
    """conv, a non-constant pad of 1, a conv without padding (the CycleGAN / pix2pix form)."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.pad = {"reflect_module": nn.ReflectionPad2d(1), "replicate_module": nn.ReplicationPad2d(1)}.get(kind)
        self.c2 = nn.Conv2d(8, 4, 3)

    def forward(self, x):
        y = F.relu(self.c1(x))
        if self.pad is not None:
            y = self.pad(y)
        else:
            y = F.pad(y, (1, 1, 1, 1), mode="reflect")
        return self.c2(y)


class ConvSame(nn.Module):
    """nn.Conv2d(padding='same') with an odd kernel and with an even one (asymmetric padding)."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding="same")
        self.c2 = nn.Conv2d(8, 4, 4, padding="same")

    def forward(self, x):
        return self.c2(F.relu(self.c1(x)))


class RDiv(nn.Module):
    """A number divided by a tensor: ``1.0 / (sigmoid(conv(x)) + 0.5)``, then a conv."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.c2(1.0 / (torch.sigmoid(self.c1(x)) + 0.5))


class MaxDim(nn.Module):
    """Several-output ops: the channel max ``x.max(1)[0]``, ``torch.max(x, 1)``'s values or ``topk``'s
    values, kept as a channel, then a conv."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(2 if kind == "topk" else 1, 4, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.c1(x))
        if self.kind == "max_method":
            m = y.max(1)[0].unsqueeze(1)
        elif self.kind == "max_function":
            m, _ = torch.max(y, 1, keepdim=True)
        else:
            m = torch.topk(y, 2, dim=1)[0]
        return self.c2(m)


class Indexing(nn.Module):
    """Integer, None and Ellipsis indexing between convs."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(1 if kind == "int_index" else 8, 4, 3, padding=1)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        y = F.relu(self.c1(x))
        if self.kind == "int_index":
            return self.c2(y[:, 0].unsqueeze(1))
        if self.kind == "none_index":
            return self.c2(y[:, None].squeeze(1))
        return self.fc(self.c2(y)[..., 1])  # (N, 4, 16) -> (N, 4, 4)


class MixedIndexing(nn.Module):
    """An int or None followed by a slice in one index (torch.jit records a select or unsqueeze, then
    slices of the dimensions after it) between a conv and a conv or linear head."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(16 if kind in ("int_slice_index", "none_slice_index") else 2, 4)

    def forward(self, x):
        y = F.relu(self.c1(x))
        if self.kind == "int_slice_index":
            return self.fc(y[:, 0, 3:4])  # (N, 1, 16) -> (N, 1, 4)
        if self.kind == "none_int_slice_index":
            return self.c2(y[:, None][:, 0, 3:4])  # (N, 1, 16, 16)
        if self.kind == "int_slice_int_index":
            return self.fc(y[:, 1, 2:4, 0])  # (N, 2) -> (N, 4)
        return self.fc(y[None, :, 1:2].squeeze(0))  # (N, 1, 16, 16) -> (N, 1, 16, 4)


class SliceChains(nn.Module):
    """Slices the real quantizer runs as torch does, between convs: a chain after an Ellipsis on consecutive
    dimensions (one strided slice of dims [2, 3]), two crops of one slice (the slice read twice, so nndct's
    parser merges neither crop into it), and two getitems nndct merges into one strided slice of dims [0, 1, 0]
    which its forward and file run right (``y[:, 2:6][:, 0]``: the full ``:`` before the int)."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d({"ellipsis_slices_index": 8, "merged_slices_index": 1}.get(kind, 4), 4, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.c1(x))
        if self.kind == "ellipsis_slices_index":
            return self.c2(y[..., 1:3, 0:4])  # (N, 8, 2, 4)
        if self.kind == "merged_slices_index":
            return self.c2(y[:, 2:6][:, 0].unsqueeze(1))  # (N, 1, 16, 16)
        a = y[:, 2:6]
        return self.c2(torch.cat([a[:, :, 1:3], a[:, :, 5:7]], 2))  # (N, 4, 4, 16)


class ParamOperand(nn.Module):
    """An nn.Parameter as an operand: ``x + self.p`` or ``x * self.scale`` (a per-channel (C, 1, 1) tensor)."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.p = nn.Parameter(0.3 * torch.randn(8, 1, 1))
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        y = self.c1(x)
        y = y + self.p if self.kind == "param_add" else y * self.p
        return self.c2(F.relu(y))


class ParamTokens(nn.Module):
    """An nn.Parameter as an operand on tokens, broadcast over the last dim: ``t * self.gamma + self.beta``
    with (C,) parameters (a layer scale as ConvNeXt and CaiT write it on channels-last tensors)."""
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 4, stride=4)
        self.gamma = nn.Parameter(0.5 + torch.rand(8))
        self.beta = nn.Parameter(0.2 * torch.randn(8))
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        return self.fc(t * self.gamma + self.beta)


class SameTwice(nn.Module):
    """The same tensor twice as operands: ``x * x`` or ``torch.cat([x, x], 1)``."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(16 if kind == "cat_self" else 8, 4, 3, padding=1)

    def forward(self, x):
        y = self.c1(x)
        return self.c2(torch.cat([y, y], 1) if self.kind == "cat_self" else y * y)


class LSTMNet(nn.Module):
    """A token embedding, nn.LSTM (batch_first), the last step to a linear head."""
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.lstm = nn.LSTM(8, 8, batch_first=True)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y, _ = self.lstm(F.relu(self.embed(x)))
        return self.fc(y[:, -1])


class QuantStubNet(nn.Module):
    """QuantStub, conv, DeQuantStub, a float middle (a conv and a sigmoid gate), QuantStub, conv,
    DeQuantStub: two quantized parts and a float one (several graphs)."""
    def __init__(self):
        super().__init__()
        self.q1, self.dq1 = STUBS["quant"](), STUBS["dequant"]()
        self.q2, self.dq2 = STUBS["quant"](), STUBS["dequant"]()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.mid = nn.Conv2d(8, 8, 1)
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        y = self.dq1(F.relu(self.c1(self.q1(x))))
        y = y * torch.sigmoid(self.mid(y))
        return self.dq2(self.c2(self.q2(y)))


class PlainNet(nn.Module):
    """conv-BN-ReLU, max pool, conv, average pool, linear: the quant_off case (nothing refused)."""
    def __init__(self):
        super().__init__()
        self.c1 = corpus_models.cbr(3, 8)
        self.pool = nn.MaxPool2d(2)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.c2(self.pool(self.c1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class PReLUNet(nn.Module):
    """conv, nn.PReLU(8) (per-channel slopes), conv."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.PReLU(8)
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)
        with torch.no_grad():
            self.act.weight.copy_(0.05 + 0.4 * torch.rand(8))

    def forward(self, x):
        return self.c2(self.act(self.c1(x)))


class AttentionMatmul(nn.Module):
    """Three convs as query, key and value tokens (flattened), ``q @ k.transpose(-2, -1)``, softmax,
    ``attn @ v``, a linear head: two matmuls of two tensors, the first with its transpose folded into
    ``transpose_b``."""
    def __init__(self):
        super().__init__()
        self.q = nn.Conv2d(3, 8, 3, padding=1)
        self.k = nn.Conv2d(3, 8, 3, padding=1)
        self.v = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(256, 4)

    def forward(self, x):
        q, k, v = self.q(x).flatten(2), self.k(x).flatten(2), self.v(x).flatten(2)
        return self.fc(torch.softmax(q @ k.transpose(-2, -1), -1) @ v)


class DeadValue(nn.Module):
    """conv, ReLU, conv, with a value forward computes and never uses (``kind``): a permute, a view, a
    reshape, a conv call on the input, a ReLU, ``y + 1``, a dead chain (conv, ReLU, flatten), a module never
    called, one piece of a split (``a, b = torch.split(y, 4, 1)``, ``b`` unused or ``a`` unused), or an in-place
    ``y.relu_()`` after the last read of ``y``."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(4 if kind.startswith("dead_split") else 8, 4, 3, padding=1)
        self.c3 = nn.Conv2d(3 if kind == "dead_conv" else 8, 8, 1)  # called only by dead_conv and dead_chain

    def forward(self, x):
        y = self.c1(x)
        if self.kind == "dead_permute":
            z = y.permute(0, 2, 3, 1)  # noqa: F841
        elif self.kind == "dead_view":
            z = y.view(y.size(0), -1)  # noqa: F841
        elif self.kind == "dead_reshape":
            z = y.reshape(-1, 8)  # noqa: F841
        elif self.kind == "dead_conv":
            z = self.c3(x)  # noqa: F841
        elif self.kind == "dead_relu":
            z = F.relu(y)  # noqa: F841
        elif self.kind == "dead_add":
            z = y + 1  # noqa: F841
        elif self.kind == "dead_chain":
            z = F.relu(self.c3(y)).flatten(1)  # noqa: F841
        elif self.kind == "dead_split":
            y, _ = torch.split(y, 4, 1)
        elif self.kind == "dead_split_first":
            _, y = torch.split(y, 4, 1)
        elif self.kind == "dead_inplace":
            out = self.c2(F.relu(y))
            y.relu_()  # writes y, which nothing reads after
            return out
        return self.c2(F.relu(y))


class EllipsisSplitChain(nn.Module):
    """A chain of slices split by an Ellipsis after a None (``y[:, None, 2:6, ..., 0:4]``: torch.jit records
    slices of dims 2 and 4, which nndct merges into one strided slice whose forward slices dims 2 and 3), read
    by a linear layer on the last dimension (4 in torch's tensor, 16 in the real quantizer's)."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(F.relu(self.c1(x))[:, None, 2:6, ..., 0:4])  # (N, 1, 4, 16, 4)


class ReturnedSlice(nn.Module):
    """A model returning a slice of a value and the value itself (``kind``): ``y[:, 2:6], y`` with ``y`` a
    ReLU's output (``ret_slice``), the same whole value first (``ret_whole_first``), the slice of a ReLU of
    a returned conv output (``ret_slice_of_relu``: ``relu(y)[:, 2:6], y``), ``y`` read by a conv too
    (``ret_slice_conv``: ``y[:, 2:6], y, c2(y)``), the slice read by a conv too (``ret_slice_read``:
    ``s, c2(s)`` with ``s = y[:, 2:6]``), ``y`` returned twice (``ret_twice``: ``y, y[:, 2:6], y``)."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(4 if kind == "ret_slice_read" else 8, 4, 3, padding=1)

    def forward(self, x):
        y = self.c1(x)
        if self.kind == "ret_slice_of_relu":
            return F.relu(y)[:, 2:6], y
        y = F.relu(y)
        if self.kind == "ret_whole_first":
            return y, y[:, 2:6]
        if self.kind == "ret_slice_conv":
            return y[:, 2:6], y, self.c2(y)
        if self.kind == "ret_twice":
            return y, y[:, 2:6], y
        if self.kind == "ret_slice_read":
            s = y[:, 2:6]
            return s, self.c2(s)
        return y[:, 2:6], y


class InPlaceWrite(nn.Module):
    """conv, ReLU, conv with an in-place write whose result nothing uses (``kind``): into the input after its
    last read (``x.add_(1)``), into a buffer (``self.buf.add_(1)``), into a slice or a flat view of the first
    conv's output (``y[:, 0:2].zero_()``, ``y.view(-1).add_(1)``) after its last read (``_unread``) or before
    the ReLU reads it (``_read``), or into the output of a module without parameters that nothing reads
    (``self.pool(y).relu_()``)."""
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)
        self.register_buffer("buf", torch.zeros(1, 8, 1, 1))
        self.pool = nn.MaxPool2d(2)

    def _write(self, x, y):
        if self.kind == "inplace_input":
            x.add_(1)
        elif self.kind == "inplace_buffer":
            self.buf.add_(1)
        elif self.kind == "pool_write_unread":
            self.pool(y).relu_()
        elif self.kind.startswith("slice_zero"):
            y[:, 0:2].zero_()
        else:
            y.view(-1).add_(1)

    def forward(self, x):
        y = self.c1(x)
        if self.kind.endswith("_read"):
            self._write(x, y)
            return self.c2(F.relu(y))
        out = self.c2(F.relu(y))
        self._write(x, y)
        return out



class AugmentedAdd(nn.Module):
    """conv, ``identity = y``, ``y += 1`` and a ReLU and conv on ``y``, plus ``identity``: torch.jit records the
    ``+=`` as ``aten::add_``, and both names read its result."""
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = self.c1(x)
        identity = y
        y += 1
        return self.c2(F.relu(y)) + identity

def _kind(cls, kind):
    return lambda: cls(kind)


IMAGE = [(3, 16, 16)]
# name -> (maker, input shapes without the batch dimension)
CORPUS = {
    "layernorm_tokens": (LayerNormTokens, IMAGE),
    "layernorm_channels_last": (LayerNormChannelsLast, IMAGE),
    "expand_cls": (ExpandClsToken, IMAGE),
    "index_gather": (IndexGather, IMAGE),
    "conv1d": (Conv1dNet, [(8, 32)]),
    "pixel_shuffle": (PixelShuffleNet, IMAGE),
    "instance_norm": (InstanceNormNet, IMAGE),
    "reflect_module": (_kind(PadNet, "reflect_module"), IMAGE),
    "reflect_fpad": (_kind(PadNet, "reflect_fpad"), IMAGE),
    "replicate_module": (_kind(PadNet, "replicate_module"), IMAGE),
    "conv_same": (ConvSame, IMAGE),
    "rdiv": (RDiv, IMAGE),
    "max_method": (_kind(MaxDim, "max_method"), IMAGE),
    "max_function": (_kind(MaxDim, "max_function"), IMAGE),
    "topk": (_kind(MaxDim, "topk"), IMAGE),
    "int_index": (_kind(Indexing, "int_index"), IMAGE),
    "none_index": (_kind(Indexing, "none_index"), IMAGE),
    "ellipsis_index": (_kind(Indexing, "ellipsis_index"), IMAGE),
    "int_slice_index": (_kind(MixedIndexing, "int_slice_index"), IMAGE),
    "none_int_slice_index": (_kind(MixedIndexing, "none_int_slice_index"), IMAGE),
    "int_slice_int_index": (_kind(MixedIndexing, "int_slice_int_index"), IMAGE),
    "none_slice_index": (_kind(MixedIndexing, "none_slice_index"), IMAGE),
    "ellipsis_slices_index": (_kind(SliceChains, "ellipsis_slices_index"), IMAGE),
    "slice_read_twice_index": (_kind(SliceChains, "slice_read_twice_index"), IMAGE),
    "merged_slices_index": (_kind(SliceChains, "merged_slices_index"), IMAGE),
    "param_add": (_kind(ParamOperand, "param_add"), IMAGE),
    "param_mul": (_kind(ParamOperand, "param_mul"), IMAGE),
    "param_tokens": (ParamTokens, IMAGE),
    "square": (_kind(SameTwice, "square"), IMAGE),
    "cat_self": (_kind(SameTwice, "cat_self"), IMAGE),
    "lstm": (LSTMNet, [(6, 8)]),
    "quantstub": (QuantStubNet, IMAGE),
    "quant_off": (PlainNet, IMAGE),
    "prelu": (PReLUNet, IMAGE),
    "attention_matmul": (AttentionMatmul, IMAGE),
    "dead_permute": (_kind(DeadValue, "dead_permute"), IMAGE),
    "dead_view": (_kind(DeadValue, "dead_view"), IMAGE),
    "dead_reshape": (_kind(DeadValue, "dead_reshape"), IMAGE),
    "dead_conv": (_kind(DeadValue, "dead_conv"), IMAGE),
    "dead_relu": (_kind(DeadValue, "dead_relu"), IMAGE),
    "dead_add": (_kind(DeadValue, "dead_add"), IMAGE),
    "dead_chain": (_kind(DeadValue, "dead_chain"), IMAGE),
    "unused_module": (_kind(DeadValue, "unused_module"), IMAGE),
    "dead_split": (_kind(DeadValue, "dead_split"), IMAGE),
    "dead_split_first": (_kind(DeadValue, "dead_split_first"), IMAGE),
    "dead_inplace": (_kind(DeadValue, "dead_inplace"), IMAGE),
    "ellipsis_split_index": (EllipsisSplitChain, IMAGE),
    "ret_slice": (_kind(ReturnedSlice, "ret_slice"), IMAGE),
    "ret_whole_first": (_kind(ReturnedSlice, "ret_whole_first"), IMAGE),
    "ret_slice_of_relu": (_kind(ReturnedSlice, "ret_slice_of_relu"), IMAGE),
    "ret_slice_conv": (_kind(ReturnedSlice, "ret_slice_conv"), IMAGE),
    "ret_slice_read": (_kind(ReturnedSlice, "ret_slice_read"), IMAGE),
    "ret_twice": (_kind(ReturnedSlice, "ret_twice"), IMAGE),
    "inplace_input": (_kind(InPlaceWrite, "inplace_input"), IMAGE),
    "inplace_buffer": (_kind(InPlaceWrite, "inplace_buffer"), IMAGE),
    "slice_zero_unread": (_kind(InPlaceWrite, "slice_zero_unread"), IMAGE),
    "slice_zero_read": (_kind(InPlaceWrite, "slice_zero_read"), IMAGE),
    "view_add_unread": (_kind(InPlaceWrite, "view_add_unread"), IMAGE),
    "view_add_read": (_kind(InPlaceWrite, "view_add_read"), IMAGE),
    "pool_write_unread": (_kind(InPlaceWrite, "pool_write_unread"), IMAGE),
    "iadd_alias": (AugmentedAdd, IMAGE),
}


def make_model(name):
    """The seeded model (corpus_models.seeded_model)."""
    return seeded_model(CORPUS[name][0])


def make_inputs(name, n, seed):
    """One float32 batch of ``n`` per model input (a list)."""
    return seeded_inputs(CORPUS[name][1], n, seed)


def seeded_sha256(name):
    """corpus_models.seeded_sha256 of this corpus's model ``name``."""
    return corpus_models.seeded_sha256(name, sys.modules[__name__])


if __name__ == "__main__":
    from tests.support import corpus_refused
    # --nndct_quant_off stays on the command line (sys.argv), where the real quantizer reads it
    corpus_models.main(corpus_refused, [a for a in sys.argv[1:] if a != "--nndct_quant_off"])
