"""Segmentation heads against the real quantizer (issue 23): the nndct_shape nodes of sizes read
from ``x.shape`` (LR-ASPP's ``F.interpolate(..., size=x.shape[-2:])``), the quantized bilinear
resize, its exact ONNX flavour and its xmodel ``resize`` op.

Real values: the graph_md5 below and tests/data/corpus_real/seg_* were made by the real
pytorch_nndct 3.5 (tests/data/README.md) on the models here and in tests/support/corpus_segmentation.py.
"""
import copy
import os

import numpy as np
import pytest
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

import pipeline.fixpoint as fixpoint
from tests.support import DATA, SUPPORT, torch_line_of_references
from pipeline.cpu import cpu_capability
from pipeline.errors import ExportError
from pipeline.quantizers.sim.export import export_onnx
from pipeline.fx.capture import capture
from pipeline.quantizers import quant_info as qi
from pipeline.quantizers.quant_config import load_quant_config

from tests.support import corpus_models
from tests.support import corpus_segmentation as corpus
from tests.support.xmodel_compare import assert_same_xmodel

REAL = os.path.join(DATA, "corpus_real")
CONFIGS = {"default": None, "nocle": {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}}
# The resize of seg_uneven (9x12 -> 17x23) has weights whose float32 sums round, so torch's bilinear
# kernel, which the real quantizer and the simulation both call, gives results that move with torch's
# vector unit: with ATEN_CPU_CAPABILITY=default the real quantizer and the simulation agree bit for
# bit, and both have 2 of the 6256 outputs 1 LSB off the reference made with AVX-512 kernels.
VECTOR_UNIT_DEPENDENT = {"seg_uneven"}
REFERENCE_CPU = "AVX512"
# torch 1.x's bilinear kernel is another computation than the references' torch's (measured on this
# resize with torch 1.13.1: 9331 of its 12512 float results differ from torch 2.13.0's, by at most
# 5.96e-7 = 2**-21; torch 2.13's AVX2 and AVX-512 kernels agree). The real quantizer calls the kernel
# of the torch it runs with, as the simulation does: with torch 2.13's resize results put in its
# place, the simulation on torch 1.13 gives the reference bit for bit. So under torch 1.x an output
# may differ from the reference only where the resize's value, moved by up to KERNEL_DELTA (twice
# the measured bound), would round to another step of its fix position (_assert_kernel_explained).
KERNEL_DELTA = 2.0 ** -20


class _Sizes(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 4, 1)
        self.kind = kind

    def forward(self, x):
        y = torch.relu(self.c1(x))
        size = {"slice": lambda: x.shape[-2:], "positive": lambda: x.shape[2:], "size": lambda: x.size()[2:],
                "dims": lambda: (x.size(2), x.size(-1))}[self.kind]()
        return self.c2(F.interpolate(y, size=size, mode="bilinear", align_corners=False))


class _Whole(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 8, 1)
        self.kind = kind

    def forward(self, x):
        a = self.c1(x)
        b = torch.relu(a.flatten(1))
        return self.c2(b.reshape(a.shape) if self.kind == "whole" else b.reshape(a.shape[:2] + a.shape[2:]))


class _Early(nn.Module):
    def __init__(self, unpack):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(8, 4, 1)
        self.unpack = unpack

    def forward(self, x):
        if self.unpack:
            h, w = x.shape[-2:]
            size = (h, w)
        else:
            size = x.shape[-2:]
        y = self.c2(torch.relu(self.c1(x)))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


# graph_md5 of the real quantizer's quant_info.json for each model (on a (1, 3, 17, 23) input)
REAL_MD5 = {
    "slice": (lambda: _Sizes("slice"), "b77ef0c44fd717fe7443af248d78538b"),
    "positive": (lambda: _Sizes("positive"), "b77ef0c44fd717fe7443af248d78538b"),
    "size": (lambda: _Sizes("size"), "b77ef0c44fd717fe7443af248d78538b"),
    "dims": (lambda: _Sizes("dims"), "b77ef0c44fd717fe7443af248d78538b"),
    "whole": (lambda: _Whole("whole"), "1307587c0a164799f2de82c3da8b333f"),
    "concatenated": (lambda: _Whole("concatenated"), "1307587c0a164799f2de82c3da8b333f"),
    "early": (lambda: _Early(False), "94fbe9766c560476699f80c20b6ee6f1"),
    "unpacked": (lambda: _Early(True), "94fbe9766c560476699f80c20b6ee6f1"),
}


