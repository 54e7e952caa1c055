"""Bounded decoding: the image folder's decoder never holds an image of more than data.source.max_pixels
pixels at any step (as decoded, in the resize's first pass, after the resize), for every format Pillow
reads; a file that would need more is refused from its header, before a pixel is decoded, with an
error that names it, its size, the limit and what to do; a streamed folder with workers fails the
same way and leaves no worker behind.

The hostile files are made here: a 2 kB PNG of 2,000,000 x 1 pixels (issue 34's case: resize 36 would
make it 36 x 72,000,000, 7.8 GB as RGB), the widest JPEG, GIF and WebP their encoders allow with a
resize that makes them 268 M pixels, BMP and TIFF as wide as the PNG, a PNG whose header alone declares
100,000 x 100,000 (built with zlib), and a JPEG whose header declares 12,000 x 8,000 over 631 bytes.
The ones at the default limit run in a child process under an address-space cap (RLIMIT_AS).
"""
import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image

from pipeline.data.sources import open_source
from pipeline.errors import ConfigError, DataError
from tests.support import REPO

DEFAULT_LIMIT = 89478485  # Pillow's Image.MAX_IMAGE_PIXELS default, the source's stated default
BILINEAR = getattr(Image, "Resampling", Image).BILINEAR

# format -> (width of a 1-pixel-high file, the int resize that makes it > the default limit): the widest
# each format stores (libjpeg 65,500, GIF 65,535, WebP 16,383) or the 2,000,000 (PNG, BMP, TIFF)
WIDE = {"png": (2000000, 36), "bmp": (2000000, 36), "tiff": (2000000, 36),
        "jpeg": (65500, 64), "gif": (65535, 64), "webp": (16383, 128)}


def _wide(folder, fmt, width, name="wide"):
    """A (1, width) greyscale image file in ``folder/<fmt>`` (a class folder)."""
    path = os.path.join(str(folder), fmt, "%s.%s" % (name, fmt))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("L", (width, 1), 100).save(path)
    return path


