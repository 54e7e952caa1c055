"""How long the xmodel export takes, side by side with the ONNX export of the same test-mode model.

For each model (default: ResNet-18 at 224x224, as the compiler would get it; the digits CNN) the
test-mode model is built once (calibration on ``--batches`` random batches, BatchNorm statistics
randomized), then these are timed in alternation, ``--repeats`` rounds, on the same batch-1 example:

- ``xmodel write``: ``writer.build`` (nndct's trace for the names, the deploy graph, the XIR ops)
  and the serialization: what it costs to produce the file;
- ``xmodel verify``: reading the bytes back, ``reader.check`` (every op against the op definitions,
  shapes recomputed) and ``verify.compare`` (the file run against the simulation, outputs and
  every intermediate op);
- ``xmodel total``: both, as the export step runs them (``write_xmodel`` without the file write);
- ``onnx_exact``: ``export_onnx`` of the bit-exact flavour plus ``verify_onnx`` on the same example
  (ONNX Runtime vs the simulation): the export users already run, the baseline of the ratio.

Each line gives the median and the fastest run in ms and the ratio of medians to ``onnx_exact``;
threads are fixed (``--threads``, default 1) and the load average is printed (the machine may be
shared). Nothing is downloaded; the weights are random.

Usage: ``python scripts/bench_xmodel.py [--models resnet18,digits] [--size 224] [--repeats 5]
[--threads 1] [--batches 2]``
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cpu import load_average  # noqa: E402
from pipeline.quantizers.sim.export import export_onnx, verify_onnx  # noqa: E402
from pipeline.models.zoo import digits_cnn, randomize_bn, resnet18  # noqa: E402
from pipeline.quantizers.quant_config import load_quant_config  # noqa: E402
from pipeline.quantizers.sim.session import SimSession  # noqa: E402
from pipeline.xir import reader  # noqa: E402
from pipeline.quantizers.sim.xmodel import verify, writer  # noqa: E402


def _model(name: str, size: int) -> Tuple[torch.nn.Module, Tuple[int, ...]]:
    torch.manual_seed(0)
    model = resnet18(num_classes=1000) if name == "resnet18" else digits_cnn()
    randomize_bn(model, 1)
    return model.eval(), ((3, size, size) if name == "resnet18" else (1, 8, 8))


def _test_model(model: torch.nn.Module, shape: Tuple[int, ...], batches: int, folder: str):
    cfg = load_quant_config(None, None)
    data = [torch.randn((4,) + shape, generator=torch.Generator().manual_seed(i)) for i in range(batches)]
    session = SimSession(model, data[0], cfg)
    calibrator = session.calibrator()
    for batch in data:
        calibrator.step(batch)
    session.export_quant_config(calibrator, folder)
    return session, session.load_test(folder), data[0][:1].clone()


def _timers(session, lowered, example, folder: str) -> Dict[str, Callable[[], None]]:
    path = os.path.join(folder, "bench_exact.onnx")
    built = {}

    def write() -> None:
        graph, names = writer.build(session, lowered, (example,))
        built["bytes"], built["names"] = graph.serialize(), names

    def check_and_run() -> None:
        checked = reader.check(reader.read_xmodel(built["bytes"]))
        report = verify.compare(checked, session, lowered, (example,), built["names"])
        assert report["mismatches"] == 0 and not report["nodes_differing"], report

    def total() -> None:
        write()
        check_and_run()

    def onnx() -> None:
        export_onnx(lowered, example, path, "exact")
        assert verify_onnx(lowered, path, example)["mismatches"] == 0

    write()  # the verification reads what the first write made
    return {"xmodel write": write, "xmodel verify": check_and_run, "xmodel total": total, "onnx_exact": onnx}


def _time(fns: Dict[str, Callable[[], None]], repeats: int) -> Dict[str, List[float]]:
    for fn in fns.values():  # warm-up: imports, allocator, ONNX Runtime session code
        fn()
    times = {name: [] for name in fns}  # type: Dict[str, List[float]]
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,digits")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("threads %d, load average before: %s" % (args.threads, load_average()))
    for name in args.models.split(","):
        model, shape = _model(name, args.size)
        with tempfile.TemporaryDirectory() as folder:
            session, lowered, example = _test_model(model, shape, args.batches, folder)
            times = _time(_timers(session, lowered, example, folder), args.repeats)
        base = statistics.median(times["onnx_exact"])
        print("%s, input %s, %d repeats:" % (name, "x".join(str(d) for d in (1,) + shape), args.repeats))
        for kind, runs in times.items():
            median = statistics.median(runs)
            print("  %-14s median %8.1f ms  fastest %8.1f ms  %5.2fx onnx_exact" % (
                kind, 1000 * median, 1000 * min(runs), median / base))
    print("load average after: %s" % (load_average(),))


if __name__ == "__main__":
    main()
