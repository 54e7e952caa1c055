"""The quantizer boundary (one fused owned copy) and the compile boundary."""
import numpy as np
import pytest
import torch

from pipeline.boundary import QuantizerBoundary, compile_example, contiguous_parameters
from pipeline.errors import ConfigError, DataError, PipelineError
from pipeline.ledger import Ledger
from pipeline.tensors import shares_memory

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def _reference(nchw, mean=MEAN, std=STD):
    """(float32(x) - mean) / std in float32 with numpy, the definition the boundary must meet."""
    x = np.asarray(nchw).astype(np.float32)
    m = np.array(mean, np.float32)[None, :, None, None]
    s = np.array(std, np.float32)[None, :, None, None]
    return (x - m) / s


def _images(shape=(3, 9, 10, 3), seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def test_fused_pass_equals_the_float32_definition_for_a_permuted_view():
    nhwc = _images()
    view = torch.from_numpy(nhwc).permute(0, 3, 1, 2)
    out = QuantizerBoundary(MEAN, STD)(view)
    assert out.dtype == torch.float32 and out.shape == (3, 3, 9, 10) and out.is_contiguous()
    assert np.array_equal(out.numpy(), _reference(nhwc.transpose(0, 3, 1, 2)))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64])
def test_every_input_dtype_is_cast_to_float32_before_the_arithmetic(dtype):
    x = (np.random.default_rng(1).standard_normal((2, 3, 4, 5)) * 100).astype(dtype)
    out = QuantizerBoundary([0.5, -1.25, 3.0], [0.3, 7.0, 1.1])(torch.from_numpy(x))
    assert np.array_equal(out.numpy(), _reference(x, [0.5, -1.25, 3.0], [0.3, 7.0, 1.1]))


def test_bfloat16_input_and_float64_output():
    x = torch.randn(2, 3, 4, 4).to(torch.bfloat16)
    out = QuantizerBoundary(MEAN, STD)(x)
    assert torch.equal(out, (x.float() - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1))
    x8 = torch.from_numpy(_images((2, 3, 4, 4)))
    out64 = QuantizerBoundary(MEAN, STD, dtype=torch.float64)(x8)
    assert out64.dtype == torch.float64
    ref = (x8.double() - torch.tensor(MEAN, dtype=torch.float64).view(1, 3, 1, 1)) / torch.tensor(
        STD, dtype=torch.float64).view(1, 3, 1, 1)
    assert torch.equal(out64, ref)


def test_always_a_new_buffer_even_for_contiguous_float32_input():
    x = torch.rand(2, 3, 4, 4)
    assert x.contiguous() is x  # what .contiguous() alone would hand the quantizer
    out = QuantizerBoundary([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])(x)
    assert torch.equal(out, x) and not shares_memory(out, x)
    out.add_(1.0)  # the real quantizer rounds its input in place (docs/quantizer.md#input-rounded-in-place)
    assert torch.equal(x + 1.0, out)


def test_channels_last_layout_has_nchw_shape_and_nhwc_memory():
    nhwc = _images()
    out = QuantizerBoundary(MEAN, STD, layout="channels_last")(torch.from_numpy(nhwc).permute(0, 3, 1, 2))
    assert out.shape == (3, 3, 9, 10) and out.is_contiguous(memory_format=torch.channels_last)
    assert not out.is_contiguous()
    assert np.array_equal(out.numpy(), _reference(nhwc.transpose(0, 3, 1, 2)))
    flat = torch.as_strided(out, (out.numel(),), (1,), out.storage_offset())
    assert np.array_equal(flat.numpy(), _reference(nhwc.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1).ravel())


def test_channel_order_and_numpy_negative_strides_on_any_axis():
    nchw = _images((2, 6, 7, 3)).transpose(0, 3, 1, 2).copy()
    b = QuantizerBoundary(MEAN, STD, channel_order=[2, 0, 1])
    assert np.array_equal(b(torch.from_numpy(nchw)).numpy(), _reference(nchw[:, [2, 0, 1]]))
    for flipped in (nchw[:, ::-1], nchw[:, :, ::-1], nchw[::-1, :, :, ::-1], nchw[:, ::-1, ::-2]):
        out = QuantizerBoundary(MEAN, STD)(flipped)
        assert np.array_equal(out.numpy(), _reference(np.ascontiguousarray(flipped)))
        out = b(flipped)
        assert np.array_equal(out.numpy(), _reference(np.ascontiguousarray(flipped)[:, [2, 0, 1]]))


def test_read_only_memmap_and_zero_stride_inputs(tmp_path):
    nchw = _images((2, 3, 5, 5))
    np.save(str(tmp_path / "x.npy"), nchw)
    mm = np.load(str(tmp_path / "x.npy"), mmap_mode="r")
    assert np.array_equal(QuantizerBoundary(MEAN, STD)(mm).numpy(), _reference(nchw))
    gray = torch.from_numpy(_images((2, 1, 5, 5)))
    out = QuantizerBoundary(MEAN, STD)(gray.expand(2, 3, 5, 5))
    assert np.array_equal(out.numpy(), _reference(np.repeat(gray.numpy(), 3, axis=1)))