@pytest.mark.parametrize("kind", list(REAL_MD5))
def test_sizes_read_from_a_torch_size_are_one_shape_node_each(kind):
    """torch.jit records one aten::size per dimension read (where .shape is read, dimension order,
    unread ones dropped); nndct makes each an nndct_shape node: x.shape[-2:] is two nodes."""
    make, md5 = REAL_MD5[kind]
    graph = capture(make().eval(), torch.zeros(1, 3, 17, 23), load_quant_config(None).rewrites())
    assert graph.graph_md5() == md5
    names = [n.name for n in graph.nodes]
    if kind in ("slice", "positive", "size"):  # the real quantizer's names
        assert names == ["nndct_input_0", "nndct_conv2d_1", "nndct_relu_2", "nndct_shape_3", "nndct_shape_4",
                         "nndct_resize_5", "nndct_conv2d_6"]
    if kind == "unpacked":  # read before the layers, only the two sizes used
        assert names[:3] == ["nndct_input_0", "nndct_shape_1", "nndct_shape_2"] and names[-1] == "nndct_resize_6"
    if kind == "whole":
        assert [n.name for n in graph.by_name["nndct_reshape_8"].inputs] == [
            "nndct_relu_3", "nndct_shape_4", "nndct_shape_5", "nndct_shape_6", "nndct_shape_7"]


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    return corpus_models.run_phases(os.path.join(SUPPORT, "corpus_segmentation.py"), tmp_path_factory.mktemp("seg"),
                                    CONFIGS)


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_segmentation_head_equals_the_real_quantizer(name, cfg, phases):
    """Every quant_info.json entry, the graph_md5 and every test-mode output bit, bilinear resizes
    by 2x and 4x, to an uneven size and with align_corners included."""
    real = os.path.join(REAL, name)
    with open(os.path.join(real, "seeded.sha256")) as f:
        assert corpus_models.seeded_sha256(name, corpus) == f.read().strip(), \
            "the seeds no longer make the weights and data the reference was made from"
    real = real if cfg == "default" else os.path.join(real, cfg)
    folder = os.path.join(phases[cfg], name)
    mine, theirs = qi.read_quant_info(folder), qi.read_quant_info(real)
    for key in ("param", "output", "input", "graph_md5"):
        assert mine[key] == theirs[key], key
    got, want = np.load(os.path.join(folder, "y_0.npy")), np.load(os.path.join(real, "y_0.npy"))
    assert got.dtype == want.dtype
    if name in VECTOR_UNIT_DEPENDENT and not torch_line_of_references():
        _assert_kernel_explained(name, folder, None if CONFIGS[cfg] is None else phases[cfg] + ".json", got, want)
    elif name in VECTOR_UNIT_DEPENDENT and cpu_capability() != REFERENCE_CPU:
        lsb = np.min(np.diff(np.unique(want)))  # the output's grid
        assert np.abs(got - want).max() <= lsb and (got != want).mean() < 1e-3
    else:
        assert np.array_equal(got.view(np.int32), want.view(np.int32))


