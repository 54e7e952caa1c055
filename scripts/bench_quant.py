"""Benchmark the sim quantizer against float inference, on the digits CNN and a ResNet-18.

Two ratios per model, printed in one run (goals: simulated forward <= 1.3x float forward,
calibration <= 3x float inference over the same batches):

- ``forward``: the test-mode lowered model (``pipeline.quantizers.sim.lowered``) vs the float
  model, same batch.
- ``calib``: a whole calibration (graph capture, CLE, ``--batches`` calibration batches with bias
  correction, writing quant_info.json) vs float inference over the same batches.

Runs are timed in alternating pairs after a warm-up and the fastest of each is compared (the
machine may be shared; the fastest run is the least disturbed); the median of the per-pair ratios
is printed too.

Weights are random (``pipeline.models.zoo``); BatchNorm statistics are randomized so that BN
folding and CLE have work to do. Nothing is downloaded.

Usage: ``python scripts/bench_quant.py [--batch 8] [--batches 4] [--size 224] [--repeats 9] [--threads N]``
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.models.zoo import digits_cnn, resnet18  # noqa: E402
from pipeline.quantizers.quant_config import load_quant_config  # noqa: E402
from pipeline.quantizers.sim.session import SimSession  # noqa: E402


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


def _paired(a: Callable[[], object], b: Callable[[], object], repeats: int):
    """Time ``a`` and ``b`` alternately ``repeats`` times after one warm-up each; the minimum of
    each is the least disturbed run (the machine may be shared), and the median of the per-pair
    ratios ``b/a`` shows the spread."""
    a()
    b()
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(_seconds(a))
        tb.append(_seconds(b))
    return min(ta), min(tb), statistics.median(y / x for x, y in zip(ta, tb))


def bench(name: str, model: torch.nn.Module, shape: List[int], batches: int, repeats: int) -> Dict[str, float]:
    """Time float inference, calibration and the simulated forward of ``model`` on random data."""
    g = torch.Generator().manual_seed(0)
    data = [torch.randn(*shape, generator=g) for _ in range(batches)]
    cfg = load_quant_config(None)
    folder = tempfile.mkdtemp(prefix="bench_quant_")

    def calibrate() -> SimSession:
        session = SimSession(model, data[0], cfg)
        cal = session.calibrator()
        for x in data:
            cal.step(x)
        session.export_quant_config(cal, folder)
        return session

    with torch.no_grad():
        lowered = calibrate().load_test(folder)
        float_one, sim_one, fwd_median = _paired(lambda: model(data[0]), lambda: lowered(data[0]), repeats)
        float_all, calib_s, calib_median = _paired(lambda: [model(x) for x in data], calibrate,
                                                   max(2, repeats // 3))
    result = {"float_forward_s": float_one, "sim_forward_s": sim_one, "forward_ratio": sim_one / float_one,
              "forward_ratio_median": fwd_median, "float_inference_s": float_all, "calib_s": calib_s,
              "calib_ratio": calib_s / float_all, "calib_ratio_median": calib_median}
    print("%-9s input %-17s forward: float %.4f s, sim %.4f s -> %.2fx (median of pairs %.2fx; goal 1.3x)"
          % (name, tuple(shape), float_one, sim_one, result["forward_ratio"], fwd_median))
    print("%-9s %d batches         calib: float inference %.4f s, calibration %.4f s -> %.2fx "
          "(median of pairs %.2fx; goal 3x)" % (name, batches, float_all, calib_s, result["calib_ratio"],
                                               calib_median))
    return result


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="images per batch (default 8)")
    parser.add_argument("--batches", type=int, default=4, help="calibration batches (default 4)")
    parser.add_argument("--size", type=int, default=224, help="ResNet-18 input size (default 224)")
    parser.add_argument("--repeats", type=int, default=9, help="timed forward pairs (default 9)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print("torch %s, %d threads" % (torch.__version__, torch.get_num_threads()))
    bench("digits", _randomize_bn(digits_cnn(), 1), [args.batch * 8, 1, 8, 8], args.batches, args.repeats * 3)
    bench("resnet18", _randomize_bn(resnet18(num_classes=1000), 2), [args.batch, 3, args.size, args.size],
          args.batches, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