def _png_declaring(path, width, height):
    """A PNG whose header declares width x height, with one compressed row of data (a few hundred bytes)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * (width + 1), 9))
                + chunk(b"IEND", b""))


def _jpeg_declaring(path, width, height):
    """A JPEG of 8x8 pixels whose SOF header is changed to declare width x height."""
    Image.new("RGB", (8, 8), (10, 20, 30)).save(path, quality=90)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    with open(path, "wb") as f:
        f.write(bytes(data))


def _small(folder, cls="ok", n=2):
    for i in range(n):
        path = os.path.join(str(folder), cls, "%d.png" % i)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(np.full((40, 48, 3), 30 * i, np.uint8)).save(path)


# ----------------------------------------------------------------------------- the rule, in this process

@pytest.mark.parametrize("fmt", sorted(WIDE))
def test_an_image_whose_resize_exceeds_max_pixels_is_refused_from_its_header_in_every_format(tmp_path, fmt):
    _small(tmp_path)
    path = _wide(tmp_path, fmt, 3000)
    spec = {"type": "image_folder", "root": str(tmp_path), "resize": 36, "crop": 36, "max_pixels": 1000000,
            "extensions": [".png", "." + fmt]}
    with pytest.raises(DataError) as info:
        open_source(spec, ".")
    message = str(info.value)
    for part in (path, "1x3000 (HxW)", "36x108000", "3,888,000 pixels", "max_pixels = 1,000,000",
                 "resize: [height, width]", "skip_corrupt: true"):
        assert part in message, (part, message)
    skipped = open_source(dict(spec, skip_corrupt=True), ".")  # listed like an unreadable file
    assert sorted(skipped.files) == ["ok/0.png", "ok/1.png"]
    assert [f for f, _ in skipped.skipped] == ["%s/wide.%s" % (fmt, fmt)] and "max_pixels" in skipped.skipped[0][1]


def test_the_decoded_size_and_the_resizes_first_pass_count_too(tmp_path):
    # 2000x10 (HxW) = 20,000 pixels decoded; resize [10, 2000] makes 20,000 too, but Pillow resizes the
    # width first: 2000 rows of 2000 = 4,000,000 pixels in between
    tall = os.path.join(str(tmp_path), "a", "tall.png")
    os.makedirs(os.path.dirname(tall))
    Image.new("L", (10, 2000)).save(tall)
    with pytest.raises(DataError, match=r"tall.png is 2000x10 \(HxW\).* 2000x2000 image \(4,000,000 pixels.*resize's "
                                        r"first pass.*max_pixels = 100,000"):
        open_source({"type": "image_folder", "root": str(tmp_path), "resize": [10, 2000], "max_pixels": 100000}, ".")
    with pytest.raises(DataError, match=r"tall.png is 2000x10 \(HxW\).*20,000 pixels.*as decoded.*max_pixels = 10,000"):
        open_source({"type": "image_folder", "root": str(tmp_path), "crop": [10, 10], "max_pixels": 10000}, ".")
    # at the limit: decoded exactly as before (torchvision's Resize + CenterCrop on the PIL image)
    src = open_source({"type": "image_folder", "root": str(tmp_path), "resize": 20, "crop": [16, 16],
                       "max_pixels": 4000 * 20}, ".")
    expected = np.asarray(Image.open(tall).convert("RGB").resize((20, 4000), resample=BILINEAR))[1992:2008, 2:18]
    assert np.array_equal(src.images[0], expected)


def test_a_header_beyond_pillows_own_guard_is_refused_the_same_way(tmp_path):
    os.makedirs(str(tmp_path / "a"))
    _png_declaring(str(tmp_path / "a" / "declared.png"), 100000, 100000)
    assert os.path.getsize(str(tmp_path / "a" / "declared.png")) < 1000
    with pytest.raises(DataError, match=r"declared.png .*10,000,000,000 pixels.*max_pixels = 89,478,485.*Remove or "
                                        r"shrink the file"):
        open_source({"type": "image_folder", "root": str(tmp_path), "resize": 36, "crop": 36}, ".")


def test_max_pixels_and_the_sizes_it_bounds_are_checked_when_the_source_is_built(tmp_path):
    _small(tmp_path)
    root = str(tmp_path)
    for bad in (0, -1, True, 2.5, "many"):
        with pytest.raises(ConfigError, match=r"data.source.max_pixels: expected an int >= 1"):
            open_source({"type": "image_folder", "root": root, "max_pixels": bad}, ".")
    with pytest.raises(ConfigError, match=r"data.source.max_pixels: 500,000,000 is more than Pillow opens"):
        open_source({"type": "image_folder", "root": root, "max_pixels": 500000000}, ".")
    with pytest.raises(ConfigError, match=r"data.source.resize: \[20000, 20000\] is 400,000,000 pixels, more than "
                                          r"data.source.max_pixels = 89,478,485"):
        open_source({"type": "image_folder", "root": root, "resize": [20000, 20000]}, ".")
    with pytest.raises(ConfigError, match=r"data.source.crop: \[100, 100\] is 10,000 pixels, more than "
                                          r"data.source.max_pixels = 1,000"):
        open_source({"type": "image_folder", "root": root, "crop": 100, "max_pixels": 1000}, ".")
    with pytest.raises(ConfigError, match=r"data.source.resize: 40 makes even a square image 1,600 pixels"):
        open_source({"type": "image_folder", "root": root, "resize": 40, "max_pixels": 1000, "stream": True}, ".")
    src = open_source({"type": "image_folder", "root": root, "resize": 20, "crop": 16}, ".")
    assert src.settings["max_pixels"] == DEFAULT_LIMIT and src.describe()["settings"]["max_pixels"] == DEFAULT_LIMIT


def test_sixteen_bit_images_keep_their_values_through_the_lean_path(tmp_path):
    values = (np.arange(30 * 40, dtype=np.uint32).reshape(30, 40) * 54).astype(np.uint16)
    os.makedirs(str(tmp_path / "a"))
    Image.fromarray(values).save(str(tmp_path / "a" / "g.png"))
    src = open_source({"type": "image_folder", "root": str(tmp_path), "mode": "L"}, ".")
    assert np.array_equal(src.images[0, ..., 0], (values >> 8).astype(np.uint8))


# ----------------------------------------------------------------------------- under a memory cap

CHILD = r"""
import json, multiprocessing, os, resource, sys
import pipeline.data.sources as sources
from pipeline.errors import DataError, PipelineError

