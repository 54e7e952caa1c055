#!/usr/bin/env python
"""Benchmark the quantizer boundary: a uint8 NHWC batch to normalized float32 NCHW, against the alternatives.

``python scripts/bench_preprocess.py [--quick] [--batches 1,8,64,256] [--sizes 32,224] [--threads 1,2]
[--rounds 9] [--json out.json]``

For each thread count, batch and image size, in one process, each method is timed against the
reference in an A/B alternation of its own: rounds of a block of reference calls then a block of
the method's calls, at least ``--rounds`` rounds and more while the alternation fits 0.4 s (at most
60). A block's figure is the median of its calls, each result dropped before the next call; the
calls per block are set from settled calls, after the first uses have paid their page faults. The
ratio printed is the median of the method's blocks over the median of the reference blocks beside
them: both measured under the same conditions, no third method in between (why not one rotation
of all methods: docs/performance.md#how-the-benchmark-alternates). "cast ms" is
the cast's median beside the boundary (the boundary goals' denominator); the goal lines give the
spread of the boundary's per-round ratios (a round: one cast block, then one boundary block).

The methods:

- cast (the reference): a contiguous uint8 -> float32 ``copy_`` of the same elements into a reused
  buffer, no transpose and no normalization: what any pass must at least do;
- limit: an estimate of the physical limit, (bytes read + bytes written) / copy bandwidth, the
  bandwidth from a float32 ``copy_`` between two reused buffers of the output's size timed in its
  own A/B alternation with the cast (an estimate: its working set is not the cast's, so it can read
  above 1.0x);
- boundary: ``QuantizerBoundary`` alone on the NCHW view of the batch (compiled pass, reused owned
  buffer, ledger on); pipeline: the whole path, a batch from the source -> ``layout`` stage (a view,
  contract checked) -> boundary, with the ledger on, each call on the next batch of a source of up
  to 16 batches, as a run reads them (its input is colder than every other method's, which re-read
  one batch); pipeline-torch: the same with the boundary's pure-torch pass;
- expert torch: ``copy_`` from the permuted view into a reused buffer, then in-place ``sub_``/``div_``;
- cv2 blob: OpenCV ``dnn.blobFromImagesWithParams`` into a reused blob (per-channel mean and 1/std;
  multiplies by the reciprocal, so its values differ from the division in the last bit; OpenCV's
  threads set to the table's thread count); cv2.split + numpy: per image,
  ``cv2.split`` then ``np.subtract``/``np.divide`` per plane into a reused buffer (both need
  ``opencv-python-headless``, which the ``dev`` extra installs; skipped without it);
- per-image ToTensor: torchvision's ToTensor + Normalize written out in torch, one image at a time,
  then ``torch.stack``.

Every method's output is checked against the float32 definition (bit-exact; cv2 blob and the
per-image loop, which scale differently, within 1e-5). The load average before and after each thread
count is printed with its table; on a shared machine, compare ratios, not absolute times. Goals
(issue 13, 1 thread): the boundary within 1.2x of the cast at 8x224 and 64x224, within 8x at 1x32
(per-call overhead), and the pipeline ahead of every alternative at 8 images or more.
"""
import argparse
import itertools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pipeline.boundary import QuantizerBoundary, aligned_empty, native  # noqa: E402
from pipeline.cpu import load_average, tile_bytes  # noqa: E402
from pipeline.data.batching import iter_batches  # noqa: E402
from pipeline.data.sources import open_source  # noqa: E402
from pipeline.stages import build_stages  # noqa: E402
from pipeline.ledger import Ledger  # noqa: E402

try:  # optional here: the OpenCV alternatives (the dev extra installs opencv-python-headless)
    import cv2
except ImportError:
    cv2 = None

# ImageNet mean/std in 0..255 pixel units (torchvision's [0.485, 0.456, 0.406] / [0.229, 0.224, 0.225] x 255).
MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]
CALL_BUDGET_S = 0.05  # per block: as many calls as fit (at least 1, at most --calls)
AB_BUDGET_S = 0.4  # per method's A/B alternation: more rounds than --rounds while they fit (at most MAX_ROUNDS)
MAX_ROUNDS = 60


