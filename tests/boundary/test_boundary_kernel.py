"""The compiled quantizer-boundary pass and its pure-torch fallback give the same bits on every case
the boundary supports; the build falls back cleanly (logged reason) when it cannot compile."""
import logging
import os

import numpy as np
import pytest
import torch

from pipeline.boundary import QuantizerBoundary, native
from pipeline.cpu import tile_bytes

MEAN3 = [123.675, 116.28, 103.53]
STD3 = [58.395, 57.12, 57.375]
MEAN1, STD1 = [104.0], [58.395]


def _kernel_or_skip():
    kernel = native.boundary_kernel()
    if kernel is None:
        pytest.skip("compiled boundary kernel unavailable here: %s" % native.kernel_status()["reason"])
    return kernel


@pytest.fixture
def fresh_native(monkeypatch, tmp_path):
    """A private build cache and a forgotten kernel; the process's kernel is restored afterwards."""
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(native.DISABLE_ENV, raising=False)
    native.reset()
    yield tmp_path / "cache"
    native.reset()


def _reference(nchw, mean, std, order, out_dtype):
    """(float(x[:, order]) - mean) / std in the output dtype with numpy: the boundary's definition."""
    np_out = np.float32 if out_dtype == torch.float32 else np.float64
    x = np.asarray(nchw)
    if order is not None:
        x = x[:, order]
    x = x.astype(np_out)
    return (x - np.array(mean, np_out)[None, :, None, None]) / np.array(std, np_out)[None, :, None, None]


def _sources(dtype, seed=0):
    """(name, input, its logical NCHW values as numpy) for every form a batch can reach the boundary in."""
    rng = np.random.default_rng(seed)
    if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        nhwc_t = (torch.from_numpy(rng.standard_normal((3, 9, 11, 3))) * 100).to(dtype)
    else:
        info = torch.iinfo(dtype)
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        nhwc_t = torch.from_numpy(rng.integers(lo, hi + 1, size=(3, 9, 11, 3))).to(dtype)
    logical = lambda t: (t.float() if t.dtype in (torch.float16, torch.bfloat16) else t).numpy()  # noqa: E731
    nchw_t = nhwc_t.permute(0, 3, 1, 2).contiguous()
    out = [("nchw", nchw_t, logical(nchw_t)),
           ("nhwc_view", nhwc_t.permute(0, 3, 1, 2), logical(nhwc_t.permute(0, 3, 1, 2))),
           ("cropped_view", nhwc_t.permute(0, 3, 1, 2)[1:, :, 2:7, 3:9], logical(nhwc_t.permute(0, 3, 1, 2)[1:, :, 2:7, 3:9])),
           ("expanded_gray", nchw_t[:, :1].expand(3, 3, 9, 11), logical(nchw_t[:, :1].expand(3, 3, 9, 11)))]
    if dtype not in (torch.bfloat16,):
        nhwc = nhwc_t.numpy()
        nchw = nchw_t.numpy()
        for name, arr in (("numpy_bgr_flip", nhwc[..., ::-1].transpose(0, 3, 1, 2)),
                          ("numpy_h_flip", nchw[:, :, ::-1]),
                          ("numpy_every_axis_flipped", nchw[::-1, ::-1, ::-2, ::-1]),
                          ("numpy_read_only", np.asarray(nchw))):
            if name == "numpy_read_only":
                arr = arr.copy()
                arr.setflags(write=False)
            out.append((name, arr, np.ascontiguousarray(arr)))
    return out


IN_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
             torch.float32, torch.float64]
ORDERS = [None, [2, 1, 0], [1, 2, 0], [0, 0, 2]]


