"""Benchmark calibration/evaluation over torch.distributed and the streamed image folder.

Two measurements, each printed as a ratio taken side by side in one run (print ``/proc/loadavg``
next to them: on a shared machine the numbers move with the load):

1. ``eval``: the test step's evaluation throughput (images/s over float + quantized inference of
   the eval split, ``steps/test.json`` ``eval_images / eval_seconds``, measured on rank 0 after the
   ranks' counts are gathered) with 1 process and with ``torchrun --standalone --nproc_per_node 2``,
   on the same calibration and weights (a ResNet-18 from the zoo, random weights and BN statistics,
   on generated ``--size`` x ``--size`` images from a .npy file). The two runs alternate
   ``--repeats`` times; the best and the median of each are printed, and the accuracies of the
   two are checked to be equal. Each process runs ``--threads`` torch threads (1: one core each).
2. ``stream``: peak resident memory (ru_maxrss) of streaming every image of a generated folder
   (``--large`` images, default 20,000) vs one ten times smaller (``--small``, 2,000), through the
   source's DataLoader (2 workers, prefetch 2, batch 64), each in a fresh process: the main process
   and its workers separately. For contrast, the same folders decoded into memory (the default
   image_folder source).

Everything is generated under ``--tmp`` (default: a new temporary folder); nothing is downloaded.

Usage: ``python scripts/bench_distributed.py [--images 512] [--size 32] [--batch 32] [--repeats 3]
[--threads 1] [--small 2000] [--large 20000] [--skip-eval] [--skip-stream] [--tmp DIR]``
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pipeline.cpu import load_average  # noqa: E402

CONFIG = """
run: {name: bench, seed: 0, num_threads: %(threads)d}
data:
  source: {type: npy, path: %(images)s, labels: %(labels)s, layout: NHWC}
  split: {calib: 0.125, eval: 0.875}
  batch_size: %(batch)d
  calib_batches: 2
preprocess:
  stages: [{type: layout, src: NHWC, dst: NCHW}]
  mean: [127.5, 127.5, 127.5]
  std: [64.0, 64.0, 64.0]
  layout: NCHW
model: {zoo: resnet18, kwargs: {num_classes: 10}, weights: %(weights)s}
quantizer: {backend: sim, max_accuracy_drop: 1.0}
compile: {target: DPUCZDX8G_ISA1_B4096}
"""


def _env(threads: int) -> Dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=REPO)


def _pipeline(argv: List[str], ranks: int, threads: int) -> None:
    cmd = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]
                              if ranks > 1 else []) + ["-m", "pipeline", "run"] + argv + ["-q"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(threads), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("failed: %s\n%s" % (" ".join(cmd), proc.stderr[-3000:]))


def bench_eval(tmp: str, n: int, size: int, batch: int, repeats: int, threads: int) -> None:
    import torch
    from pipeline.models.zoo import resnet18
    rng = np.random.default_rng(0)
    images, labels = os.path.join(tmp, "images.npy"), os.path.join(tmp, "labels.npy")
    np.save(images, rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8))
    np.save(labels, rng.integers(0, 10, size=n).astype(np.int64))
    torch.manual_seed(0)
    model = resnet18(num_classes=10)
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(0.1 * torch.randn(m.num_features, generator=g))
            m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=g))
    weights = os.path.join(tmp, "float.pt")
    torch.save(model.state_dict(), weights)
    config = os.path.join(tmp, "bench.yaml")
    with open(config, "w") as f:
        f.write(CONFIG % {"threads": threads, "images": images, "labels": labels, "batch": batch, "weights": weights})
    work = os.path.join(tmp, "run")
    _pipeline([config, "--steps", "calib", "--set", "run.work_dir=" + work], 1, threads)
    rates = {1: [], 2: []}  # type: Dict[int, List[float]]
    acc = {}  # type: Dict[int, Any]
    print("eval: ResNet-18, %d eval images of %dx%d, batch %d, %d thread(s) per process; load before: %s"
          % (int(n * 0.875), size, size, batch, threads, load_average()))
    for r in range(repeats):
        for ranks in (1, 2):
            _pipeline([config, "--steps", "test", "--set", "run.work_dir=" + work], ranks, threads)
            with open(os.path.join(work, "steps", "test.json")) as f:
                t = json.load(f)
            rates[ranks].append(t["eval_images"] / t["eval_seconds"])
            acc[ranks] = (t["float_accuracy"], t["quant_accuracy"], t["sensitivity"])
            print("  round %d, %d process(es): %.1f images/s (load %s)" % (r + 1, ranks, rates[ranks][-1], load_average()))
    same = acc[1] == acc[2]
    print("eval throughput, best: 1 process %.1f images/s, 2 processes %.1f images/s -> %.2fx" % (
        max(rates[1]), max(rates[2]), max(rates[2]) / max(rates[1])))
    print("eval throughput, median: 1 process %.1f images/s, 2 processes %.1f images/s -> %.2fx" % (
        statistics.median(rates[1]), statistics.median(rates[2]),
        statistics.median(rates[2]) / statistics.median(rates[1])))
    print("accuracies and sensitivity table identical for 1 and 2 processes: %s; load after: %s" % (same, load_average()))


def make_folder(root: str, n: int, size: int = 64, classes: int = 10) -> str:
    """``n`` smooth PNG images (a colour gradient per image: small files, real decoding work)."""
    from PIL import Image
    if os.path.isdir(root) and sum(len(f) for _, _, f in os.walk(root)) == n:
        return root
    yy, xx = np.mgrid[0:size, 0:size]
    for i in range(n):
        c = i % classes
        folder = os.path.join(root, "class%02d" % c)
        os.makedirs(folder, exist_ok=True)
        px = np.stack([(xx * (i % 7 + 1)) % 256, (yy * (i % 5 + 1)) % 256, np.full_like(xx, (i * 37) % 256)], -1)
        Image.fromarray(px.astype(np.uint8)).save(os.path.join(folder, "%06d.png" % i))
    return root


MEASURE = r"""
import json, resource, sys
from pipeline.data.sources import open_source
root, stream = sys.argv[1], sys.argv[2] == "stream"
spec = {"type": "image_folder", "root": root}
if stream:
    spec.update(stream=True, workers=2, prefetch=2)
