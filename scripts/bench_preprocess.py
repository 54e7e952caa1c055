#!/usr/bin/env python
"""Benchmark the preprocessing path: a uint8 NHWC batch (default 64x224x224x3) to normalized float32 NCHW.

``python scripts/bench_preprocess.py [--batch 64] [--size 224] [--repeats 9] [--threads N] [--json out.json]``

In one run, with the medians of ``--repeats`` timed calls each (after one warm-up call), it times:

- pipeline: the project's path, source -> ``layout`` stage (a view) -> ``QuantizerBoundary`` (one fused,
  tiled pass into an owned, reused buffer), with the ledger on;
- limit: a single contiguous uint8 -> float32 cast-copy of the same bytes into a fresh buffer
  (``torch.empty`` + ``copy_``), no normalization;
- per-image loop: torchvision's ToTensor (HWC->CHW ``contiguous``, ``.to(float).div(255)``) and
  Normalize (``clone().sub_().div_()``) written out in torch, one image at a time, then ``torch.stack``;
- op chain: ``x.permute(0, 3, 1, 2).float().div(255).sub(mean).div(std)`` on the whole batch;

and prints each as a ratio to the limit (the pipeline's on a line ``pipeline: N.NNx``), the bytes the
pipeline's ledger allocates per batch relative to the output batch (``allocated/output: N.NNx``), the
fresh bytes each method takes from the allocators in steady state (torch profiler + tracemalloc),
and the pipeline's effective bandwidth (input bytes read + output bytes written per second) as a
fraction of a plain float32 copy measured in the same run. All outputs are checked against each other.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pipeline.boundary import QuantizerBoundary  # noqa: E402
from pipeline.data.batching import iter_batches  # noqa: E402
from pipeline.data.sources import open_source  # noqa: E402
from pipeline.stages import build_stages  # noqa: E402
from pipeline.tensors import Ledger  # noqa: E402

# ImageNet mean/std in 0..255 pixel units (torchvision's [0.485, 0.456, 0.406] / [0.229, 0.224, 0.225] x 255).
MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def median_seconds(fn, repeats):
    """Median wall time of ``fn()`` over ``repeats`` calls after one warm-up; each result is dropped
    before the next call (so the pipeline may recycle its buffer, as it does in a run)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's start/stop lines) for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def fresh_bytes(fn):
    """Bytes newly allocated by one steady-state call of ``fn``: torch's CPU allocator (profiler,
    positive self memory of every op) plus numpy's (tracemalloc peak growth, measured in a separate
    call because the profiler's own bookkeeping would show up in tracemalloc)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    with _quiet_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    torch_bytes = sum(e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    numpy_bytes = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return torch_bytes + numpy_bytes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n, s = args.batch, args.size
    images = np.random.default_rng(0).integers(0, 256, size=(n, s, s, 3), dtype=np.uint8)
    images_t = torch.from_numpy(images)
    out_bytes = n * 3 * s * s * 4

    source = open_source({"type": "array", "images": images, "layout": "NHWC"}, ".")
    compose = build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"}], source=source)
    boundary = QuantizerBoundary(MEAN, STD, channel_order=compose.boundary_channel_order)
    ledger = Ledger()
    counter = [0]

    def pipeline():
        view, _ = next(iter_batches(source, slice(0, n), n))
        counter[0] += 1
        return boundary(compose(view, ledger, counter[0]), ledger, counter[0])

    def limit():
        out = torch.empty(images_t.shape, dtype=torch.float32)
        out.copy_(images_t)
        return out

    mean01 = torch.tensor(MEAN).view(3, 1, 1) / 255
    std01 = torch.tensor(STD).view(3, 1, 1) / 255

    def per_image():
        outs = []
        for img in images:
            t = torch.from_numpy(img.transpose((2, 0, 1))).contiguous()  # ToTensor
            t = t.to(dtype=torch.float32).div(255)
            outs.append(t.clone().sub_(mean01).div_(std01))  # Normalize (inplace=False)
        return torch.stack(outs)

    def op_chain():
        return images_t.permute(0, 3, 1, 2).float().div(255).sub(mean01[None]).div(std01[None])

    src_f = torch.rand(n, 3, s, s)
    dst_f = torch.empty_like(src_f)

    def f32_copy():
        dst_f.copy_(src_f)

    reference = pipeline()
    diffs = {name: float((fn() - reference).abs().max()) for name, fn in
             (("per_image", per_image), ("op_chain", op_chain))}
    if not all(d < 1e-4 for d in diffs.values()) or not torch.equal(limit().permute(0, 3, 1, 2), images_t.permute(
            0, 3, 1, 2).float()):
        raise SystemExit("outputs disagree: max abs differences to the pipeline %s" % diffs)
    del reference

    t = {name: median_seconds(fn, args.repeats) for name, fn in
         (("pipeline", pipeline), ("limit", limit), ("per_image", per_image), ("op_chain", op_chain),
          ("f32_copy", f32_copy))}
    fresh = {name: fresh_bytes(fn) for name, fn in
             (("pipeline", pipeline), ("limit", limit), ("per_image", per_image), ("op_chain", op_chain))}
    summary = ledger.summary()
    in_bytes = images.nbytes
    bw_pipeline = (in_bytes + out_bytes) / t["pipeline"]
    bw_copy = 2 * src_f.numel() * 4 / t["f32_copy"]
    allocated = summary["bytes_allocated_per_batch"] / out_bytes

    print("batch %dx%dx%dx3 uint8 NHWC -> float32 NCHW normalized; torch %s, %d threads, median of %d"
          % (n, s, s, torch.__version__, torch.get_num_threads(), args.repeats))
    print("limit (fresh contiguous cast-copy): %.2f ms" % (1e3 * t["limit"]))
    print("pipeline: %.2fx  (%.2f ms)" % (t["pipeline"] / t["limit"], 1e3 * t["pipeline"]))
    for key, text in (("per_image", "per-image ToTensor/Normalize loop + stack"),
                      ("op_chain", "op chain permute().float().div().sub().div()")):
        print("%s: %.2fx  (%.2f ms)" % (text, t[key] / t["limit"], 1e3 * t[key]))
    print("allocated/output: %.2fx  (ledger: %d bytes per batch, copies_per_batch %d, %d of %d boundary buffers "
          "recycled)"
          % (allocated, summary["bytes_allocated_per_batch"], summary["copies_per_batch"],
             summary["buffers_recycled"], summary["batches"]))
    print("fresh allocations per batch / output (torch profiler + tracemalloc, steady state): " + ", ".join(
        "%s %.2fx" % (k, v / out_bytes) for k, v in fresh.items()))
    print("effective bandwidth: pipeline %.1f GB/s = %.2f of a plain float32 copy (%.1f GB/s)"
          % (bw_pipeline / 1e9, bw_pipeline / bw_copy, bw_copy / 1e9))
    goals = [("pipeline within 1.25x of the limit", t["pipeline"] <= 1.25 * t["limit"]),
             ("pipeline below the limit", t["pipeline"] < t["limit"]),
             ("allocated/output within 1.05x", allocated <= 1.05)]
    for text, ok in goals:
        print("goal %s: %s" % (text, "met" if ok else "NOT met"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": t, "ratios": {k: v / t["limit"] for k, v in t.items()},
                       "allocated_over_output": allocated, "fresh_bytes": fresh,
                       "bandwidth_fraction_of_f32_copy": bw_pipeline / bw_copy, "ledger": summary,
                       "torch": torch.__version__, "threads": torch.get_num_threads()}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
