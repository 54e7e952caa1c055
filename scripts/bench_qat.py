"""QAT against PTQ on the simulation: held-out accuracy, trained-versus-deployed outputs, the cost of a
QAT step against a float step, and (optionally) the real quantizer's QAT step against ours.

One row per case (``--models``):

- ``digits8`` / ``digits4``: the zoo's digits CNN trained on scikit-learn's 8x8 digits (the first
  1,000 images; the other 797 are the held-out set), at 8 and at 4 bits;
- ``mobilenet_v2`` / ``resnet18``: the zoo's models with ``num_classes=10`` on the same digits
  upsampled to 32x32 (bilinear) with 3 channels, trained briefly from scratch. Nothing downloaded.

Columns (accuracies: top-1 on the 797 held-out images, %):

- ``float``; ``PTQ``: ``torch_quantizer('calib')`` on ``--calib`` training images (default config:
  CLE and bias correction on), then ``'test'``; ``PTQ+FT``: ``fast_finetune`` on the same images,
  then ``load_ft_param`` in test mode;
- ``QAT``: ``QatProcessor(exact_deploy=False)`` (the real quantizer's behaviour) trained
  ``--qat-epochs``: the trainable model's eval-mode accuracy, ``to_deployable``'s model's accuracy,
  and ``diff``: the held-out images whose output logits differ (any element, bit for bit) between
  the two;
- ``exact``: the same with ``exact_deploy=True``; its ``diff`` must be 0 (the script exits 1 if not);
- ``float ms``, ``QAT x``, ``exact x``: a training step (forward, cross-entropy, backward, Adam)
  of the float model in train mode, and the QAT steps over it, timed in alternation in this
  process on the same batch: median of ``--time-steps`` steps after ``--time-warmup`` each;
- ``float MiB``, ``QAT MiB``: the resident memory a training step adds at its peak over what the
  process holds between steps (weights, gradients, Adam state, the model's buffers): in a fresh
  child process per kind (glibc's mmap threshold fixed at 128 KiB, ``MALLOC_MMAP_THRESHOLD_``, so
  freed tensors leave the resident set), the kernel's high-water mark (``VmHWM``, reset through
  ``/proc/self/clear_refs`` before the step) minus the resident memory before it (``VmRSS``), the
  largest of three steps after two warm-up steps; weights random (memory does not depend on them).
  Not tracemalloc (it does not see torch's allocator) nor the torch profiler;
- ``real/ours``: with ``--real-python PATH`` (a Python where ``pytorch_nndct`` imports), the real
  quantizer's ``QatProcessor`` trainable model's step time (same model shape, same batch, same
  threads, its ``functional.Add`` for ``+`` and ``QuantStub``/``DeQuantStub`` around the model,
  warm-up init, median as above) in a child process, over our QAT step's median; the real
  quantizer is only used, never built or installed here. Without it: ``n/a``.

The QAT recipe (the official example's settings): Adam with two parameter groups (thresholds lr
``--threshold-lr`` 1e-2, weights ``--weight-lr`` 1e-4), weight_decay 1e-4, loss = cross-entropy
+ 1e-4 * sqrt(sum of log_threshold^2), batch ``--batch``, BN statistics frozen
(``freeze_bn_stats``) after half the steps. Initialisation (``--init``): ``calib`` (default), the
thresholds from a PTQ calibration of the same images with CLE and bias correction off (QAT trains
the unequalized weights, as ``QatProcessor``'s own session has CLE off), or ``warmup`` (each
quantizer's warm-up on the first batch).

Seeds are fixed; threads are fixed (``--threads``) and printed with the load average at the start
and the end; default 1 thread, the steadiest on a shared machine (with 2 threads on 2 busy cores a
step took up to 8x longer, OpenMP threads waiting for a descheduled one). Figures:
docs/performance.md#qat.

Usage: ``python scripts/bench_qat.py [--quick] [--models digits8,digits4,mobilenet_v2,resnet18]
[--threads 2] [--qat-epochs N] [--init calib|warmup] [--real-python PATH] [--out table.md|rows.json]``
"""
import argparse
import copy
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.models.zoo import digits_cnn, mobilenet_v2, resnet18  # noqa: E402  (stdlib + torch only)