def test_large_samples_are_tiled_by_rows_with_the_same_result():
    x = torch.from_numpy(_images((2, 37, 41, 3))).permute(0, 3, 1, 2)
    whole = QuantizerBoundary(MEAN, STD)(x)
    tiled = QuantizerBoundary(MEAN, STD, block_bytes=5 * 3 * 41 * 4)
    assert list(tiled._tiles((2, 3, 37, 41)))[:2] == [(slice(0, 1), slice(0, 5)), (slice(0, 1), slice(5, 10))]
    assert torch.equal(tiled(x), whole)
    assert torch.equal(QuantizerBoundary(MEAN, STD, channel_order=[2, 1, 0], block_bytes=300)(x),
                       QuantizerBoundary(MEAN, STD, channel_order=[2, 1, 0])(x))
    cl_tiled = QuantizerBoundary(MEAN, STD, layout="channels_last", channel_order=[1, 2, 0], block_bytes=700)(x)
    assert cl_tiled.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(cl_tiled, QuantizerBoundary(MEAN, STD, channel_order=[1, 2, 0])(x))


def test_a_caller_that_drops_each_batch_gets_the_most_recently_used_buffer_every_time():
    # Two buffers exist (two outputs were alive at once); afterwards a caller that drops each output
    # before the next call must keep getting the one it just released (still in cache), not cycle
    # through every free buffer of the pool.
    b = QuantizerBoundary(MEAN, STD)
    x = torch.from_numpy(_images()).permute(0, 3, 1, 2)
    first, second = b(x), b(x)
    addresses = {first.data_ptr(), second.data_ptr()}
    assert len(addresses) == 2
    del first, second
    seen = []
    for _ in range(4):
        out = b(x)
        seen.append(out.data_ptr())
        del out
    assert len(set(seen)) == 1 and seen[0] in addresses


def test_a_buffer_is_reused_only_when_nothing_handed_out_refers_to_it():
    b = QuantizerBoundary(MEAN, STD)
    x = torch.from_numpy(_images()).permute(0, 3, 1, 2)
    ledger = Ledger()
    first = b(x, ledger, 0)
    ptr = first.data_ptr()
    second = b(x, ledger, 1)  # first is alive: a fresh buffer
    assert second.data_ptr() != ptr
    keep_view = first[1:, :2]
    del first
    third = b(x, ledger, 2)  # a view of the first output keeps its buffer busy
    assert third.data_ptr() != ptr
    keep_numpy = keep_view.numpy()
    del keep_view
    fourth = b(x, ledger, 3)  # so does a numpy array made from it
    assert fourth.data_ptr() != ptr
    before = keep_numpy.copy()
    del keep_numpy, second, third
    fifth = b(x, ledger, 4)  # nothing refers to the old buffers any more: one is recycled
    assert fifth.data_ptr() != fourth.data_ptr()
    assert np.array_equal(fifth.numpy(), _reference(x.numpy()))
    assert before.shape == (2, 2, 9, 10)
    s = ledger.summary()
    assert s["copies_per_batch"] == 1 and s["batches"] == 5 and s["buffers_recycled"] == 1
    assert s["bytes_allocated_per_batch"] == 3 * 3 * 9 * 10 * 4
    assert s["bytes_fresh_total"] == 4 * 3 * 3 * 9 * 10 * 4  # four fresh buffers, the fifth recycled
    [row] = s["stages"]
    assert row["stage"] == "quantizer_boundary" and row["batches"] == row["copies"] == 5 and row["views"] == 0


def test_a_boundary_output_fed_back_in_is_never_overwritten():
    b = QuantizerBoundary([0.0, 0.0, 0.0], [2.0, 2.0, 2.0])
    x = b(torch.ones(1, 3, 2, 2))
    y = b(x)
    assert torch.equal(x, torch.full((1, 3, 2, 2), 0.5)) and torch.equal(y, torch.full((1, 3, 2, 2), 0.25))