@pytest.mark.parametrize("layout", ["NCHW", "channels_last"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("in_dtype", IN_DTYPES, ids=str)
def test_compiled_and_torch_passes_give_the_same_bits(in_dtype, out_dtype, layout):
    _kernel_or_skip()
    for order in ORDERS:
        kwargs = dict(channel_order=order, layout=layout, dtype=out_dtype)
        compiled = QuantizerBoundary(MEAN3, STD3, **kwargs)
        plain = QuantizerBoundary(MEAN3, STD3, kernel="torch", **kwargs)
        assert compiled.compiled and not plain.compiled
        for name, x, values in _sources(in_dtype):
            a, b = compiled(x), plain(x)
            ref = _reference(values, MEAN3, STD3, order, out_dtype)
            where = "%s %s order=%s" % (name, in_dtype, order)
            assert a.dtype == out_dtype and a.shape == ref.shape, where
            assert a.is_contiguous(memory_format=torch.channels_last if layout != "NCHW" else torch.contiguous_format)
            assert torch.equal(a, b), where  # same bits, NaN-free inputs
            assert np.array_equal(a.numpy(), ref), where


def test_single_channel_and_four_channel_sources_with_the_same_bits():
    _kernel_or_skip()
    rgba = torch.from_numpy(np.random.default_rng(3).integers(0, 256, (2, 5, 7, 4), dtype=np.uint8))
    view = rgba.permute(0, 3, 1, 2)
    for layout in ("NCHW", "channels_last"):
        for order in ([2, 1, 0], [0, 1, 2], [3, 3, 0]):
            a = QuantizerBoundary(MEAN3, STD3, channel_order=order, layout=layout)(view)
            b = QuantizerBoundary(MEAN3, STD3, channel_order=order, layout=layout, kernel="torch")(view)
            assert torch.equal(a, b) and np.array_equal(a.numpy(), _reference(view.numpy(), MEAN3, STD3, order,
                                                                               torch.float32))
        gray = view[:, :1]
        a = QuantizerBoundary(MEAN1, STD1, layout=layout)(gray)
        b = QuantizerBoundary(MEAN1, STD1, layout=layout, kernel="torch")(gray)
        assert torch.equal(a, b) and np.array_equal(a.numpy(), _reference(gray.numpy(), MEAN1, STD1, None,
                                                                           torch.float32))


def test_the_compiled_pass_never_writes_its_input_and_recycles_buffers():
    _kernel_or_skip()
    x = torch.from_numpy(np.random.default_rng(4).integers(0, 256, (2, 6, 6, 3), dtype=np.uint8))
    before, version = x.clone(), x._version
    b = QuantizerBoundary(MEAN3, STD3)
    first = b(x.permute(0, 3, 1, 2))
    ptr = first.data_ptr()
    del first
    again = b(x.permute(0, 3, 1, 2))
    assert again.data_ptr() == ptr and torch.equal(x, before) and x._version == version


def test_no_compiler_falls_back_with_a_logged_reason_and_the_same_bits(fresh_native, monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", str(fresh_native))  # no cc, gcc or clang either
    with caplog.at_level(logging.WARNING, logger="pipeline.boundary.native"):
        assert native.boundary_kernel() is None
    assert "no C compiler found" in caplog.text and "pure-torch" in caplog.text
    status = native.kernel_status()
    assert status["compiled"] is False and "no C compiler" in status["reason"]
    b = QuantizerBoundary(MEAN3, STD3, channel_order=[2, 1, 0])
    x = torch.from_numpy(np.random.default_rng(5).integers(0, 256, (2, 4, 5, 3), dtype=np.uint8)).permute(0, 3, 1, 2)
    assert not b.compiled
    assert np.array_equal(b(x).numpy(), _reference(x.numpy(), MEAN3, STD3, [2, 1, 0], torch.float32))


def test_a_failing_compiler_falls_back_and_leaves_no_file(fresh_native, monkeypatch, caplog):
    failing = fresh_native.parent / "badcc"
    failing.write_text("#!/bin/sh\necho 'badcc: cannot compile' >&2\nexit 3\n")
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    with caplog.at_level(logging.WARNING, logger="pipeline.boundary.native"):
        assert native.boundary_kernel() is None
    assert "exit 3" in native.kernel_status()["reason"] and "cannot compile" in caplog.text
    assert os.listdir(str(fresh_native)) == []  # the temporary output was removed


def test_disabled_by_the_environment(fresh_native, monkeypatch):
    monkeypatch.setenv(native.DISABLE_ENV, "1")
    assert native.boundary_kernel() is None
    assert "disabled by %s" % native.DISABLE_ENV in native.kernel_status()["reason"]
    assert not QuantizerBoundary(MEAN3, STD3).compiled


def test_the_build_is_cached_on_disk_and_reused(fresh_native):
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    kernel = native.boundary_kernel()
    assert kernel is not None and os.path.dirname(kernel.path) == str(fresh_native)
    stamp = os.stat(kernel.path).st_mtime_ns
    native.reset()
    again = native.boundary_kernel()
    assert again.path == kernel.path and os.stat(again.path).st_mtime_ns == stamp  # loaded, not rebuilt
    assert [f for f in os.listdir(str(fresh_native)) if f.endswith(".so")] == [os.path.basename(kernel.path)]


def test_tile_size_comes_from_the_cache_size(monkeypatch):
    from pipeline import cpu
    folder = "/sys/devices/system/cpu/cpu0/cache"
    if not os.path.isdir(folder):
        pytest.skip("no %s on this system" % folder)
    sizes = {}
    for index in os.listdir(folder):
        if index.startswith("index"):
            with open(os.path.join(folder, index, "level")) as f, open(os.path.join(folder, index, "size")) as g:
                sizes[f.read().strip()] = g.read().strip()
    if "2" not in sizes:
        pytest.skip("this CPU reports no L2 cache")
    l2 = int(sizes["2"][:-1]) * {"K": 1024, "M": 1024 * 1024}[sizes["2"][-1]]
    assert cpu.l2_bytes() == l2
    assert tile_bytes() == max(64 << 10, l2 // 2)
    assert QuantizerBoundary(MEAN3, STD3).block_bytes == tile_bytes()
    monkeypatch.setattr(cpu.os, "listdir", lambda path: [])
    monkeypatch.setattr(cpu.os, "sysconf", lambda name: -1)
    assert cpu.l2_bytes() == cpu._DEFAULT_L2_BYTES  # a machine that does not say


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []


def test_uint8_rgb_rows_take_the_vbmi_loop_on_cpus_that_have_it():
    kernel = _kernel_or_skip()
    flags = _cpu_flags()
    if not flags or "x86_64" not in os.uname().machine:
        pytest.skip("no x86 /proc/cpuinfo flags here")
    assert kernel.vbmi == ("avx512vbmi" in flags and "avx512bw" in flags)


def _rgb_cases():
    """uint8 NHWC batches as NCHW views, widths around the 16-pixel step and the 22-pixel plain-load
    bound, whole rows and cropped rows, RGB/BGR/rotated orders, torch and flipped numpy inputs."""
    rng = np.random.default_rng(11)
    for w in (1, 5, 15, 16, 17, 21, 22, 23, 31, 32, 37, 48, 64, 70):
        nhwc = rng.integers(0, 256, (2, 3, w, 3), dtype=np.uint8)
        yield "w=%d" % w, torch.from_numpy(nhwc).permute(0, 3, 1, 2)
        yield "w=%d cropped" % w, torch.from_numpy(nhwc).permute(0, 3, 1, 2)[:, :, 1:, : max(1, w - 1)]
        yield "w=%d numpy bgr" % w, nhwc[..., ::-1].transpose(0, 3, 1, 2)


@pytest.mark.parametrize("variant", ["portable", "clang"])
def test_other_builds_give_the_same_bits(variant, fresh_native, monkeypatch):
    """The build without intrinsics (-DVP_PORTABLE: GCC's vectorized C loop) and a clang build give
    the same bits as the process's build (the VBMI loop on CPUs that have it) and the definition."""
    default = native.boundary_kernel()
    if default is None:
        pytest.skip("compiled boundary kernel unavailable here: %s" % native.kernel_status()["reason"])
    wants = []
    for order in (None, [2, 1, 0], [1, 2, 0]):
        b = QuantizerBoundary(MEAN3, STD3, channel_order=order)
        wants += [(name, x, order, b(x).clone()) for name, x in _rgb_cases()]
    native.reset()
    if variant == "portable":
        monkeypatch.setattr(native, "FLAGS", native.FLAGS + ("-DVP_PORTABLE",))
    else:
        clang = native.shutil.which("clang") or native.shutil.which("clang-14")
        if clang is None or "clang" in os.path.basename(native._compiler() or ""):
            pytest.skip("no clang here, or the default build is already clang's")
        monkeypatch.setenv("CC", clang)
    other = native.boundary_kernel()
    assert other is not None and other.path != default.path, native.kernel_status()["reason"]
    if variant == "portable":
        assert not other.vbmi
    boundaries = {}
    for name, x, order, want in wants:
        b = boundaries.setdefault(str(order), QuantizerBoundary(MEAN3, STD3, channel_order=order))
        assert b._kernel is other
        got = b(x)
        assert torch.equal(got, want), "%s order=%s" % (name, order)
        assert np.array_equal(got.numpy(), _reference(np.asarray(x), MEAN3, STD3, order, torch.float32)), name


# mean/std in pixel units: ImageNet, torchvision's 0..1 statistics applied to raw pixels, awkward scales
STATS = [(MEAN3, STD3), ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
         ([127.5, -3.25, 0.0], [1.0 / 3, 1e-3, 12345.678]), ([-1000.5, 255.0, 1e-7], [0.1, 255.0, 7.0])]


def _bits_equal(a, b):
    """Same bits, NaN included."""
    a, b = a.contiguous(), b.contiguous()
    kind = torch.int32 if a.dtype == torch.float32 else torch.int64
    return a.dtype == b.dtype and torch.equal(a.view(kind), b.view(kind))


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.int8, torch.int16], ids=str)
def test_awkward_statistics_give_the_torch_pass_bits(in_dtype, out_dtype):
    _kernel_or_skip()
    for mean, std in STATS:
        for layout in ("NCHW", "channels_last"):
            for order in (None, [2, 1, 0]):
                kwargs = dict(channel_order=order, layout=layout, dtype=out_dtype)
                compiled = QuantizerBoundary(mean, std, **kwargs)
                plain = QuantizerBoundary(mean, std, kernel="torch", **kwargs)
                for name, x, values in _sources(in_dtype, seed=7):
                    a = compiled(x)
                    where = "%s %s mean=%s std=%s %s order=%s" % (name, in_dtype, mean, std, layout, order)
                    assert _bits_equal(a, plain(x)), where
                    assert np.array_equal(a.numpy(), _reference(values, mean, std, order, out_dtype)), where


@pytest.mark.parametrize("in_dtype", [torch.float16, torch.float32, torch.float64], ids=str)
def test_float_inputs_with_inf_and_nan_match_the_torch_pass(in_dtype):
    _kernel_or_skip()
    special = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e30, -255.0, 3.5])
    x = special[torch.from_numpy(np.random.default_rng(12).integers(0, 8, (2, 3, 5, 6)))].to(in_dtype)
    for out_dtype in (torch.float32, torch.float64):
        for layout in ("NCHW", "channels_last"):
            b = QuantizerBoundary(MEAN3, STD3, layout=layout, dtype=out_dtype)
            plain = QuantizerBoundary(MEAN3, STD3, layout=layout, dtype=out_dtype, kernel="torch")
            for view in (x, x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)):
                a = b(view)
                assert a.isnan().any() and a.isinf().any()
                assert _bits_equal(a, plain(view))
