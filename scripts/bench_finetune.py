"""Fast finetune: accuracy of none / the real algorithm / adaquant_plus on held-out data, its time, and
its peak memory against the finetune set size.

Part 1, per model (the zoo's digits CNN trained on scikit-learn's digits; the zoo's ResNet-18 and
MobileNetV2 with random weights and randomized BatchNorm statistics at ``--size``, on smooth
ImageNet-normalized images; nothing downloaded): calibration and finetune on the same ``--ft``
images in batches of ``--batch`` (as Vitis AI's examples finetune on the calibration set), then on
``--heldout`` other images the output MSE against the float model and the top-1 agreement with it:

- ``none``: plain calibration (CLE and bias correction on, the default config);
- ``adaquant``: the real quantizer's fast finetune (reproduced bit for bit, docs/finetune.md);
- ``adaquant_plus``: the project's method (continuous parameters through the rounding, bias
  correction kept; docs/finetune.md#methods).

Part 2 (``--memory``): ResNet-18, finetune sets of each size in ``--memory-sets``, one pass per layer
(memory does not depend on the pass count), each in its own child process: peak resident memory
(the kernel's high-water mark, reset when the finetune starts) with a bound (``--bound-mb``, default 64: at most half of it for kept batches and half
for a layer's cache in memory, the rest in files) and unbounded (every batch and layer cache in
memory, as the real quantizer keeps them), next to the process's resident memory before the finetune.

Threads are fixed (``--threads``, default 1) and the load average is printed.

Usage: ``python scripts/bench_finetune.py [--models digits,mobilenet_v2,resnet18] [--size 64] [--ft 32]
[--heldout 64] [--batch 4] [--passes 100] [--memory] [--memory-sets 64,1024] [--bound-mb 64]``
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cpu import cpu_capability, load_average, reset_peak_resident, resident_mib  # noqa: E402
from pipeline.models.zoo import digits_cnn, mobilenet_v2, randomize_bn, resnet18  # noqa: E402
from pipeline.quantizers.quant_config import load_quant_config  # noqa: E402
from pipeline.quantizers.sim.finetune import FastFinetune, FinetuneOptions  # noqa: E402
from pipeline.quantizers.sim.lowered import build_lowered  # noqa: E402
from pipeline.quantizers.sim.session import SimSession  # noqa: E402


def smooth_images(n: int, size: int, seed: int) -> torch.Tensor:
    """Smooth uint8-valued RGB images (a 4x4 grid upsampled, plus noise), ImageNet-normalized."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, 256, (n, 3, 4, 4), generator=g).float()
    up = F.interpolate(base, size=(size, size), mode="bilinear", align_corners=False)
    u8 = torch.clamp(torch.round(up + torch.randint(-16, 17, (n, 3, size, size), generator=g).float()), 0, 255)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return ((u8 / 255.0 - mean) / std).contiguous()


def digits_model_and_data() -> Tuple[torch.nn.Module, torch.Tensor]:
    """The digits CNN trained 10 epochs on the first 1,000 digits; returns it and the other 797 images."""
    from sklearn.datasets import load_digits
    from pipeline.train import train_model
    d = load_digits()
    x = ((torch.from_numpy(d.images).float() * 255 / 16).round() - 77.85) / 95.85
    x, y = x.unsqueeze(1).contiguous(), torch.from_numpy(d.target).long()
    torch.manual_seed(0)
    model = digits_cnn()
    g = torch.Generator().manual_seed(0)

    def batches():
        order = torch.randperm(1000, generator=g)
        for i in range(0, 1000, 64):
            yield x[order[i:i + 64]], y[order[i:i + 64]]

    train_model(model, batches, epochs=10, lr=0.003, weight_decay=0.0, seed=0)
    return model.eval(), x[1000:]


def model_and_data(name: str, size: int, n: int) -> Tuple[torch.nn.Module, torch.Tensor]:
    if name == "digits":
        model, x = digits_model_and_data()
        return model, x[:n]
    torch.manual_seed(0)
    model = resnet18(num_classes=1000) if name == "resnet18" else mobilenet_v2(num_classes=1000)
    randomize_bn(model, 1)
    return model.eval(), smooth_images(n, size, 4245)


def heldout_scores(model: torch.nn.Module, gm: torch.nn.Module, xs: List[torch.Tensor]) -> Tuple[float, float]:
    """Output MSE against the float model and top-1 agreement with it."""
    sq, count, agree, samples = 0.0, 0, 0, 0
    with torch.no_grad():
        for x in xs:
            f, q = model(x.clone()), gm(x)
            sq += float(((q.double() - f.double()) ** 2).sum())
            count += q.numel()
            agree += int((q.argmax(1) == f.argmax(1)).sum())
            samples += int(q.shape[0])
    return sq / count, agree / samples