@pytest.mark.parametrize("kernel", ["auto", "torch"])
def test_an_output_on_the_inputs_memory_is_refused(kernel, monkeypatch):
    """A pool that hands out memory the input's elements occupy (a broken contract: the boundary
    would write into the caller's data) raises before writing anything, for torch and numpy inputs,
    on the same bytes or overlapping part of them: the input is unchanged. An output right before or
    after the input's bytes is accepted."""
    shape, size = (1, 3, 4, 5), 60
    base = torch.arange(3 * size, dtype=torch.float32)
    placed = {}
    for start, clash in [(0, True), (size // 2, True), (1 - size, True), (size, False), (-size, False)]:
        b = QuantizerBoundary(MEAN, STD, kernel=kernel)
        x = base[size:2 * size].view(shape)
        out = base[size + start:2 * size + start].view(shape)
        monkeypatch.setattr(b._pool, "take", lambda shape, np_dtype, out=out: (out, False))
        for view in (x, x.numpy(), x.numpy()[:, ::-1]):
            if clash:
                with pytest.raises(PipelineError, match="shares memory with its input"):
                    b(view)
            else:
                placed[start] = b(view)
            assert torch.equal(base[size:2 * size], torch.arange(size, 2 * size, dtype=torch.float32))
    assert set(placed) == {size, -size}


@pytest.mark.parametrize("kwargs, message", [
    ({"mean": [1, 2], "std": [1, 2, 3]}, "mean has 2 values but std has 3"),
    ({"mean": [1, 2, 3], "std": [1, 0, 3]}, r"std: every value must be > 0"),
    ({"mean": [1, float("nan"), 3], "std": [1, 1, 1]}, "finite"),
    ({"mean": "abc", "std": [1, 1, 1]}, "expected a list of numbers"),
    ({"mean": [1, 2, 3], "std": [1, 1, 1], "layout": "NHWC"}, "preprocess.layout"),
    ({"mean": [1, 2, 3], "std": [1, 1, 1], "dtype": torch.float16}, "float32"),
    ({"mean": [1, 2, 3], "std": [1, 1, 1], "channel_order": [2, 1]}, "channel order"),
])
def test_bad_boundary_settings(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        QuantizerBoundary(**kwargs)


def test_bad_batches_say_what_to_do():
    b = QuantizerBoundary(MEAN, STD)
    with pytest.raises(DataError, match="add a layout stage|4-D"):
        b(torch.zeros(2, 3, 4))
    with pytest.raises(DataError, match=r"224 channels on axis 1.*needs a layout stage"):
        b(torch.zeros(1, 224, 224, 3, dtype=torch.uint8))
    with pytest.raises(DataError, match="reads channels the batch does not have"):
        QuantizerBoundary([0.0], [1.0], channel_order=[1])(torch.zeros(1, 1, 2, 2))
    with pytest.raises(DataError, match="integer or float"):
        b(torch.zeros(1, 3, 2, 2, dtype=torch.bool))
    assert b.output_shape((5, 3, 7, 8)) == (5, 3, 7, 8)
    b(torch.zeros(1, 3, 2, 2))  # a plan for this geometry on the CPU, not for another device's tensor
    with pytest.raises(DataError, match="runs on the CPU"):
        b(torch.zeros(1, 3, 2, 2, device="meta"))


def test_compile_example_is_batch_one_owned_contiguous_and_recorded():
    b = QuantizerBoundary(MEAN, STD)
    nhwc = _images((4, 6, 6, 3))
    batch = b(torch.from_numpy(nhwc).permute(0, 3, 1, 2))
    ledger = Ledger()
    example = compile_example(batch, ledger)
    assert example.shape == (1, 3, 6, 6) and example.is_contiguous() and not shares_memory(example, batch)
    assert torch.equal(example, batch[:1])
    expected = batch[:1].clone()
    del batch
    b(torch.from_numpy(_images((4, 6, 6, 3), seed=5)).permute(0, 3, 1, 2))  # recycles the batch's buffer
    assert torch.equal(example, expected)  # the example kept its own memory
    row = ledger.run_level[0]
    assert row["stage"] == "compile_boundary" and row["batch"] is None and row["bytes_allocated"] == 3 * 6 * 6 * 4
    assert ledger.summary()["batches"] == 0
    with pytest.raises(DataError, match="preprocessed float"):
        compile_example(torch.zeros(1, 3, 6, 6, dtype=torch.uint8))


def test_contiguous_parameters_copies_only_what_is_not_contiguous():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    ledger = Ledger()
    assert contiguous_parameters(model, ledger) is model
    assert ledger.run_level[-1]["shares_storage"] is True and ledger.run_level[-1]["bytes_allocated"] == 0
    w = model[0].weight
    model[0].weight = torch.nn.Parameter(w.detach().permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2))
    model[1].register_buffer("running_mean", torch.arange(8.0)[::2])
    assert not model[0].weight.is_contiguous()
    fixed = contiguous_parameters(model, ledger)
    assert fixed is not model and not model[0].weight.is_contiguous()  # the caller's model is unchanged
    assert all(t.is_contiguous() for t in list(fixed.parameters()) + list(fixed.buffers()))
    assert torch.equal(fixed[0].weight, w) and torch.equal(fixed[1].running_mean, torch.arange(8.0)[::2])
    x = torch.randn(1, 3, 5, 5)
    assert torch.allclose(fixed.eval()(x), model.eval()(x), atol=1e-6)  # conv sums in another order
    row = ledger.run_level[-1]
    assert row["stage"] == "compile_boundary:parameters" and row["bytes_allocated"] == w.numel() * 4 + 4 * 4
    assert "0.weight" in row["note"] and "1.running_mean" in row["note"]
