"""Public cases P01, P02, P06 and P08 (shared/cases/PUBLIC_CASES.md): preprocessing and its boundaries."""
import numpy as np
import pytest
import torch

from pipeline.boundary import QuantizerBoundary, compile_example, contiguous_parameters
from pipeline.data.batching import iter_batches, split
from pipeline.data.sources import open_source
from pipeline.stages import build_stages
from pipeline.ledger import Ledger
from pipeline.tensors import fingerprint_array, shares_memory

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]
TO_NCHW = {"type": "layout", "src": "NHWC", "dst": "NCHW"}


def _run(source, specs, batch_size, mean=MEAN, std=STD, ledger=None):
    """source -> stages -> quantizer boundary, the way the runner drives it; returns the batches."""
    compose = build_stages(specs, source=source)
    boundary = QuantizerBoundary(mean, std, channel_order=compose.boundary_channel_order)
    return [boundary(compose(view, ledger, i), ledger, i)
            for i, (view, _) in enumerate(iter_batches(source, slice(0, len(source)), batch_size))]


def _fix_neuron_in_place(x, fix_pos=4):
    """What the real quantizer does to its input (docs/quantizer.md#input-rounded-in-place): fake-quantize it in place
    (half_up at ``fix_pos``, codes -128..127), leaving the rounded values in the caller's buffer."""
    scale = float(2 ** fix_pos)
    x.copy_(torch.floor(x * scale + 0.5).clamp_(-128, 127) / scale)
    return x


def test_p01_numpy_bgr_to_rgb_flip_with_a_negative_stride():
    bgr = np.random.default_rng(1).integers(0, 256, size=(4, 32, 32, 3), dtype=np.uint8)
    rgb = bgr[..., ::-1]
    assert rgb.strides[-1] == -1
    with pytest.raises(ValueError, match="negative"):
        torch.from_numpy(rgb)  # the error users hit when they hand such an array to torch
    ledger = Ledger()
    flipped = _run(open_source({"type": "array", "images": rgb}, "."), [TO_NCHW], 2, ledger=ledger)
    copied = _run(open_source({"type": "array", "images": rgb.copy()}, "."), [TO_NCHW], 2)
    want = (rgb.copy().transpose(0, 3, 1, 2).astype(np.float32) - np.float32(MEAN)[:, None, None]) \
        / np.float32(STD)[:, None, None]
    got = torch.cat(flipped).numpy()
    assert np.array_equal(got, torch.cat(copied).numpy())
    assert np.array_equal(got, want)
    summary = ledger.summary()
    assert summary["batches"] == 2 and summary["copies_per_batch"] == 1
    assert summary["copies_by_stage"] == {"quantizer_boundary": 2}
    assert summary["bytes_allocated_per_batch"] == 2 * 3 * 32 * 32 * 4
    assert "channel order [2, 1, 0]" in summary["stages"][-1]["note"]


def test_p02_permuted_nhwc_batch_reaches_the_boundary_as_owned_c_contiguous_nchw():
    nhwc = torch.from_numpy(np.random.default_rng(2).integers(0, 256, size=(3, 5, 7, 3), dtype=np.uint8))
    view = nhwc.permute(0, 3, 1, 2)
    assert not view.is_contiguous()
    out = QuantizerBoundary([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])(view)
    expected = view.contiguous().float()
    assert out.is_contiguous() and out.stride() == (3 * 5 * 7, 5 * 7, 7, 1)
    assert not shares_memory(out, nhwc)
    assert torch.equal(out, expected)
    raw = torch.as_strided(out, (out.numel(),), (1,), out.storage_offset())  # memory order, not logical order
    assert torch.equal(raw, expected.flatten())
    assert torch.equal(raw[:35], nhwc[0, :, :, 0].flatten().float())  # first plane: channel 0 of sample 0


def test_p06_mean_subtraction_on_uint8_is_done_in_float32():
    pixel = np.full((1, 1, 1, 1), 10, dtype=np.uint8)
    assert int((torch.from_numpy(pixel) - 104)[0, 0, 0, 0]) == 162  # the uint8 wrap-around trap
    out = QuantizerBoundary([104.0], [1.0])(pixel)
    assert out.dtype == torch.float32 and float(out) == -94.0
    scaled = QuantizerBoundary([104.0], [58.395])(pixel)
    assert float(scaled) == float(np.float32(-94.0) / np.float32(58.395)) < 0


def test_p08_the_callers_writable_array_is_bit_identical_after_every_step():
    images = np.random.default_rng(8).integers(0, 256, size=(12, 16, 16, 3), dtype=np.uint8)
    assert images.flags.writeable
    source_hash = fingerprint_array(images)
    source = open_source({"type": "array", "images": images, "labels": np.arange(12) % 10}, ".")
    specs = [{"type": "bgr_to_rgb", "layout": "NHWC"}, TO_NCHW, {"type": "center_crop", "height": 12, "width": 12}]
    compose = build_stages(specs, source=source)
    boundary = QuantizerBoundary(MEAN, STD, channel_order=compose.boundary_channel_order)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(4, 10)).eval()
    ledgers = {"calib": Ledger(), "eval": Ledger()}
    parts = split(len(source), {"calib": 0.5, "eval": 0.5})
    for name, ledger in ledgers.items():
        for i, (view, _) in enumerate(iter_batches(source, parts[name], 4)):
            x = boundary(compose(view, ledger, i), ledger, i)
            before = x.clone()
            model(_fix_neuron_in_place(x))  # the quantizer overwrites its input...
            assert not torch.equal(x, before)  # ...really: the values moved to the 2^-4 grid
    example = compile_example(boundary(compose(next(iter_batches(source, parts["eval"], 1))[0])), ledger)
    contiguous_parameters(model, ledger)(_fix_neuron_in_place(example))  # export traces the example
    assert fingerprint_array(images) == source_hash == fingerprint_array(images.copy())
    for ledger in ledgers.values():
        summary = ledger.summary()
        assert summary["batches"] == 2 and summary["copies_per_batch"] == 1
    assert [r["stage"] for r in ledger.summary()["run_level"]] == ["compile_boundary", "compile_boundary:parameters"]


def test_p08_negative_control_contiguous_alone_would_let_the_quantizer_write_the_source():
    images = np.random.default_rng(9).random((2, 3, 4, 4)).astype(np.float32)  # already float32 NCHW
    before = fingerprint_array(images)
    x = torch.from_numpy(images).contiguous()  # the same memory: contiguous() had nothing to reorder
    _fix_neuron_in_place(x)
    assert fingerprint_array(images) != before
    images2 = np.random.default_rng(9).random((2, 3, 4, 4)).astype(np.float32)
    _fix_neuron_in_place(QuantizerBoundary([0.0] * 3, [1.0] * 3)(images2))
    assert fingerprint_array(images2) == before