def accuracy_part(args: argparse.Namespace) -> List[Dict[str, Any]]:
    rows = []
    for name in args.models.split(","):
        model, x = model_and_data(name, args.size, args.ft + args.heldout)
        ft_x, held = x[:args.ft], x[args.ft:]
        ft_batches = [ft_x[i:i + args.batch] for i in range(0, len(ft_x), args.batch)]
        held_batches = [held[i:i + 16] for i in range(0, len(held), 16)]
        cfg = load_quant_config(None, None)
        session = SimSession(model, ft_batches[0].clone(), cfg)
        plain = session.calibrator()
        start = time.perf_counter()
        for b in ft_batches:
            plain.step(b)
        plain_seconds = time.perf_counter() - start
        results = {"none": (plain, None, plain_seconds)}
        for method in ("adaquant", "adaquant_plus"):
            ft = FastFinetune(session, FinetuneOptions(method, passes=args.passes))
            start = time.perf_counter()
            for b in ft_batches:
                ft.record(b)
                ft.calibrate(b)
            ft.finetune()
            recal = ft.recalibrator()  # nndct's re-calibration (adaquant_plus: bias correction kept)
            for b in ft_batches:
                recal.step(b)
            results[method] = (recal, ft.trace(), time.perf_counter() - start)
            ft.close()
        for method, (calibrator, trace, seconds) in results.items():
            info, _ = session.quant_info(calibrator)
            gm = build_lowered(session.graph, session.plan, info, session.bitwidth, calibrator.bias_corrections(),
                               getattr(calibrator, "finetuned", None))
            mse, top1 = heldout_scores(model, gm, held_batches)
            rows.append({"model": name, "method": method, "heldout_mse": mse, "top1_agreement": top1,
                         "seconds": seconds, "codes_changed": trace["codes_changed"] if trace else 0})
            print("%-13s %-14s held-out MSE %.4e  top-1 agreement %.4f  %7.1f s  %d codes changed"
                  % (name, method, mse, top1, seconds, rows[-1]["codes_changed"]), flush=True)
    return rows


def memory_child(n: int, memory_mb: int, size: int, batch: int) -> Dict[str, Any]:
    """One finetune of ResNet-18 on ``n`` images, one pass per layer: the peak resident memory of the
    finetune phase (the kernel's high-water mark, reset just before it starts) above the resident
    memory at its start (model, session, the images as the data loader holds them)."""
    import gc
    torch.set_num_threads(1)
    model, x = model_and_data("resnet18", size, n)
    session = SimSession(model, x[:batch].clone(), load_quant_config(None, None))
    with tempfile.TemporaryDirectory() as spill:
        ft = FastFinetune(session, FinetuneOptions(passes=1, memory_mb=memory_mb, spill_dir=spill))
        gc.collect()
        before = reset_peak_resident()
        start = time.perf_counter()
        for i in range(0, n, batch):
            ft.record(x[i:i + batch])
            ft.calibrate(x[i:i + batch])
        ft.finetune()
        est = ft.estimate()
        out = {"images": n, "memory_mb": memory_mb, "rss_before_mib": before, "peak_rss_mib": resident_mib("VmHWM"),
               "estimate_mib": (est["inputs"] + est["targets"] + est["layer_cache"]) / 2.0 ** 20,
               "in_files_mib": ft.inputs.on_disk / 2.0 ** 20, "seconds": time.perf_counter() - start}
        ft.close()
    return out


def memory_part(args: argparse.Namespace) -> List[Dict[str, Any]]:
    rows = []
    for n in [int(v) for v in args.memory_sets.split(",")]:
        for memory_mb in (args.bound_mb, 10 ** 6):
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(n), str(memory_mb),
                                str(args.size), str(args.batch)], stdout=subprocess.PIPE, universal_newlines=True,
                               check=True)
            row = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append(row)
            print("resnet18 %4d images  memory_mb %-8s finetune peak RSS %6.0f MiB = %5.0f at its start + %5.0f "
                  "(kept batches + largest layer cache: %5.0f MiB; kept batches in files %5.0f MiB)  %6.1f s"
                  % (n, "%d MiB" % memory_mb if memory_mb == args.bound_mb else "all-RAM", row["peak_rss_mib"],
                     row["rss_before_mib"], row["peak_rss_mib"] - row["rss_before_mib"], row["estimate_mib"],
                     row["in_files_mib"], row["seconds"]), flush=True)
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        n, memory_mb, size, batch = (int(v) for v in sys.argv[2:6])
        print(json.dumps(memory_child(n, memory_mb, size, batch)))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="digits,mobilenet_v2,resnet18")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--ft", type=int, default=32)
    p.add_argument("--heldout", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--passes", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--memory", action="store_true")
    p.add_argument("--memory-sets", default="64,1024")
    p.add_argument("--bound-mb", type=int, default=64)
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print("threads %d, load average %s, torch %s, CPU capability %s" % (
        args.threads, load_average(), torch.__version__, cpu_capability()), flush=True)
    rows = {"accuracy": accuracy_part(args) if args.models else []}
    if args.memory:
        rows["memory"] = memory_part(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
