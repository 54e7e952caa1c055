"""Benchmark the sim quantizer against float inference, on the digits CNN and a ResNet-18.

Two ratios per model, each printed with its goal and whether it was met:

- ``forward``: the test-mode lowered model (``pipeline.quantizers.sim.lowered``) vs the float
  model, same batch. Goal: at most 1.3x.
- ``calib``: a whole calibration (graph capture, CLE, ``--batches`` calibration batches with bias
  correction, writing quant_info.json) vs float inference over the same batches. Goal: at most 3x.
  Also printed, without a verdict: the calibration forwards alone (capture, CLE and the file writes
  excluded) vs the same float inference, the per-forward measure of the real quantizer's figure
  (18x float per calibration forward for a ResNet-18 at batch 8, 224x224, 2 threads).

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
[--size 224] [--repeats 9] [--threads N] [--baseline DIR]``
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

from pipeline.models.zoo import digits_cnn, resnet18  # noqa: E402
from pipeline.quantizers.quant_config import load_quant_config  # noqa: E402
from pipeline.quantizers.sim.session import SimSession  # noqa: E402

FORWARD_GOAL = 1.3
CALIB_GOAL = 3.0
BASELINE_PACKAGE = "pipeline_baseline"


def _randomize_bn(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(0.1 * torch.randn(c, generator=g))
            m.running_var.copy_(0.5 + torch.rand(c, generator=g))
            m.weight.data.copy_(0.5 + torch.rand(c, generator=g))
            m.bias.data.copy_(0.1 * torch.randn(c, generator=g))
    return model.eval()


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
    args = parser.parse_args(argv)
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
        bench("digits", _randomize_bn(digits_cnn(), 1), [args.batch * 8, 1, 8, 8], args.batches,
              args.repeats * 3, baseline)
    if "resnet18" in models:
        bench("resnet18", _randomize_bn(resnet18(num_classes=1000), 2), [args.batch, 3, args.size, args.size],
              args.batches, args.repeats, baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