def time_calls(fn, calls):
    """Median seconds of ``calls`` calls; each result is dropped before the next call."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def methods_for(n, s):
    """name -> zero-argument function producing the (N, 3, s, s) float32 batch, and the images."""
    # the pipeline walks a source of several batches, as a run does (the first is the one checked)
    repeats = max(2, min(16, (64 << 20) // (n * s * s * 3)))
    stock = np.random.default_rng(n * 1000 + s).integers(0, 256, size=(n * repeats, s, s, 3), dtype=np.uint8)
    images = stock[:n]
    images_t = torch.from_numpy(images)
    source = open_source({"type": "array", "images": stock, "layout": "NHWC"}, ".")
    compose = build_stages([{"type": "layout", "src": "NHWC", "dst": "NCHW"}], source=source)
    ledger = Ledger()
    counter = itertools.count()

    def pipeline_with(boundary):
        state = {"batches": iter(())}

        def run():
            view = next(state["batches"], None)
            if view is None:  # the source is done: start again, as the next epoch would
                state["batches"] = (v for v, _ in iter_batches(source, slice(0, n * repeats), n))
                view = next(state["batches"])
            i = next(counter)
            return boundary(compose(view, ledger, i), ledger, i)
        return run

    cast_out = torch.empty(images_t.shape, dtype=torch.float32)
    expert_out = torch.empty(n, 3, s, s)
    mean_t, std_t = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    mean01, std01 = mean_t[0] / 255, std_t[0] / 255

    def expert():
        expert_out.copy_(images_t.permute(0, 3, 1, 2))
        return expert_out.sub_(mean_t).div_(std_t)

    def per_image():
        outs = []
        for img in images:
            t = torch.from_numpy(img.transpose((2, 0, 1))).contiguous()  # ToTensor
            t = t.to(dtype=torch.float32).div(255)
            outs.append(t.clone().sub_(mean01).div_(std01))  # Normalize (inplace=False)
        return torch.stack(outs)

    boundary = QuantizerBoundary(MEAN, STD, channel_order=compose.boundary_channel_order)
    view = compose(next(iter_batches(source, slice(0, n), n))[0])
    boundary_ledger, numbers = Ledger(), itertools.count()
    fns = {"cast": lambda: cast_out.copy_(images_t),
           "boundary": lambda: boundary(view, boundary_ledger, next(numbers)),
           "pipeline": pipeline_with(boundary),
           "pipeline-torch": pipeline_with(QuantizerBoundary(MEAN, STD, channel_order=compose.boundary_channel_order,
                                                             kernel="torch")),
           "expert torch": expert}
    if cv2 is not None:
        params = cv2.dnn.Image2BlobParams(scalefactor=tuple(1.0 / v for v in STD), size=(s, s), mean=tuple(MEAN),
                                          swapRB=False, ddepth=cv2.CV_32F)
        split_out = aligned_empty((n, 3, s, s), np.float32)  # 64-byte aligned, as the boundary's
        blob = aligned_empty((n, 3, s, s), np.float32)
        mean32, std32 = np.float32(MEAN), np.float32(STD)

        def cv2_split():
            for i in range(n):
                for c, plane in enumerate(cv2.split(images[i])):
                    np.subtract(plane, mean32[c], out=split_out[i, c], dtype=np.float32)
                    np.divide(split_out[i, c], std32[c], out=split_out[i, c])
            return split_out

        fns["cv2 blob"] = lambda: cv2.dnn.blobFromImagesWithParams(images, blob, params)
        fns["cv2.split+numpy"] = cv2_split
    fns["per-image ToTensor"] = per_image
    return fns, images, ledger


def check(fns, images):
    ref = fns["boundary"]().clone()
    want = (images.transpose(0, 3, 1, 2).astype(np.float32) - np.float32(MEAN)[:, None, None]) \
        / np.float32(STD)[:, None, None]
    if not np.array_equal(ref.numpy(), want):
        raise SystemExit("the boundary's output differs from the float32 definition")
    for name, fn in fns.items():
        if name == "cast":
            continue  # the pipelines' first call gives the first batch of their source: ``images``
        got = fn()
        got = got.numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
        ok = np.allclose(got, want, rtol=0, atol=1e-5) if name in ("cv2 blob", "per-image ToTensor") \
            else np.array_equal(got, want)
        if not ok:
            raise SystemExit("%s disagrees with the definition: max abs diff %g" % (name, np.abs(got - want).max()))


def settled_calls(fn, max_calls):
    """``(calls, seconds per call)``: how many calls of ``fn`` fit ``CALL_BUDGET_S`` (1 to
    ``max_calls``), timed after two first calls (a fresh buffer's page faults, plans, pool buffers)."""
    fn()
    fn()
    per_call = max(1e-7, time_calls(fn, 3))
    return max(1, min(max_calls, int(CALL_BUDGET_S / per_call))), per_call


def bench_one(n, s, rounds, max_calls):
    """``(seconds, ratios, boundary's per-round ratios, rounds, ledger summary)``: each method's median
    seconds per call and its ratio to the cast blocks of its own A/B alternation (``rounds[name]``
    rounds: at least ``rounds``, more while they fit ``AB_BUDGET_S``, at most ``MAX_ROUNDS``);
    ``seconds["cast"]`` is the cast's median in the boundary's alternation; ``limit`` is the time
    (bytes read + written) / the bandwidth of a float32 copy timed in its own alternation."""
    fns, images, ledger = methods_for(n, s)
    check(fns, images)
    out_bytes = n * 3 * s * s * 4
    a = torch.rand(out_bytes // 4)
    b = torch.empty_like(a)
    fns["limit"] = lambda: b.copy_(a)  # scaled below: it moves 2 * out_bytes
    settled = {name: settled_calls(fn, max_calls) for name, fn in fns.items()}
    calls = {name: k for name, (k, _) in settled.items()}
    block = {name: k * per_call for name, (k, per_call) in settled.items()}
    cast = fns["cast"]
    t, ratios, rounds_ratios, done = {}, {}, [], {}
    for name, fn in fns.items():
        if name == "cast":
            continue
        ref, own = [], []
        done[name] = max(rounds, min(MAX_ROUNDS, int(AB_BUDGET_S / (block["cast"] + block[name]))))
        for _ in range(done[name]):
            ref.append(time_calls(cast, calls["cast"]))
            own.append(time_calls(fn, calls[name]))
        scale = (images.nbytes + out_bytes) / (2.0 * out_bytes) if name == "limit" else 1.0
        t[name] = scale * statistics.median(own)
        ratios[name] = t[name] / statistics.median(ref)
        if name == "boundary":
            t["cast"] = statistics.median(ref)
            rounds_ratios = sorted(o / r for o, r in zip(own, ref))
    return t, ratios, rounds_ratios, done, ledger.summary()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--sizes", default="32,224")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=None,
                    help="the fewest A/B rounds of each method against the cast (more while they fit %.1f s, "
                         "at most %d); default 9, --quick 7" % (AB_BUDGET_S, MAX_ROUNDS))
    ap.add_argument("--calls", type=int, default=50, help="most calls per block")
    ap.add_argument("--quick", action="store_true", help="1 thread; 1x32, 8x224, 64x224")
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args(argv)
    cases = [(int(b), int(s)) for s in args.sizes.split(",") for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    if args.quick:
        cases, threads = [(1, 32), (8, 224), (64, 224)], [1]
    if args.rounds is None:
        args.rounds = 7 if args.quick else 9
    status = native.kernel_status()
    print("torch %s, %d cores, tile %d KiB; boundary kernel: %s" % (
        torch.__version__, os.cpu_count() or 0, tile_bytes() >> 10,
        "compiled (%s%s)" % (os.path.basename(status["path"]), ", AVX512-VBMI RGB rows" if native.boundary_kernel().vbmi
                             else "") if status["compiled"] else "pure torch: %s" % status["reason"]))
    results, missed = [], []
    for nthreads in threads:
        torch.set_num_threads(nthreads)
        if cv2 is not None:
            cv2.setNumThreads(nthreads)
        before = load_average()
        rows = []
        for n, s in cases:
            t, ratios, spread, done, summary = bench_one(n, s, args.rounds, args.calls)
            rows.append((n, s, t, ratios, spread, summary))
            results.append({"threads": nthreads, "batch": n, "size": s, "seconds": t, "ratios_to_cast": ratios,
                            "boundary_round_ratios": spread, "rounds": done,
                            "copies_per_batch": summary["copies_per_batch"],
                            "allocated_over_output": summary["bytes_allocated_per_batch"] / (n * 3 * s * s * 4)})
        names = list(rows[0][3])
        print("\n%d thread(s); load average %s before, %s after; each method in %d to %d A/B rounds (as many as "
              "fit %.1f s) against the reused-buffer cast: ratio of the medians (cast ms: its median beside the "
              "boundary)" % (nthreads, before, load_average(), args.rounds, MAX_ROUNDS, AB_BUDGET_S))
        print("| batch | cast ms | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for n, s, t, ratios, spread, summary in rows:
            print("| %dx%d | %.3f | " % (n, s, 1e3 * t["cast"]) + " | ".join("%.2fx" % ratios[k] for k in names) + " |")
            if summary["copies_per_batch"] != 1 or summary["bytes_allocated_per_batch"] != n * 3 * s * s * 4:
                missed.append("ledger at %dx%d: %s" % (n, s, summary))
            if nthreads != 1:
                continue
            ratio = ratios["boundary"]
            goal = {(8, 224): 1.2, (64, 224): 1.2, (1, 32): 8.0}.get((n, s))
            if goal is not None:
                print("goal: boundary within %.1fx of the cast at %dx%d: %.2fx %s (per-round ratios %.2f-%.2f, "
                      "middle half %.2f-%.2f)" % (goal, n, s, ratio, "met" if ratio <= goal else "MISSED",
                                                  spread[0], spread[-1], spread[len(spread) // 4],
                                                  spread[-1 - len(spread) // 4]))
            if n >= 8:
                behind = [k for k in names if k not in ("boundary", "pipeline", "pipeline-torch", "limit")
                          and ratios[k] <= ratios["pipeline"]]
                print("goal: pipeline ahead of every alternative at %dx%d: %s"
                      % (n, s, "met" if not behind else "MISSED (behind %s)" % ", ".join(behind)))
    if missed:
        raise SystemExit("the ledger did not show one owned copy per batch: %s" % missed)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "kernel": status, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