def _assert_kernel_explained(name, folder, config_file, got, want):
    """Under a torch whose bilinear kernel is not the references' (KERNEL_DELTA above): the outputs
    within 1 LSB of the reference, and every differing one (n, c, h, w) read (1x1 conv) a resize
    value at (n, :, h, w) within KERNEL_DELTA of a rounding tie of the resize's fix position. The
    simulation's test-mode values are recorded again here, on the eval samples of the phase
    (``config_file``: the phase's quant_config_file, None for the default)."""
    from pipeline.apis import torch_quantizer
    from pipeline.quantizers.sim.xmodel import verify
    q = torch_quantizer("test", corpus.make_model(name), tuple(corpus.make_inputs(name, 4, 1)), output_dir=folder,
                        device=torch.device("cpu"), quant_config_file=config_file)
    outputs, values = verify.record(q.quant_model, corpus.make_inputs(name, 4, 3))
    assert np.array_equal(outputs[0].numpy().view(np.int32), got.view(np.int32))  # the phase's outputs
    resize, = [n for n in values if n.op == "call_function" and n.target is F.interpolate]
    fix, = [n for n in resize.users if n.target is fixpoint.fake_quant]  # (value, fix_pos, bits, method)
    conv, = fix.users  # the 1x1 conv that reads the resize: output (n, c, h, w) reads (n, :, h, w)
    assert tuple(q.quant_model.get_submodule(str(conv.target)).kernel_size) == (1, 1)
    scaled = values[resize].numpy().astype(np.float64) * 2.0 ** fix.args[1]
    near_tie = np.abs(scaled - np.floor(scaled) - 0.5) <= KERNEL_DELTA * 2.0 ** fix.args[1]
    lsb = np.min(np.diff(np.unique(want)))  # the output's grid
    assert np.abs(got - want).max() <= lsb
    n, c, h, w = np.nonzero(got != want)
    unexplained = [(a, b, d, e) for a, b, d, e in zip(n, c, h, w) if not near_tie[a, :, d, e].any()]
    assert not unexplained, ("outputs differing from the reference although no resize value they read is within "
                             "%g of a rounding tie: %s" % (KERNEL_DELTA, unexplained[:5]))


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_segmentation_head_exact_onnx(name, phases):
    """Power-of-two scales (and align_corners with (in-1)/(out-1) = 1/2) export and run in ONNX
    Runtime bit for bit as the simulation; the uneven size is refused, saying why."""
    pytest.importorskip("onnxruntime")
    folder = os.path.join(phases["default"], name)
    uneven = "bilinear 9x12 -> 17x23: its weights have 22 (rows) + 24 (columns) fractional bits"
    if not corpus_models.exported(folder, "onnx", uneven if name == "seg_uneven" else None):
        return
    got = corpus_models.exact_onnx_outputs(folder, corpus.make_inputs(name, 4, 3))[0]
    assert np.array_equal(got.view(np.int32), np.load(os.path.join(folder, "y_0.npy")).view(np.int32))


@pytest.mark.parametrize("name", list(corpus.CORPUS))
def test_segmentation_head_xmodel_equals_the_real_one(name, phases):
    """The bilinear resizes as the real quantizer writes them (mode BILINEAR, half_pixel_centers
    unless align_corners, the size a stack of constants): the file equals the real one, reads back
    and runs like the simulation on a batch-1 input the export did not see."""
    from pipeline.apis import torch_quantizer
    from pipeline.xir import reader
    from pipeline.quantizers.sim.xmodel import verify
    folder = os.path.join(phases["default"], name)
    files = os.listdir(os.path.join(folder, "xmodel"))
    assert len(files) == 1 and files[0].endswith("_int.xmodel")
    assert_same_xmodel(os.path.join(folder, "xmodel", files[0]), os.path.join(REAL, name, files[0]))
    graph = reader.check(reader.read_xmodel(os.path.join(folder, "xmodel", files[0])))
    q = torch_quantizer("test", corpus.make_model(name), tuple(corpus.make_inputs(name, 4, 1)), output_dir=folder,
                        device=torch.device("cpu"))
    report = verify.compare(graph, q._session, q.quant_model, [x[:1] for x in corpus.make_inputs(name, 4, 9)])
    assert report["elements"] > 0 and report["mismatches"] == 0 and report["nodes_differing"] == []


class _Resize(nn.Module):
    def __init__(self, fix_in, fix_out, bits, **kwargs):
        super().__init__()
        self.fix_in, self.fix_out, self.bits, self.kwargs = fix_in, fix_out, bits, kwargs

    def forward(self, x):
        x = fixpoint.fake_quant(x, self.fix_in, self.bits, "half_up")
        return fixpoint.fake_quant(F.interpolate(x, **self.kwargs), self.fix_out, self.bits, "half_up")