def vm_bytes():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))

def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

cases, headroom_mib = json.loads(sys.argv[1])
base = rss_mib()
cap = vm_bytes() + (headroom_mib << 20)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
out = []
for name, spec in cases:
    try:
        src = sources.open_source(spec, ".")
        for _ in src.batches(slice(0, len(src)), 2):
            pass
        got = ["ok", ""]
    except PipelineError as exc:
        got = ["DataError" if isinstance(exc, DataError) else type(exc).__name__, str(exc)]
    except MemoryError as exc:
        got = ["MemoryError", str(exc)]
    except Exception as exc:  # e.g. the DataLoader's 'worker exited unexpectedly'
        got = [type(exc).__name__, str(exc)[:2000]]
    children = [p.pid for p in multiprocessing.active_children()]
    out.append([name, got, children])
print(json.dumps({"results": out, "base_mib": base, "peak_mib": rss_mib(),
                  "children_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0}))
"""

HEADROOM_MIB = 640  # above the address space after the imports: an image at the limit fits, 268 M pixels do not


def _run_capped(cases):
    env = dict(os.environ, MALLOC_ARENA_MAX="2", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([cases, HEADROOM_MIB])], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hostile_files_of_every_format_are_refused_with_the_peak_bounded_under_a_memory_cap(tmp_path):
    cases = []
    for fmt, (width, resize) in sorted(WIDE.items()):
        root = tmp_path / fmt
        _small(root)
        _wide(root, fmt, width)
        cases.append([fmt, {"type": "image_folder", "root": str(root), "resize": resize, "crop": 36,
                            "extensions": [".png", "." + fmt]}])
    declared = tmp_path / "declared_jpeg"
    _small(declared)
    os.makedirs(str(declared / "big"))
    _jpeg_declaring(str(declared / "big" / "x.jpeg"), 12000, 8000)  # 96 M pixels: Pillow only warns
    cases.append(["declared_jpeg", {"type": "image_folder", "root": str(declared), "resize": 256, "crop": 224,
                                    "extensions": [".png", ".jpeg"]}])
    # the case streamed: workers fork, decode in parallel, and must fail as the in-memory source does
    for workers in (0, 2):
        cases.append(["stream_%d" % workers, {"type": "image_folder", "root": str(tmp_path / "png"), "resize": 36,
                                              "crop": 36, "stream": True, "workers": workers, "prefetch": 1,
                                              "shuffle": False}])
    report = _run_capped(cases)
    results = {name: (got, children) for name, got, children in report["results"]}
    for fmt, (width, resize) in WIDE.items():
        (kind, message), _ = results[fmt]
        assert kind == "DataError", (fmt, kind, message[:500])
        assert "wide.%s is 1x%d (HxW)" % (fmt, width) in message and "max_pixels = 89,478,485" in message, message
    (kind, message), _ = results["declared_jpeg"]
    assert kind == "DataError" and "x.jpeg is 8000x12000 (HxW)" in message and "96,000,000 pixels" in message, message
    streamed = [results["stream_%d" % w] for w in (0, 2)]
    for (kind, message), children in streamed:
        assert kind == "DataError" and "wide.png is 1x2000000 (HxW)" in message, message[:500]
        assert "DataLoader worker" not in message and "Traceback" not in message  # one clear message, as workers: 0
        assert children == []  # no worker left behind
    assert streamed[0][0][1] == streamed[1][0][1]
    # nothing near an image of 268 M pixels (805 MB as RGB) was ever allocated
    assert report["peak_mib"] - report["base_mib"] < 160, report
    assert report["children_peak_mib"] < report["peak_mib"] + 160, report
