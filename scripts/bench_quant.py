"""Benchmark the sim quantizer against float inference, on the digits CNN and a ResNet-18.

Two ratios per model, each printed with its goal and whether it was met:

- ``forward``: the test-mode lowered model (``pipeline.quantizers.sim.lowered``) vs the float
  model, same batch. Goal: at most 1.3x.
- ``calib``: a whole calibration (graph capture, CLE, ``--batches`` calibration batches with bias
  correction, writing quant_info.json) vs float inference over the same batches. Goal: at most 3x.
  Also printed, without a verdict: the calibration forwards alone (capture, CLE and the file writes
  excluded) vs the same float inference, the per-forward measure of the real quantizer's figure
  (18x float per calibration forward for a ResNet-18 at batch 8, 224x224, 2 threads).

- ``memory`` (``--memory``): the peak resident memory a ResNet-18 calibration forward adds, over
  the float forward's, on one batch of ``--memory-batch`` images (default 32) at ``--size``, each
  measured in a fresh process (Linux: the peak is reset through ``/proc/self/clear_refs`` after
  set-up and read from ``VmHWM``). Goal: at most 2.0x. The calibration loop that keeps every
  activation until the batch ends (the loop before issue 13) is measured too, for comparison.

Runs are timed in alternation after a warm-up, and the fastest run of each is compared (the
machine may be shared; the fastest run is the least disturbed): the verdict ("met" / "MISSED")
is taken on that ratio. The median of the per-round ratios is printed too, to show the spread.

``--baseline DIR`` times a second copy of the package side by side in the same run (for example
an older commit: ``git archive <rev> pipeline | tar -x -C DIR``): its calibration runs in the same
alternation, and its ratio is printed on the line below the current one, so that a speed-up is
measured under the same machine load.

``--threads 1`` gives the steadiest numbers on a shared machine (both sides single-threaded).
With more threads float inference gains more than calibration, whose fixed part (capture, CLE,
writing the files) runs serially.

Weights are random (``pipeline.models.zoo``); BatchNorm statistics are randomized so that BN
folding and CLE have work to do. Nothing is downloaded.

Usage: ``python scripts/bench_quant.py [--models digits,resnet18] [--batch 8] [--batches 4]
[--size 224] [--repeats 9] [--threads N] [--baseline DIR] [--memory] [--memory-batch 32]``
"""
import argparse
import importlib
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.models.zoo import digits_cnn, randomize_bn, resnet18  # noqa: E402
from pipeline.quantizers.quant_config import load_quant_config  # noqa: E402
from pipeline.quantizers.sim.session import SimSession  # noqa: E402