CASES = {"digits8": ("digits_cnn", 8), "digits4": ("digits_cnn", 4),
         "mobilenet_v2": ("mobilenet_v2", 8), "resnet18": ("resnet18", 8)}
SHAPES = {"digits_cnn": (1, 8, 8), "mobilenet_v2": (3, 32, 32), "resnet18": (3, 32, 32)}
FACTORIES = {"digits_cnn": lambda: digits_cnn(), "mobilenet_v2": lambda: mobilenet_v2(num_classes=10),
             "resnet18": lambda: resnet18(num_classes=10)}
N_TRAIN = 1000
COLUMNS = ["model", "bits", "float", "PTQ", "PTQ+FT", "QAT trainable", "QAT deployed", "QAT diff",
           "exact trainable", "exact deployed", "exact diff", "float ms", "QAT x", "exact x", "float MiB",
           "QAT MiB", "real/ours"]
MARK = "BENCH_QAT_JSON "


# ---- data and float models ---------------------------------------------------------------------------
def digits_data(name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits as the model ``name`` takes them, and the labels. 8x8: the project's
    normalization (uint8 scale, mean 77.85, std 95.85, as scripts/bench_finetune.py); 32x32: the
    8x8 image upsampled (bilinear), three equal channels, the same normalization."""
    from sklearn.datasets import load_digits
    d = load_digits()
    u8 = (torch.from_numpy(d.images).float() * 255 / 16).round().unsqueeze(1)
    if SHAPES[name][1] != 8:
        u8 = F.interpolate(u8, size=SHAPES[name][1:], mode="bilinear", align_corners=False).round()
        u8 = u8.expand(-1, 3, -1, -1)
    return ((u8 - 77.85) / 95.85).contiguous(), torch.from_numpy(d.target).long()


def shuffled_batches(x: torch.Tensor, y: torch.Tensor, batch: int, seed: int) -> Callable[[], Any]:
    g = torch.Generator().manual_seed(seed)

    def batches() -> Any:
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(x) - batch + 1, batch):  # full batches only (BN in train mode)
            yield x[order[i:i + batch]], y[order[i:i + batch]]
    return batches


def train_float(name: str, x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int, seed: int) -> nn.Module:
    """The float model, trained with the project's train step (Adam, cosine schedule)."""
    from pipeline.train import train_model
    torch.manual_seed(seed)
    model = FACTORIES[name]()
    lr = 0.003 if name == "digits_cnn" else 0.001
    train_model(model, shuffled_batches(x, y, batch, seed), epochs=epochs, lr=lr, weight_decay=0.0, seed=seed)
    return model.eval()


@torch.no_grad()
def outputs(forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batch: int = 100) -> torch.Tensor:
    return torch.cat([forward(x[i:i + batch]) for i in range(0, len(x), batch)])


def accuracy(out: torch.Tensor, y: torch.Tensor) -> float:
    return 100.0 * float((out.argmax(1) == y).float().mean())


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    """Rows (images) whose logits are not bit-identical."""
    return int((a != b).any(dim=1).sum())


# ---- PTQ ---------------------------------------------------------------------------------------------
def ptq(model: nn.Module, calib: List[torch.Tensor], held: torch.Tensor, bits: int, folder: str,
        finetune: bool, config: Any = None) -> Optional[torch.Tensor]:
    """Calibrate into ``folder`` (with fast finetune if asked); return the test-mode outputs on
    ``held`` (None with ``config``: a calibration for QAT's initialisation only)."""
    from pipeline.apis import torch_quantizer
    q = torch_quantizer("calib", model, (calib[0],), output_dir=folder, bitwidth=bits, device=torch.device("cpu"),
                        quant_config_file=config)

    def run(quant_model: nn.Module, batches: List[torch.Tensor]) -> None:
        with torch.no_grad():
            for b in batches:
                quant_model(b)
    if finetune:
        q.fast_finetune(run, (q.quant_model, calib))
    run(q.quant_model, calib)
    q.export_quant_config()
    if config is not None:
        return None
    t = torch_quantizer("test", model, (calib[0],), output_dir=folder, bitwidth=bits, device=torch.device("cpu"))
    if finetune:
        t.load_ft_param()
    return outputs(t.quant_model, held)


# ---- QAT ---------------------------------------------------------------------------------------------
def qat_optimizer(qmodel: Any, args: argparse.Namespace) -> torch.optim.Optimizer:
    return torch.optim.Adam([{"params": qmodel.quantizer_parameters(), "lr": args.threshold_lr},
                             {"params": qmodel.non_quantizer_parameters(), "lr": args.weight_lr}],
                            lr=args.weight_lr, weight_decay=1e-4)


def qat_loss(qmodel: Any, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    norm = sum(torch.sum(p ** 2) for p in qmodel.quantizer_parameters())
    return F.cross_entropy(out, y) + 1e-4 * torch.sqrt(norm)


def float_step_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> Callable[[], None]:
    opt = torch.optim.Adam(model.parameters(), lr=args.weight_lr, weight_decay=1e-4)
    model.train()

    def step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def qat_step_fn(qmodel: Any, x: torch.Tensor, y: torch.Tensor, args: argparse.Namespace) -> Callable[[], None]:
    opt = qat_optimizer(qmodel, args)
    qmodel.train()

    def step() -> None:
        opt.zero_grad()
        qat_loss(qmodel, qmodel(x), y).backward()
        opt.step()
    return step


def qat_run(model: nn.Module, example: torch.Tensor, batches: Callable[[], Any], held: torch.Tensor, bits: int,
            exact: bool, calib_dir: str, folder: str, args: argparse.Namespace) -> Dict[str, Any]:
    """Train, then the trainable model's eval-mode outputs and the deployed model's on ``held``."""
    from pipeline.apis import QatProcessor
    torch.manual_seed(args.seed)
    proc = QatProcessor(model, (example,), bitwidth=bits, exact_deploy=exact)
    qmodel = proc.trainable_model(calib_dir=calib_dir)
    opt = qat_optimizer(qmodel, args)
    plan = [b for _ in range(args.qat_epochs) for b in batches()]
    if args.qat_steps:
        plan = plan[:args.qat_steps]
    start, losses = time.perf_counter(), []
    qmodel.train()
    for i, (x, y) in enumerate(plan):
        if i == len(plan) // 2:
            qmodel.freeze_bn_stats()
        opt.zero_grad()
        loss = qat_loss(qmodel, qmodel(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    seconds = time.perf_counter() - start
    qmodel.eval()
    trained = outputs(qmodel, held)
    deployed_model = proc.to_deployable(qmodel, folder)
    deployed = outputs(deployed_model, held)
    k = max(1, min(10, len(losses) // 4))
    return {"trained": trained, "deployed": deployed, "steps": len(plan), "seconds": seconds,
            "moved": moved_positions(folder), "loss_first": sum(losses[:k]) / k if losses else float("nan"),
            "loss_last": sum(losses[-k:]) / k if losses else float("nan")}


def moved_positions(folder: str) -> int:
    """The fix positions ``to_deployable``'s DPU constraint pass moved: ``test/quant_info.json`` (the
    trained ones) against ``quant_info.json`` (what ships)."""
    with open(os.path.join(folder, "test", "quant_info.json")) as f:
        raw = json.load(f)
    with open(os.path.join(folder, "quant_info.json")) as f:
        shipped = json.load(f)
    return sum(1 for group in ("param", "output") for key, entry in raw[group].items()
               if entry[0][1] != shipped[group][key][0][1])


def time_steps(fns: List[Callable[[], None]], warmup: int, steps: int) -> List[float]:
    """Median seconds of each step function, run in alternation after ``warmup`` runs each."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]  # type: List[List[float]]
    for _ in range(steps):
        for fn, t in zip(fns, times):
            start = time.perf_counter()
            fn()
            t.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


# ---- children: memory, and the real quantizer ------------------------------------------------------
def memory_child(kind: str, name: str, bits: int, batch: int, threads: int) -> Dict[str, Any]:
    """The resident memory a training step adds at its peak (module docstring)."""
    import gc
    from pipeline.cpu import reset_peak_resident, resident_mib
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = FACTORIES[name]().eval()
    x, y = torch.randn(batch, *SHAPES[name]), torch.randint(0, 10, (batch,))
    ns = argparse.Namespace(threshold_lr=1e-2, weight_lr=1e-4)
    if kind == "float":
        step = float_step_fn(model, x, y, ns)
    else:
        from pipeline.apis import QatProcessor
        logging.getLogger("pipeline.apis").setLevel(logging.WARNING)
        qmodel = QatProcessor(model, (x,), bitwidth=bits, exact_deploy=(kind == "exact")).trainable_model()
        step = qat_step_fn(qmodel, x, y, ns)
    for _ in range(2):
        step()
    adds = []
    for _ in range(3):
        gc.collect()
        before = reset_peak_resident()
        step()
        adds.append(resident_mib("VmHWM") - before)
    return {"kind": kind, "step_peak_mib": max(adds), "all_mib": adds, "rss_between_steps_mib": before}


def run_memory_child(kind: str, name: str, bits: int, args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-memory", kind, name, str(bits),
                        str(args.batch), str(args.threads)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=env)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    print("memory child %s %s failed:\n%s" % (kind, name, r.stderr[-2000:]), file=sys.stderr)
    return None


def real_child(name: str, bits: int, batch: int, threads: int, warmup: int, steps: int) -> Dict[str, Any]:
    """In a Python where pytorch_nndct imports: the median step time of the real ``QatProcessor``'s
    trainable model (warm-up init) and of the float model, same shape, batch and threads."""
    torch.set_num_threads(threads)
    from pytorch_nndct import QatProcessor as RealQat
    from pytorch_nndct.nn import DeQuantStub, QuantStub
    from pytorch_nndct.nn.modules import functional
    from pipeline.models import zoo

    # the zoo's residual adds as the real quantizer's Add module (same arithmetic, no parameters)
    def block_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(self.skip_add(out, identity))

    def inverted_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return self.skip_add(x, out) if self.use_residual else out
    zoo.BasicBlock.forward = block_forward
    zoo.InvertedResidual.forward = inverted_forward

    class Stubbed(nn.Module):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.quant, self.net, self.dequant = QuantStub(), net, DeQuantStub()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dequant(self.net(self.quant(x)))

    torch.manual_seed(0)
    net = FACTORIES[name]()
    for m in net.modules():
        if isinstance(m, (zoo.BasicBlock, zoo.InvertedResidual)):
            m.skip_add = functional.Add()
    x, y = torch.randn(batch, *SHAPES[name]), torch.randint(0, 10, (batch,))
    ns = argparse.Namespace(threshold_lr=1e-2, weight_lr=1e-4)
    float_model = copy.deepcopy(net)
    model = Stubbed(net).train()
    start = time.perf_counter()
    qmodel = RealQat(model, (x,), bitwidth=bits).trainable_model()
    build = time.perf_counter() - start
    qat, flt = time_steps([qat_step_fn(qmodel, x, y, ns), float_step_fn(float_model, x, y, ns)], warmup, steps)
    return {"real_qat_step_s": qat, "real_float_step_s": flt, "real_build_s": build}


def run_real_child(python: str, name: str, bits: int, args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    with tempfile.TemporaryDirectory() as cwd:  # the real one writes .vai_qat/ into its working folder
        r = subprocess.run([python, os.path.abspath(__file__), "--child-real", name, str(bits), str(args.batch),
                            str(args.threads), str(args.time_warmup), str(args.time_steps)], cwd=cwd,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    print("real-quantizer child %s failed (rc %d):\n%s" % (name, r.returncode, (r.stdout + r.stderr)[-3000:]),
          file=sys.stderr)
    return None


def real_available(python: Optional[str]) -> bool:
    if not python:
        return False
    r = subprocess.run([python, "-c", "import pytorch_nndct"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.returncode == 0


# ---- one case ------------------------------------------------------------------------------------------
def run_case(case: str, float_models: Dict[str, nn.Module], data: Dict[str, Any], work: str,
             args: argparse.Namespace, real: bool) -> Dict[str, Any]:
    name, bits = CASES[case]
    x, y = data[name]
    xt, yt, xh, yh = x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]
    if name not in float_models:
        start = time.perf_counter()
        epochs = args.float_epochs if name != "digits_cnn" else args.digits_epochs
        float_models[name] = train_float(name, xt, yt, epochs, args.batch, args.seed)
        print("  %s: float model trained (%d epochs, %.0f s)" % (name, epochs, time.perf_counter() - start),
              flush=True)
    model = float_models[name]
    calib = [xt[i:i + args.batch] for i in range(0, args.calib, args.batch)]
    row = {"case": case, "model": name, "bits": bits}  # type: Dict[str, Any]
    row["float"] = accuracy(outputs(model, xh), yh)

    t0 = time.perf_counter()
    row["PTQ"] = accuracy(ptq(model, calib, xh, bits, os.path.join(work, case, "ptq"), False), yh)
    t1 = time.perf_counter()
    row["PTQ+FT"] = accuracy(ptq(model, calib, xh, bits, os.path.join(work, case, "ft"), True), yh)
    t2 = time.perf_counter()
    row["ptq_seconds"], row["ft_seconds"] = t1 - t0, t2 - t1
    print("  %s: PTQ %.1f s, PTQ+FT %.1f s" % (case, t1 - t0, t2 - t1), flush=True)

    calib_dir = ""
    if args.init == "calib":
        calib_dir = os.path.join(work, case, "qat_calib")
        from pipeline.quantizers.quant_config import load_quant_config
        cfg = load_quant_config(None, bits)  # QatProcessor's own settings: CLE and bias correction off
        cfg.include_cle = False
        cfg.include_bias_corr = False
        ptq(model, calib, xh, bits, calib_dir, False, config=cfg)
    batches = shuffled_batches(xt, yt, args.batch, args.seed + 1)
    for label, exact in (("QAT", False), ("exact", True)):
        r = qat_run(model, calib[0], batches, xh, bits, exact, calib_dir, os.path.join(work, case, label), args)
        row[label + " trainable"] = accuracy(r["trained"], yh)
        row[label + " deployed"] = accuracy(r["deployed"], yh)
        row[label + " diff"] = differing(r["trained"], r["deployed"])
        row[label + "_argmax_diff"] = int((r["trained"].argmax(1) != r["deployed"].argmax(1)).sum())
        row[label + "_max_abs_diff"] = float((r["trained"] - r["deployed"]).abs().max())
        row[label + "_steps"], row[label + "_seconds"] = r["steps"], r["seconds"]
        row[label + "_loss"] = [r["loss_first"], r["loss_last"]]
        row[label + "_moved_positions"] = r["moved"]
        print("  %s: %s %d steps in %.1f s, loss (mean of the first / last steps) %.3f -> %.3f; %d fix positions "
              "moved by to_deployable's constraint pass" % (case, label, r["steps"], r["seconds"], r["loss_first"],
                                                            r["loss_last"], r["moved"]), flush=True)
        # new batches generator state for the second run: the same sequence
        batches = shuffled_batches(xt, yt, args.batch, args.seed + 1)
    row["eval_images"] = len(yh)

    # step times, in alternation, on copies (the trained results above are untouched)
    from pipeline.apis import QatProcessor
    xb, yb = xt[:args.batch], yt[:args.batch]
    fns = [float_step_fn(copy.deepcopy(model), xb, yb, args)]
    for exact in (False, True):
        qm = QatProcessor(model, (xb,), bitwidth=bits, exact_deploy=exact).trainable_model(calib_dir=calib_dir)
        fns.append(qat_step_fn(qm, xb, yb, args))
    f_s, q_s, e_s = time_steps(fns, args.time_warmup, args.time_steps)
    row.update({"float_step_s": f_s, "qat_step_s": q_s, "exact_step_s": e_s})

    if args.memory:
        for kind in ("float", "qat"):
            m = run_memory_child(kind, name, bits, args)
            row[kind + "_step_mib"] = m["step_peak_mib"] if m else None
    if real:
        r = run_real_child(args.real_python, name, bits, args)
        row["real"] = r
        row["real_over_ours"] = r["real_qat_step_s"] / q_s if r else None
    return row


# ---- the table -----------------------------------------------------------------------------------------
def cells(row: Dict[str, Any], real_note: str) -> List[str]:
    def pct(v: float) -> str:
        return "%.1f" % v

    def mib(v: Optional[float]) -> str:
        return "-" if v is None else "%.0f" % v
    n = row["eval_images"]
    if row.get("real_over_ours") is not None:
        real = "%.2f" % row["real_over_ours"]
    else:
        real = real_note if "real" not in row else "failed"
    return [row["model"], str(row["bits"]), pct(row["float"]), pct(row["PTQ"]), pct(row["PTQ+FT"]),
            pct(row["QAT trainable"]), pct(row["QAT deployed"]), "%d/%d" % (row["QAT diff"], n),
            pct(row["exact trainable"]), pct(row["exact deployed"]), "%d/%d" % (row["exact diff"], n),
            "%.1f" % (1000 * row["float_step_s"]), "%.2f" % (row["qat_step_s"] / row["float_step_s"]),
            "%.2f" % (row["exact_step_s"] / row["float_step_s"]), mib(row.get("float_step_mib")),
            mib(row.get("qat_step_mib")), real]


def table(rows: List[Dict[str, Any]], real_note: str) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(cells(r, real_note)) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("--child-memory", "--child-real"):
        a = sys.argv[2:]
        if sys.argv[1] == "--child-memory":
            out = memory_child(a[0], a[1], int(a[2]), int(a[3]), int(a[4]))
        else:
            out = real_child(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]))
        print(MARK + json.dumps(out), flush=True)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=None, help="comma-separated cases: %s (default all)" % ",".join(CASES))
    p.add_argument("--quick", action="store_true", help="about 2 minutes: fewer epochs and timed steps")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--calib", type=int, default=None, help="calibration / finetune images (default 256; quick 64)")
    p.add_argument("--digits-epochs", type=int, default=10, help="float training of the digits CNN")
    p.add_argument("--float-epochs", type=int, default=None, help="float training at 32x32 (default 8; quick 2)")
    p.add_argument("--qat-epochs", type=int, default=None, help="QAT epochs over the 1,000 images (default 3; quick 1)")
    p.add_argument("--qat-steps", type=int, default=0, help="at most this many QAT steps (0: all of the epochs'; quick 16)")
    p.add_argument("--init", choices=("calib", "warmup"), default="calib")
    p.add_argument("--threshold-lr", type=float, default=1e-2)
    p.add_argument("--weight-lr", type=float, default=1e-4)
    p.add_argument("--time-steps", type=int, default=None, help="timed steps per kind (default 15; quick 5)")
    p.add_argument("--time-warmup", type=int, default=3)
    p.add_argument("--no-memory", dest="memory", action="store_false")
    p.add_argument("--real-python", default=None, help="a Python where pytorch_nndct imports")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the table (.md) or the rows (.json) here")
    args = p.parse_args()
    q = args.quick
    args.models = args.models or ",".join(CASES)
    args.calib = args.calib or (64 if q else 256)
    args.float_epochs = args.float_epochs or (2 if q else 8)
    args.qat_epochs = args.qat_epochs or (1 if q else 3)
    if q and not args.qat_steps:
        args.qat_steps = 16
    args.time_steps = args.time_steps or (5 if q else 15)
    if q:
        args.digits_epochs = min(args.digits_epochs, 6)
    for case in args.models.split(","):
        if case not in CASES:
            p.error("unknown case %r (known: %s)" % (case, ", ".join(CASES)))

    from pipeline.cpu import cpu_capability, load_average
    logging.getLogger("pipeline.apis").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    load_start = load_average()
    real = real_available(args.real_python)
    real_note = "n/a (real quantizer not installed)"
    if args.real_python and not real:
        real_note = "n/a (no pytorch_nndct in %s)" % args.real_python
    print("threads %d, load average %s (start), torch %s, CPU capability %s, %d CPUs; init %s; real quantizer: %s"
          % (args.threads, load_start, torch.__version__, cpu_capability(), os.cpu_count() or 0, args.init,
             args.real_python if real else "none"), flush=True)
    start = time.perf_counter()
    data = {}  # type: Dict[str, Any]
    float_models = {}  # type: Dict[str, nn.Module]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for case in args.models.split(","):
            name = CASES[case][0]
            if name not in data:
                data[name] = digits_data(name)
            print("%s:" % case, flush=True)
            rows.append(run_case(case, float_models, data, work, args, real))
    seconds = time.perf_counter() - start
    load_end = load_average()
    text = table(rows, real_note)
    meta = ("threads %d; load average %s at the start, %s at the end; %.0f s; QAT: %s init, %s epochs%s, batch %d, "
            "thresholds lr %g, weights lr %g; step times: median of %d after %d warm-up; memory: peak VmHWM - VmRSS "
            "(above the between-steps resident set) of a step in a child process"
            % (args.threads, load_start, load_end, seconds, args.init, args.qat_epochs,
               " (at most %d steps)" % args.qat_steps if args.qat_steps else "", args.batch, args.threshold_lr,
               args.weight_lr, args.time_steps, args.time_warmup))
    print()
    print(text)
    print()
    print(meta)
    for r in rows:
        if r.get("real"):
            rq, rf = r["real"]["real_qat_step_s"], r["real"]["real_float_step_s"]
            print("real quantizer %s: QAT step %.1f ms, its float step %.1f ms (%.2fx; ours %.2fx: real/ours %.2f "
                  "measured against each side's float step, which a change of load between the runs does not "
                  "move), build %.1f s" % (r["case"], 1000 * rq, 1000 * rf, rq / rf, r["qat_step_s"] / r["float_step_s"],
                                           (rq / rf) / (r["qat_step_s"] / r["float_step_s"]), r["real"]["real_build_s"]))
    if args.out:
        with open(args.out, "w") as f:
            if args.out.endswith(".json"):
                json.dump({"columns": COLUMNS, "table": [dict(zip(COLUMNS, cells(r, real_note))) for r in rows],
                           "rows": rows, "meta": meta, "args": vars(args)}, f, indent=1)
            else:
                f.write(text + "\n\n" + meta + "\n")
    bad = [r["case"] for r in rows if r["exact diff"] != 0]
    if bad:
        print("exact_deploy: trainable and deployed outputs differ for %s" % ", ".join(bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