def _half_even(x, p, bits, method):
    """ONNX QuantizeLinear -> DequantizeLinear (ties to even), for the qdq flavour's reference."""
    return torch.round(x * 2.0 ** p).clamp(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) * 2.0 ** -p


def _random_exact_resizes(rng, count):
    """(channels, h, w, interpolate kwargs) with power-of-two weights."""
    for _ in range(count):
        h, w = (int(v) for v in rng.integers(1, 20, 2))
        c = int(rng.choice([1, 3, 4, 8, 17, 33]))  # channel counts that take torch's different kernels
        kind = int(rng.integers(0, 3))
        if kind == 0:
            fh, fw = (int(v) for v in rng.choice([1, 2, 4, 8], 2))
            yield c, h, w, dict(size=((h - 1) * fh + 1, (w - 1) * fw + 1), mode="bilinear", align_corners=True)
        elif kind == 1:
            fh, fw = (int(v) for v in rng.choice([1, 2, 4, 8, 16], 2))
            yield c, h, w, dict(size=(h * fh, w * fw), mode="bilinear", align_corners=False)
        else:
            yield c, 2 * h, 2 * w, dict(scale_factor=float(rng.choice([0.5, 2, 4])), mode="bilinear",
                                        align_corners=False)


def test_bilinear_onnx_is_exact_on_random_inputs(tmp_path):
    """60 random power-of-two resizes (both flavours, 4 to 8 bits, 1 to 33 channels, outputs
    small and large enough for torch's vectorised and separable kernels) in ONNX Runtime equal
    the simulation (the GraphModule) bit for bit; 1490 such cases (128 million outputs) did before
    this was written."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for i, (c, h, w, kwargs) in enumerate(_random_exact_resizes(rng, 60)):
        bits = int(rng.choice([4, 6, 8]))
        fix_in = int(rng.integers(-2, 8))
        gm = torch.fx.symbolic_trace(_Resize(fix_in, fix_in + int(rng.integers(-1, 3)), bits, **kwargs))
        gm.quant_info, gm.output_fix_pos = {}, None
        x = torch.from_numpy((rng.standard_normal((3, c, h, w)) * 2.0 ** (bits - 2 - fix_in)).astype(np.float32))
        flavour = ("exact", "qdq")[i % 2]
        path = str(tmp_path / ("r%d.onnx" % i))
        export_onnx(gm, x[:1].clone(), path, flavour)
        got = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"]).run(
            None, {"input": x.numpy()})[0]
        ref = gm
        if flavour == "qdq":
            ref = copy.deepcopy(gm)
            for n in ref.graph.nodes:
                if n.target is fixpoint.fake_quant:
                    n.target = _half_even
            ref.recompile()
        with torch.no_grad():
            want = ref(x).numpy() + np.float32(0)  # -0.0 of the half-even reference is 0.0 in ONNX
        assert np.array_equal((got + np.float32(0)).view(np.int32), want.view(np.int32)), (c, h, w, kwargs, bits)


@pytest.mark.parametrize("kwargs, why", [
    (dict(size=(17, 23), mode="bilinear", align_corners=False), "its weights have 22 (rows) + 24 (columns)"),
    (dict(scale_factor=3.0, mode="bilinear", align_corners=False), "fractional bits"),
    (dict(size=(16, 24), mode="bilinear", align_corners=True), "fractional bits"),  # 7/15, 11/23
])
def test_bilinear_onnx_refuses_inexact_weights(tmp_path, kwargs, why):
    """Where the float sums round, torch's result depends on its kernel (the channel count picks
    it) and no ONNX graph follows it: refused with the bits the weights need."""
    gm = torch.fx.symbolic_trace(_Resize(5, 5, 8, **kwargs))
    gm.quant_info, gm.output_fix_pos = {}, 5
    with pytest.raises(ExportError, match="bilinear") as err:
        export_onnx(gm, torch.zeros(1, 3, 9, 12) if "size" in kwargs and kwargs["size"] == (17, 23)
                    else torch.zeros(1, 3, 8, 12), str(tmp_path / "r.onnx"), "exact")
    assert why in str(err.value)