FORWARD_GOAL = 1.3
CALIB_GOAL = 3.0
MEMORY_GOAL = 2.0
MEMORY_KINDS = ("float", "calib", "calib-keep-everything")
BASELINE_PACKAGE = "pipeline_baseline"


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _alternating(fns: List[Callable[[], object]], repeats: int) -> Tuple[List[float], List[float]]:
    """Time ``fns`` in turn ``repeats`` times after one warm-up each.

    Returns ``(fastest, median_ratio)``: the fastest run of each function (the least disturbed
    on a shared machine) and, for each, the median over the rounds of its time divided by the
    first function's time in the same round (1.0 for the first)."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]  # type: List[List[float]]
    for _ in range(repeats):
        for fn, t in zip(fns, times):
            t.append(_seconds(fn))
    fastest = [min(t) for t in times]
    medians = [statistics.median(y / x for x, y in zip(times[0], t)) for t in times]
    return fastest, medians


def verdict(ratio: float, goal: float) -> str:
    """``"goal 3x: met"`` when ``ratio <= goal``, else ``"goal 3x: MISSED"`` (upper case, so that a
    miss is never read as a pass)."""
    return "goal %gx: %s" % (goal, "met" if ratio <= goal else "MISSED")


def load_baseline(folder: str) -> Any:
    """Import ``folder/pipeline`` as the package ``pipeline_baseline``; return its SimSession module.

    The package must use relative imports only (this one does), so that its modules resolve
    inside the copy and not to the current ``pipeline``.
    """
    init = os.path.join(folder, "pipeline", "__init__.py")
    if not os.path.isfile(init):
        raise SystemExit("--baseline: %s not found; make it with `git archive <rev> pipeline | "
                         "tar -x -C %s`" % (init, folder))
    spec = importlib.util.spec_from_file_location(BASELINE_PACKAGE, init,
                                                  submodule_search_locations=[os.path.dirname(init)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[BASELINE_PACKAGE] = package
    spec.loader.exec_module(package)
    return importlib.import_module(BASELINE_PACKAGE + ".quantizers.sim.session")


def _calibration(session_cls: Any, cfg: Any, model: torch.nn.Module, data: List[torch.Tensor]) -> Callable[[], Any]:
    folder = tempfile.mkdtemp(prefix="bench_quant_")

    def calibrate() -> Any:
        session = session_cls(model, data[0], cfg)
        cal = session.calibrator()
        for x in data:
            cal.step(x)
        session.export_quant_config(cal, folder)
        return session

    calibrate.folder = folder  # type: ignore[attr-defined]
    return calibrate


def _forwards_only(model: torch.nn.Module, data: List[torch.Tensor], repeats: int) -> float:
    """Fastest time of the calibration forwards alone (a fresh session each round, set up untimed)."""
    best = float("inf")
    for _ in range(repeats):
        cal = SimSession(model, data[0], load_quant_config(None)).calibrator()
        start = time.perf_counter()
        for x in data:
            cal.step(x)
        best = min(best, time.perf_counter() - start)
    return best


def bench(name: str, model: torch.nn.Module, shape: List[int], batches: int, repeats: int,
          baseline: Optional[Any] = None) -> Dict[str, float]:
    """Time float inference, calibration and the simulated forward of ``model`` on random data.

    ``baseline``: an imported ``quantizers.sim.session`` module of another copy of the package,
    whose calibration is timed in the same alternation (see the module docstring).
    """
    g = torch.Generator().manual_seed(0)
    data = [torch.randn(*shape, generator=g) for _ in range(batches)]
    calibrate = _calibration(SimSession, load_quant_config(None), model, data)

    with torch.no_grad():
        lowered = calibrate().load_test(calibrate.folder)
        (float_one, sim_one), (_, fwd_median) = _alternating([lambda: model(data[0]), lambda: lowered(data[0])],
                                                             repeats)
        fns = [lambda: [model(x) for x in data], calibrate]
        if baseline is not None:
            quant_config = importlib.import_module(BASELINE_PACKAGE + ".quantizers.quant_config")
            fns.append(_calibration(baseline.SimSession, quant_config.load_quant_config(None), model, data))
        fastest, medians = _alternating(fns, max(2, repeats // 3))
    float_all, calib_s = fastest[0], fastest[1]
    result = {"float_forward_s": float_one, "sim_forward_s": sim_one, "forward_ratio": sim_one / float_one,
              "forward_ratio_median": fwd_median, "float_inference_s": float_all, "calib_s": calib_s,
              "calib_ratio": calib_s / float_all, "calib_ratio_median": medians[1]}
    print("%-9s input %-17s forward: float %.4f s, sim %.4f s -> %.2fx, %s (median of pairs %.2fx)"
          % (name, tuple(shape), float_one, sim_one, result["forward_ratio"],
             verdict(result["forward_ratio"], FORWARD_GOAL), fwd_median))
    print("%-9s %d batches         calib: float inference %.4f s, calibration %.4f s -> %.2fx, %s "
          "(median of rounds %.2fx)" % (name, batches, float_all, calib_s, result["calib_ratio"],
                                        verdict(result["calib_ratio"], CALIB_GOAL), medians[1]))
    steps_s = _forwards_only(model, data, max(2, repeats // 3))
    result.update(calib_forwards_s=steps_s, calib_forwards_ratio=steps_s / float_all)
    print("%-9s %d batches  calib forwards: float inference %.4f s, calibration forwards %.4f s -> %.2fx "
          "(capture, CLE and file writes excluded; for comparison only)" % (name, batches, float_all, steps_s,
                                                                          result["calib_forwards_ratio"]))
    if baseline is not None:
        result.update(baseline_calib_s=fastest[2], baseline_calib_ratio=fastest[2] / float_all,
                      baseline_calib_ratio_median=medians[2])
        print("%-9s %d batches      baseline: float inference %.4f s, calibration %.4f s -> %.2fx, %s "
              "(median of rounds %.2fx)" % (name, batches, float_all, fastest[2], result["baseline_calib_ratio"],
                                            verdict(result["baseline_calib_ratio"], CALIB_GOAL), medians[2]))
    return result


MODELS = ("digits", "resnet18")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit("no %s in /proc/self/status: --memory needs Linux" % field)


def measure_peak(kind: str, batch: int, size: int) -> None:
    """In this (fresh) process: set up, reset the peak, run one ``kind`` forward, print the bytes
    the peak grew by (``VmHWM`` minus the resident size at the reset)."""
    from pipeline.quantizers.sim import calib
    model = randomize_bn(resnet18(num_classes=1000), 2)
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if kind == "float":
            run = lambda: model(x)  # noqa: E731
        else:
            session = SimSession(model, x[:1], load_quant_config(None))
            cal = calib.Calibrator(session.graph, session.plan, session.bitwidth, session.cfg.include_bias_corr)
            if kind == "calib-keep-everything":
                cal._release, cal._scratch = [[] for _ in cal._release], None
                cal._fresh, cal._relu_in_place = set(), {}
            run = lambda: cal.step(x)  # noqa: E731
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        base = _status_kib("VmRSS")
        run()
        print("peak_bytes %d" % ((_status_kib("VmHWM") - base) * 1024))


def bench_memory(batch: int, size: int, threads: int) -> Dict[str, float]:
    """Peak memory of each kind in a fresh process; prints the ratios to the float forward."""
    import subprocess
    peaks = {}
    for kind in MEMORY_KINDS:
        argv = [sys.executable, os.path.abspath(__file__), "--measure-peak", kind, "--memory-batch", str(batch),
                "--size", str(size), "--threads", str(threads or torch.get_num_threads())]
        out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
        peaks[kind] = float(out.split("peak_bytes")[-1].split()[0])
    ratio = peaks["calib"] / peaks["float"]
    print("resnet18  batch %dx3x%dx%d  memory: float forward peak %.0f MB, calibration forward %.0f MB -> %.2fx, %s "
          "(keep-everything loop %.0f MB, %.2fx)" % (batch, size, size, peaks["float"] / 1e6, peaks["calib"] / 1e6,
                                                     ratio, verdict(ratio, MEMORY_GOAL),
                                                     peaks["calib-keep-everything"] / 1e6,
                                                     peaks["calib-keep-everything"] / peaks["float"]))
    return peaks


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated subset of %s (default: both)" % ",".join(MODELS))
    parser.add_argument("--batch", type=int, default=8,
                        help="images per batch (default 8; the digits CNN gets 8 times as many)")
    parser.add_argument("--batches", type=int, default=4, help="calibration batches (default 4)")
    parser.add_argument("--size", type=int, default=224, help="ResNet-18 input size (default 224)")
    parser.add_argument("--repeats", type=int, default=9, help="timed forward pairs (default 9)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--baseline", default=None,
                        help="folder holding another copy of the pipeline package, timed side by side")
    parser.add_argument("--memory", action="store_true", help="also the ResNet-18 peak memory ratio")
    parser.add_argument("--memory-batch", type=int, default=32, help="images in the --memory batch (default 32)")
    parser.add_argument("--measure-peak", choices=MEMORY_KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_peak:
        if args.threads:
            torch.set_num_threads(args.threads)
        measure_peak(args.measure_peak, args.memory_batch, args.size)
        return 0
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error("--models: unknown %s; choose from %s" % (unknown, ",".join(MODELS)))
    if args.threads:
        torch.set_num_threads(args.threads)
    baseline = load_baseline(args.baseline) if args.baseline else None
    torch.manual_seed(0)
    print("torch %s, %d threads" % (torch.__version__, torch.get_num_threads()))
    if "digits" in models:
        bench("digits", randomize_bn(digits_cnn(), 1), [args.batch * 8, 1, 8, 8], args.batches,
              args.repeats * 3, baseline)
    if "resnet18" in models:
        bench("resnet18", randomize_bn(resnet18(num_classes=1000), 2), [args.batch, 3, args.size, args.size],
              args.batches, args.repeats, baseline)
    if args.memory:
        bench_memory(args.memory_batch, args.size, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