src = open_source(spec, ".")
n = 0
if stream:
    for batch in src.batches(slice(0, len(src)), 64):
        n += int(batch.view.shape[0])
else:
    n = int(src.images.shape[0])
print(json.dumps({"images": n, "main_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "workers_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _measure(root: str, mode: str) -> Dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", MEASURE, root, mode], cwd=REPO, env=_env(1),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("memory measurement failed:\n" + proc.stderr[-3000:])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["seconds"] = time.perf_counter() - start
    return out


def bench_stream(tmp: str, small: int, large: int) -> None:
    print("stream: generating %d and %d 64x64 PNG images under %s ..." % (small, large, tmp))
    folders = {small: make_folder(os.path.join(tmp, "folder_%d" % small), small),
               large: make_folder(os.path.join(tmp, "folder_%d" % large), large)}
    print("stream: peak resident memory (ru_maxrss), each in a fresh process; load before: %s" % load_average())
    results = {}
    for mode in ("stream", "memory"):
        for n in (small, large):
            r = results[(mode, n)] = _measure(folders[n], mode)
            assert r["images"] == n, r
            print("  %-6s %6d images: main %7.1f MiB, workers %7.1f MiB, %.1f s (load %s)" % (
                mode, n, r["main_kb"] / 1024.0, r["workers_kb"] / 1024.0, r["seconds"], load_average()))
    for mode in ("stream", "memory"):
        a, b = results[(mode, small)], results[(mode, large)]
        print("%s: %d vs %d images: main process %.2fx, workers %s" % (
            mode, large, small, b["main_kb"] / a["main_kb"],
            "%.2fx" % (b["workers_kb"] / a["workers_kb"]) if a["workers_kb"] else "none"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--small", type=int, default=2000)
    p.add_argument("--large", type=int, default=20000)
    p.add_argument("--skip-eval", action="store_true")
    p.add_argument("--skip-stream", action="store_true")
    p.add_argument("--tmp", default=None, help="work folder (kept; generated folders are reused)")
    args = p.parse_args()
    tmp = args.tmp or tempfile.mkdtemp(prefix="bench_distributed_")
    os.makedirs(tmp, exist_ok=True)
    print("cpus: %d; load: %s" % (os.cpu_count() or 0, load_average()))
    if not args.skip_eval:
        bench_eval(tmp, args.images, args.size, args.batch, args.repeats, args.threads)
    if not args.skip_stream:
        bench_stream(tmp, args.small, args.large)
    return 0


if __name__ == "__main__":
    sys.exit(main())
