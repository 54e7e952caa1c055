"""The straight-line runner: one function per step, each reading what earlier steps left in the run folder.

Run folder layout (``run.work_dir``)::

    config.resolved.yaml        the validated config, input paths made absolute
    model/float.pt              train: the float state_dict (or the configured model.weights)
    quantize_result/            calib: quant_info.json (+ bias_corr.pth), calib_fingerprint.json
    export/                     export: <Model>_int*.onnx (sim) or <Model>_int.xmodel (nndct)
    compile/                    compile: compiled xmodel and log, or compile.sh + compile_plan.md
    deploy/                     deploy: the deploy bundle and its manifest
    steps/<step>.json           each step's results (accuracy, ledger, files, ...)
    report.json, report.md      written after every invocation from steps/*.json

Because every step reads only files, steps can run in separate processes. The ``nndct`` backend
requires it for calib and test (docs/quantizer.md#calib-and-test-in-separate-processes): when both run in one invocation, the runner starts each
in a child process.
"""
import logging
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
import yaml

from . import fileio
from .config import STEPS, LoadedConfig
from .errors import ConfigError, DataError, ExportError, PipelineError, QuantizationError

log = logging.getLogger("pipeline")

PROCESS_SEPARATED_STEPS = ("calib", "test", "export")
SMALL_EVAL = 100  # fewer eval images than this: the test step warns that the accuracy is coarse

# Fingerprint fields recorded for the record only: compile_target (without hardware-aware
# quantization the calibration does not depend on it) and config_hash (the config.* keys it
# hashes are compared one by one, so a mismatch names the key).
FINGERPRINT_INFORMATIVE = ("compile_target", "config_hash")


def progress(iterable: Any, desc: str, total: Optional[int] = None, unit: str = "batch") -> Any:
    """Wrap ``iterable`` in a tqdm progress bar on stderr (``iterable=None``: a bar updated by hand);
    silent with --quiet or when stderr is not a terminal."""
    from tqdm import tqdm
    disable = not log.isEnabledFor(logging.INFO) or not sys.stderr.isatty()
    return tqdm(iterable, desc=desc, total=total, unit=unit, leave=False, disable=disable)


class Run:
    """Everything one invocation needs, built lazily from the config.

    Args:
        loaded: the validated config.
        source: an already opened source (``pipeline.data.sources``) to use instead of
            ``data.source``; the Python API passes the caller's array this way.
    """

    def __init__(self, loaded: LoadedConfig, source: Any = None) -> None:
        self.loaded = loaded
        self.cfg = loaded.cfg
        self.work_dir = loaded.work_dir
        self._source = source
        self._compose = None
        self._boundary = None
        self._splits = None  # type: Optional[Dict[str, slice]]
        self.comm = None  # type: Any  # pipeline.distributed.Comm under torchrun: rank 0 alone writes
        self.sharded = False  # True while a step that splits its batches over the ranks runs (calib, test)

    @property
    def is_main(self) -> bool:
        """True on rank 0 of a torch.distributed run and in a one-process run: the one that writes."""
        return self.comm is None or self.comm.is_main

    # ------------------------------------------------------------------ paths
    def path(self, *parts: str) -> str:
        return os.path.join(self.work_dir, *parts)

    @property
    def weights_path(self) -> str:
        return self.loaded.resolve(self.cfg.model.weights) or self.path("model", "float.pt")

    @property
    def quant_dir(self) -> str:
        return self.path("quantize_result")

    # ------------------------------------------------------------------ data
    @property
    def source(self) -> Any:
        if self._source is None:
            from .data.sources import open_source
            self._source = open_source(self.cfg.data.source, self.loaded.base_dir)
        return self._source

    @property
    def compose(self) -> Any:
        if self._compose is None:
            from .stages import build_stages
            self._compose = build_stages(self.cfg.preprocess.stages, source=self.source)
        return self._compose

    @property
    def boundary(self) -> Any:
        if self._boundary is None:
            from .boundary import QuantizerBoundary
            p = self.cfg.preprocess
            self._boundary = QuantizerBoundary(p.mean, p.std, channel_order=self.compose.boundary_channel_order,
                                               layout=p.layout, dtype=torch.float32)
        return self._boundary

    @property
    def splits(self) -> Dict[str, slice]:
        if self._splits is None:
            from .data.batching import split
            self._splits = split(len(self.source), self.cfg.data.split)
        return self._splits

    def n_batches(self, part: str, limit: Optional[int] = None, batch_size: Optional[int] = None) -> int:
        """How many batches ``batches(part, ...)`` yields."""
        sl = self.splits[part]
        bs = batch_size or self.cfg.data.batch_size
        n = -(-(sl.stop - sl.start) // bs)
        return n if limit is None else min(n, limit)

    def batches(self, part: str, ledger: Any = None, limit: Optional[int] = None, batch_size: Optional[int] = None,
                shard: bool = True) -> Iterator[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
        """Boundary buffers of one split: ``(x float32 NCHW owned, labels int64 or None)``.

        While a distributed step runs (``sharded``, and ``shard``), only this rank's batches: batch
        ``i`` goes to rank ``i % world`` (``pipeline.distributed``); the others are not read past
        their views and not copied. Ledger rows keep the global batch index.

        Raises DataError when a batch holds NaN or Inf (public case P07), naming the batch and count.
        """
        from .data.batching import iter_batches
        bs = batch_size or self.cfg.data.batch_size
        total = self.n_batches(part, limit, bs)
        rank, world = (self.comm.rank, self.comm.world) if (shard and self.sharded) else (0, 1)
        if getattr(self.source, "streaming", False):  # decodes only this rank's batches
            it = self.source.batches(self.splits[part], bs, limit, rank, world)
        else:
            it = iter_batches(self.source, self.splits[part], bs, limit)
            if world > 1:
                it = (item for i, item in enumerate(it) if i % world == rank)
        total = len(range(rank, total, world))
        for k, (view, labels) in enumerate(progress(it, part, total)):
            i = k * world + rank
            x = self.boundary(self.compose(view, ledger=ledger, batch_index=i), ledger=ledger, batch_index=i)
            bad = int((~torch.isfinite(x)).sum())
            if bad:
                raise DataError("%s batch %d holds %d non-finite values (NaN or Inf) out of %d; clean the source "
                                "data or drop those samples" % (part, i, bad, x.numel()))
            yield x, (None if labels is None else torch.as_tensor(np.asarray(labels), dtype=torch.int64))

    def preflight(self, steps: List[str]) -> None:
        """Checks that need the data's shape but no work, for the ``steps`` about to run: the declared
        layout, the channel count after the stages against preprocess.mean/std, the splits the steps
        need, the arch.json fingerprint. Raises DataError, ConfigError, QuantizationError or
        CompileError."""
        from .checks import check_channels, check_declared_layout
        shape = tuple(self.source.shape if getattr(self.source, "streaming", False) else self.source.images.shape)
        check_declared_layout(shape, self.source.layout)
        batch_shape = (min(self.cfg.data.batch_size, shape[0]),) + shape[1:]
        check_channels(self.compose.output_shape(batch_shape), self.cfg.preprocess.mean,
                       [s.get("type") for s in self.cfg.preprocess.stages])
        sizes = {part: sl.stop - sl.start for part, sl in self.splits.items()}
        if "calib" in steps and not sizes.get("calib"):
            raise QuantizationError("calibration saw 0 batches: the calib split of the %d images is empty "
                                    "(data.split %s); give it a share of the data" % (shape[0], self.cfg.data.split))
        for step, part in (("train", "train"), ("test", "eval"), ("export", "eval"), ("inspect", "eval")):
            if step in steps and not (step == "train" and self.cfg.model.weights) and not sizes.get(part):
                raise DataError("the %s step needs the %s split, which is empty (data.split %s, %d images); give it "
                                "a share of the data" % (step, part, self.cfg.data.split, shape[0]))
        if "compile" in steps:
            arch = self.arch_json()
            if os.path.isfile(arch):
                from .targets import check_arch_json
                check_arch_json(arch, self.cfg.compile.target)  # P11, before any work

    def arch_json(self) -> str:
        """The arch.json the compile step uses: compile.arch_json, else the board's or the target's
        path inside the Vitis AI image. Raises ConfigError when none is known."""
        from .targets import arch_json_path
        c = self.cfg.compile
        return self.loaded.resolve(c.arch_json) or arch_json_path(c.target, c.board)

    def new_ledger(self) -> Any:
        from .tensors import Ledger
        return Ledger()

    # ------------------------------------------------------------------ model
    def float_model(self, need_weights: bool = True) -> torch.nn.Module:
        """The float model with its trained weights, in eval mode.

        With ``need_weights=False`` and no weights file yet, the seeded, untrained model (enough to
        inspect the architecture).
        """
        from .models.loading import build_model, load_weights
        m = self.cfg.model
        torch.manual_seed(self.cfg.run.seed)
        model = build_model(m.zoo, m.factory, m.kwargs)
        if not need_weights and not os.path.isfile(self.weights_path):
            return model
        return load_weights(model, self.weights_path)

    def settings(self) -> Any:
        from .quantizers.base import QuantSettings
        q = self.cfg.quantizer
        return QuantSettings(target=q.target, bitwidth=q.bitwidth,
                             quant_config_file=self.loaded.resolve(q.quant_config_file), device=q.device)

    def backend(self) -> Any:
        from .quantizers.base import get_backend
        return get_backend(self.cfg.quantizer.backend)

    def fingerprint(self, model: torch.nn.Module, example: torch.Tensor) -> Dict[str, Any]:
        """The calibration fingerprint of this config (pipeline.quantizers.fingerprint), plus the
        DPU target the run compiles for and the ``config.*`` settings that shape a calibration
        (FINGERPRINT_INFORMATIVE fields are recorded but do not invalidate a calibration)."""
        from .quantizers.fingerprint import make_fingerprint
        fp = make_fingerprint(model, example, self.settings(), self.loaded.calib_hash(), self.cfg.quantizer.backend)
        fp["compile_target"] = self.cfg.compile.target
        # the settings themselves, so that a mismatch names the key that changed, not only the hash
        fp.update(("config." + k, v) for k, v in self.loaded.calib_settings().items())
        return fp

    def example(self, ledger: Any = None) -> torch.Tensor:
        """The compile-boundary example: batch 1, owned, contiguous, from the first sample of the eval
        split (else of calib, else of train): real preprocessed data, not random. Recorded in
        ``ledger`` when given."""
        from .boundary import compile_example
        part = next(p for p in ("eval", "calib", "train") if self.splits[p].stop > self.splits[p].start)
        x, _ = next(self.batches(part, limit=1, batch_size=1, shard=False))
        return compile_example(x, ledger=ledger)

    # ------------------------------------------------------------------ bookkeeping
    def save_step(self, step: str, result: Dict[str, Any]) -> Dict[str, Any]:
        if self.is_main:
            fileio.write_json(self.path("steps", step + ".json"), result)
        return result

    def require(self, step: str, by: str) -> Dict[str, Any]:
        """The results of an earlier ``step`` that ``by`` needs; PipelineError saying to run it first."""
        result = self.load_step(step)
        if result is None:
            raise PipelineError("%s: the %s step has not run in %s (or its results were removed when an earlier "
                                "step ran again); run it first, e.g. --steps %s,%s" % (by, step, self.work_dir, step, by))
        return result

    def check_labels(self, model: torch.nn.Module, example: torch.Tensor, by: str) -> None:
        """Refuse a source without labels, and labels that the model's outputs cannot represent
        (label >= number of outputs): ``by`` (train, test) needs them."""
        labels = self.source.labels
        if labels is None:
            raise DataError("%s: the source has no labels; training and the accuracy test need them (give "
                            "data.source.labels, or set model.weights and run only calib, export, compile, deploy)"
                            % by)
        with torch.no_grad():
            outputs = model(example.clone())
        classes = int(outputs.shape[1]) if outputs.dim() == 2 else None
        top = int(np.max(labels))
        if classes is not None and (top >= classes or int(np.min(labels)) < 0):
            raise DataError("%s: the labels run from %d to %d but the model has %d outputs; set model.kwargs."
                            "num_classes (zoo models) to the number of classes, or check the labels"
                            % (by, int(np.min(labels)), top, classes))

    def load_step(self, step: str) -> Optional[Dict[str, Any]]:
        p = self.path("steps", step + ".json")
        return fileio.read_json(p) if os.path.isfile(p) else None

    def write_resolved_config(self) -> str:
        """Write config.resolved.yaml with input paths made absolute, so a child process can run it."""
        raw = self.loaded.absolute_raw()
        raw.setdefault("run", {})["work_dir"] = self.work_dir
        return fileio.write_text(self.path("config.resolved.yaml"), yaml.safe_dump(raw, sort_keys=True))


# ---------------------------------------------------------------------- steps

def step_train(run: Run) -> Dict[str, Any]:
    """Train a zoo model on the train split and save its state_dict to model/float.pt."""
    from .models.loading import build_model
    from .train import accuracy, train_model
    m = run.cfg.model
    if m.weights is not None:
        log.info("train: model.weights is set (%s); nothing to train", m.weights)
        return run.save_step("train", {"skipped": "model.weights is set", "weights": run.weights_path})
    torch.manual_seed(run.cfg.run.seed)
    model = build_model(m.zoo, m.factory, m.kwargs)
    run.check_labels(model.eval(), run.example(), "train")
    ledger = run.new_ledger()
    xs, ys = [], []  # the train split is not empty and has labels: preflight and check_labels
    for x, y in run.batches("train", ledger=ledger):
        xs.append(x)
        ys.append(y)
    x_all, y_all = torch.cat(xs), torch.cat(ys)
    gen = torch.Generator().manual_seed(run.cfg.run.seed)
    bs = m.train.batch_size

    def epoch_batches():
        order = torch.randperm(len(y_all), generator=gen)
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            yield x_all[idx], y_all[idx]

    bar = progress(None, "train", total=m.train.epochs, unit="epoch")

    def on_epoch(epoch: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss="%.4f" % loss)
        log.debug("epoch %d loss %.4f", epoch, loss)

    metrics = train_model(model, epoch_batches, m.train.epochs, m.train.lr, m.train.weight_decay,
                          run.cfg.run.seed, progress=on_epoch)
    bar.close()
    train_acc, n = accuracy(model, [(x_all, y_all)])
    fileio.write_torch(run.weights_path, model.state_dict())
    log.info("train: %d images, %d epochs in %.1f s, train accuracy %.4f", n, metrics["epochs"],
             metrics["seconds"], train_acc)
    return run.save_step("train", dict(metrics, train_accuracy=train_acc, train_images=n,
                                       weights=run.weights_path))


def step_inspect(run: Run) -> Dict[str, Any]:
    """Assign each node of the float model to the DPU or the CPU for compile.target."""
    from .inspect import inspect_model, write_reports
    inspection = inspect_model(run.float_model(need_weights=False), run.example(), run.cfg.compile.target)
    paths = write_reports(inspection, run.path("inspect"))
    log.info("inspect: %s", inspection.summary_line())
    changes = ["%s: %s" % (n.name, change) for n in inspection.nodes for change in n.changes]
    return run.save_step("inspect", {"summary": inspection.summary_line(), "files": paths, "changes": changes})


def step_calib(run: Run) -> Dict[str, Any]:
    """Calibrate on the calib split and write quantize_result/quant_info.json and the fingerprint."""
    from .quantizers.fingerprint import FILE_NAME, write_fingerprint
    from .checks import InputStats
    limit = run.cfg.data.calib_batches  # >= 1 or None (config); the calib split is not empty (preflight)
    model, example, ledger = run.float_model(), run.example(), run.new_ledger()
    stats = InputStats() if run.comm is None else InputStats().defer()
    batches = (stats.add(x) for x, _ in run.batches("calib", ledger=ledger, limit=limit))
    start = time.perf_counter()
    summary = run.backend().calibrate(model, example, batches, run.quant_dir, run.settings())
    seconds = time.perf_counter() - start
    if run.comm is not None:
        stats.merge_ordered(run.comm)
    input_stats = stats.result(run.cfg.preprocess.mean, run.cfg.preprocess.std)
    warnings = list(input_stats["warnings"])
    if run.cfg.quantizer.bitwidth != 8:
        warnings.append("quantizer.bitwidth is %d: the DPU targets run 8-bit (int8) models, so this calibration is a "
                        "simulation experiment; the xmodel export and compile need bitwidth 8"
                        % run.cfg.quantizer.bitwidth)
    for warning in warnings:
        log.warning("calib: %s", warning)
    fingerprint = run.fingerprint(model, example)
    fp_path = write_fingerprint(run.quant_dir, fingerprint) if run.is_main else os.path.join(run.quant_dir, FILE_NAME)
    log.info("calib: %d batches in %.1f s -> %s", summary["batches"], seconds, run.quant_dir)
    return run.save_step("calib", dict({"batches": summary["batches"], "seconds": seconds,
                                        "files": sorted(summary["files"] + [fp_path]),
                                        "input_stats": input_stats, "warnings": warnings,
                                        "ledger": ledger.summary()}, **_ranks(run, ledger)))


def _ranks(run: Run, ledger: Any) -> Dict[str, Any]:
    """Under torch.distributed: ``{"distributed": {"world_size", "ledger_by_rank"}}`` (each rank's
    boundary ledger summary; ``ledger`` is rank 0's). A collective."""
    if run.comm is None:
        return {}
    return {"distributed": {"world_size": run.comm.world, "ledger_by_rank": run.comm.gather(ledger.summary())}}


def step_test(run: Run) -> Dict[str, Any]:
    """Float and quantized top-1 accuracy on the eval split."""
    from .quantizers.fingerprint import check_fingerprint
    run.require("calib", "test")
    model, example = run.float_model(), run.example()
    run.check_labels(model, example, "test")
    check_fingerprint(run.quant_dir, run.fingerprint(model, example), ignore=FINGERPRINT_INFORMATIVE)
    handle = run.backend().load_test(model, example, run.quant_dir, run.settings())
    ledger = run.new_ledger()
    limit = run.cfg.data.eval_batches  # >= 1 or None (config); the eval split is not empty (preflight)
    float_correct, quant_correct, n = 0, 0, 0
    start = time.perf_counter()
    with torch.no_grad():
        for x, y in run.batches("eval", ledger=ledger, limit=limit):
            float_correct += int((model(x).argmax(dim=1) == y).sum())
            quant_correct += int((handle(x).argmax(dim=1) == y).sum())
            n += len(y)
    if run.comm is not None:  # integer counts: the sum is exact in any order
        float_correct, quant_correct, n = [sum(c) for c in zip(*run.comm.gather((float_correct, quant_correct, n)))]
    float_acc, quant_acc = float_correct / n, quant_correct / n
    drop = float_acc - quant_acc
    log.info("test: float accuracy %.4f, quant accuracy %.4f (drop %.2f points) on %d images",
             float_acc, quant_acc, 100 * drop, n)
    sim_handle = handle if run.cfg.quantizer.backend == "sim" else None
    eval_seconds = time.perf_counter() - start  # float and quantized inference, all ranks (after the gather)
    sensitivity, plot_files = _sensitivity(run, model, example, limit, sim_handle)
    warnings = []
    if n < SMALL_EVAL:
        warnings.append("accuracy was measured on only %d eval images: one image moves it by %.2f points, so the "
                        "accuracy drop check is coarse; give the eval split more data" % (n, 100.0 / n))
    for warning in warnings:
        log.warning("test: %s", warning)
    result = run.save_step("test", dict({"float_accuracy": float_acc, "quant_accuracy": quant_acc,
                                         "warnings": warnings, "accuracy_drop": drop, "eval_images": n,
                                         "eval_seconds": eval_seconds,
                                         "max_accuracy_drop": run.cfg.quantizer.max_accuracy_drop,
                                         "sensitivity": sensitivity, "plots": plot_files,
                                         "ledger": ledger.summary()}, **_ranks(run, ledger)))
    if drop > run.cfg.quantizer.max_accuracy_drop:
        raise QuantizationError("test: quantized accuracy %.4f is %.2f points below float %.4f, more than "
                                "quantizer.max_accuracy_drop=%.4f; use more or better calibration data"
                                % (quant_acc, 100 * drop, float_acc, run.cfg.quantizer.max_accuracy_drop))
    return result


def _sensitivity(run: Run, model: torch.nn.Module, example: torch.Tensor, limit: Optional[int],
                 handle: Any = None) -> Tuple[List[Dict[str, Any]], Dict[str, str]]:
    """Per-layer SQNR and cosine of the simulated model against float on the eval data, and the
    PNG plots of that table and of the activation ranges (quantizers/sim/sensitivity.py, plots.py).
    ``handle``: the sim test-mode model when the test step already built it; otherwise it is built
    from the calibration files, so this works after either backend's calib."""
    from . import plots
    from .quantizers.quant_info import read_quant_info
    from .quantizers.sim.backend import SimBackend
    from .quantizers.sim.sensitivity import json_safe, layer_sensitivity
    if handle is None:
        handle = SimBackend().load_test(model, example, run.quant_dir, run.settings())
    rows = layer_sensitivity(model, handle, read_quant_info(run.quant_dir),
                             (x for x, _ in run.batches("eval", limit=limit)), run.settings(),
                             comm=run.comm if run.sharded else None, example=example)
    files = {}
    if plots.is_available() and run.is_main:
        files = {"sensitivity": plots.plot_sensitivity(rows, run.path("plots", "sensitivity.png")),
                 "activation_ranges": plots.plot_activation_ranges(rows, run.path("plots", "activation_ranges.png"))}
    return json_safe(rows), files


def step_export(run: Run) -> Dict[str, Any]:
    """Export the quantized model from a batch-1 example and verify it against the simulation."""
    from .boundary import contiguous_parameters
    from .quantizers.fingerprint import check_fingerprint
    run.require("calib", "export")
    ledger = run.new_ledger()
    model, example = run.float_model(), run.example(ledger=ledger)
    check_fingerprint(run.quant_dir, run.fingerprint(model, example), ignore=FINGERPRINT_INFORMATIVE)
    model = contiguous_parameters(model, ledger=ledger)
    backend = run.backend()
    handle = backend.load_test(model, example, run.quant_dir, run.settings())
    files = {}
    for fmt in progress(list(run.cfg.export.formats), "export", unit="format"):
        files.update(backend.export(handle, example, run.path("export"), [fmt]))
    agreement, warnings = {}, []  # type: Dict[str, Any], List[str]
    if run.cfg.quantizer.backend == "sim":
        agreement, warnings = _verify_onnx(run, handle, files)
    np_example = run.path("export", "example_input.npy")
    with fileio.atomic_path(np_example) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, example.numpy())
    log.info("export: %s", ", ".join("%s -> %s" % kv for kv in sorted(files.items())))
    return run.save_step("export", {"files": files, "example_input": np_example,
                                    "example_shape": list(example.shape), "agreement": agreement, "warnings": warnings,
                                    "ledger": ledger.summary()})


def _verify_onnx(run: Run, handle: Any, files: Dict[str, str]) -> Tuple[Dict[str, Any], List[str]]:
    """ONNX Runtime vs the simulation on the eval batches, per ONNX flavour (pipeline.export.verify).

    onnx_exact is compared with the simulation; onnx_qdq is checked bit for bit against the
    half-to-even simulation, then compared with the simulation under ONNX Runtime's default
    optimizations (reported, warned about past 1 LSB). Returns the reports and the warnings.
    """
    from .export.verify import check_agreement, qdq_warning, verify_onnx, verify_qdq
    inputs = torch.cat([x for x, _ in run.batches("eval", limit=run.cfg.data.eval_batches)])
    out, warnings = {}, []
    for fmt, path in sorted(files.items()):
        if not fmt.startswith("onnx"):
            continue
        try:
            verify = verify_qdq if fmt == "onnx_qdq" else verify_onnx
            report = out[fmt] = verify(handle, path, inputs)
            log.info("export: %s vs simulation: max abs diff %g, %d of %d elements differ (max %s LSB)", fmt,
                     report["max_abs_diff"], report["mismatches"], report["elements"], report["max_diff_lsb"])
            if fmt in run.cfg.export.verify_max_lsb:
                check_agreement(report, run.cfg.export.verify_max_lsb[fmt])
        except ExportError as exc:  # keep the evidence, but not under the final name
            os.replace(path, path + ".rejected")
            raise ExportError("%s; the file was kept as %s.rejected" % (exc, path))
        warning = qdq_warning(report) if fmt == "onnx_qdq" else None
        if warning:
            log.warning("export: %s", warning)
            warnings.append(warning)
    return out, warnings


def step_compile(run: Run) -> Dict[str, Any]:
    """Compile the xmodel with vai_c_xir, or write the exact command and a plan when it is absent."""
    from .compilers import plan, vai_c
    from .targets import get_target
    c = run.cfg.compile
    target = get_target(c.target)
    arch = run.arch_json()
    export = run.require("export", "compile")
    xmodel = (export.get("files") or {}).get("xmodel")
    net = c.net_name or run.cfg.run.name
    out_dir = run.path("compile")  # (the arch.json fingerprint was checked before any work: preflight, P11)
    # without an exported xmodel (sim backend), the file the nndct export writes inside the image
    expected = run.path("export", "%s_int.xmodel" % type(run.float_model(need_weights=False)).__name__)
    argv = vai_c.build_argv(xmodel or expected, arch, out_dir, net, c.options or None)
    if xmodel and vai_c.is_available():
        compiled = vai_c.compile_xmodel(xmodel, arch, out_dir, net, c.options or None, target=target.name)
        return run.save_step("compile", {"compiled": compiled, "argv": argv, "target": target.name})
    reason = ("vai_c_xir is not on this machine: compiling needs the Vitis AI image" if not vai_c.is_available()
              else "no xmodel was exported (the sim backend writes ONNX; export an xmodel with the nndct backend "
                   "inside the Vitis AI image)")
    config = run.loaded.path
    if not os.path.relpath(config).startswith(".."):
        config = os.path.relpath(config)  # as the user passes it from the repository root
    plan_files = plan.write_compile_plan(out_dir, argv, target.name, reason, config_path=config)
    log.warning("compile: %s; wrote the exact command to %s", reason, plan_files["script"])
    return run.save_step("compile", {"compiled": None, "argv": argv, "target": target.name,
                                     "reason": reason, "plan": plan_files})


def step_deploy(run: Run) -> Dict[str, Any]:
    """Assemble the deploy bundle (compiled xmodel or compile plan, preprocessing spec, manifest)."""
    from .deploy import build_bundle
    from .quantizers.quant_info import read_quant_info
    run.require("calib", "deploy")
    comp = run.require("compile", "deploy")
    qi = read_quant_info(run.quant_dir)
    p = run.cfg.preprocess
    example_shape = (run.load_step("export") or {}).get("example_shape")
    preprocess = {"mean": p.mean, "std": p.std, "channel_order": run.compose.boundary_channel_order,
                  "source_color": run.source.color, "layout": p.layout, "source_layout": run.source.layout,
                  "input_fix_pos": _input_fix_pos(qi), "input_shape": example_shape}
    labels = run.source.labels  # the test step measures top-1 against them: a classifier
    classification = {"top_k": min(5, int(labels.max()) + 1) if labels is not None and len(labels) else 5,
                      "accuracy": (run.load_step("test") or {}).get("quant_accuracy")}
    manifest = build_bundle(run.work_dir, run.path("deploy"), comp.get("compiled"), preprocess,
                            run.cfg.compile.net_name or run.cfg.run.name, classification=classification)
    return run.save_step("deploy", {"manifest": manifest})


def _input_fix_pos(quant_info: Dict[str, Any]) -> Optional[int]:
    """The model input's fix_pos: the ``<Model>::nndct_input_0`` output entry of quant_info.json."""
    for name, entry in sorted(quant_info.get("output", {}).items()):
        if name.endswith("::nndct_input_0"):
            return int(entry[0][1])
    return None


STEP_FUNCTIONS = {
    "train": step_train,
    "inspect": step_inspect,
    "calib": step_calib,
    "test": step_test,
    "export": step_export,
    "compile": step_compile,
    "deploy": step_deploy,
}  # type: Dict[str, Callable[[Run], Dict[str, Any]]]


# ---------------------------------------------------------------------- driver

def run_steps(loaded: LoadedConfig, steps: List[str], source: Any = None) -> Dict[str, Any]:
    """Run ``steps`` in pipeline order and write the report; returns report.json's content.

    Before the first step: the pre-flight checks (no work done when they fail) and an exclusive
    lock on the run folder (a second run into the same folder stops with an error). Before each
    step: the results of that step and of every step that derives from it are removed, so the
    run folder never mixes a new calibration with an old export. The report is written whatever
    happens and says which step failed or was interrupted.

    With the nndct backend, calib, test and export each run in a child process when more than one
    of them is asked for (the real quantizer keeps state across modes,
    docs/quantizer.md#calib-and-test-in-separate-processes).

    Under torchrun (``WORLD_SIZE`` > 1, ``pipeline.distributed``): calib and test split their
    batches over the ranks and give one process's results; every other step runs on rank 0 while
    the others wait. Rank 0 alone takes the lock, removes stale results, writes the run folder,
    status.json and the report. A rank that fails makes every rank fail (DistributedError naming
    it) instead of hanging. The nndct backend refuses (ConfigError).
    """
    from . import distributed
    ordered = [s for s in STEPS if s in steps]
    if loaded.cfg.run.num_threads:
        torch.set_num_threads(loaded.cfg.run.num_threads)
    comm = distributed.init_from_env(loaded.cfg.run.distributed_timeout_s)
    try:
        if comm is not None and loaded.cfg.quantizer.backend != "sim":
            raise ConfigError("quantizer.backend %s cannot run under torchrun (%d processes): the real quantizer keeps "
                              "process-global state; run it in one process, or use the sim backend for a distributed "
                              "calib and test" % (loaded.cfg.quantizer.backend, comm.world))
        return _run_steps(loaded, ordered, source, comm)
    except BaseException as exc:
        if comm is not None:
            comm.post_failure(exc)
        raise
    finally:
        distributed.shutdown()


def _run_steps(loaded: LoadedConfig, ordered: List[str], source: Any, comm: Any) -> Dict[str, Any]:
    level = log.level
    if comm is not None and not comm.is_main:
        log.setLevel(max(logging.WARNING, log.getEffectiveLevel()))  # rank 0 tells the story once
    try:
        return _run_steps_logged(loaded, ordered, source, comm)
    finally:
        log.setLevel(level)


def _run_steps_logged(loaded: LoadedConfig, ordered: List[str], source: Any, comm: Any) -> Dict[str, Any]:
    from .report import write_report
    run = Run(loaded, source)
    run.comm = comm
    run.preflight(ordered)
    lock = _lock_work_dir(run.work_dir) if run.is_main else None
    try:
        before = None
        if run.is_main:
            _remove_stale_temporaries(run.work_dir)
            run.write_resolved_config()
            before = _source_fingerprint(run) if loaded.cfg.run.verify_source_unchanged else None
        separate = loaded.cfg.quantizer.backend == "nndct" and len(
            [s for s in ordered if s in PROCESS_SEPARATED_STEPS]) > 1
        status = {"state": "ok", "steps": ordered}  # type: Dict[str, Any]
        if comm is not None:
            status["world_size"] = comm.world
        try:
            for step in ordered:
                status["step"] = step
                log.info("step %s", step)
                if run.is_main:
                    _invalidate(run, step)
                _sync(run, "the start of step %s" % step)
                run.sharded = comm is not None and step in DISTRIBUTED_STEPS
                if separate and step in PROCESS_SEPARATED_STEPS:
                    _run_in_child(run, step)
                elif run.is_main or run.sharded:
                    if comm is not None:
                        comm.context = "step %s" % step
                    STEP_FUNCTIONS[step](run)
                run.sharded = False
                _sync(run, "the end of step %s (rank 0 writes its results)" % step)
            status.pop("step")
        except KeyboardInterrupt:
            status.update(state="interrupted", error="interrupted by the user (Ctrl-C)")
            raise
        except Exception as exc:
            status.update(state="failed", error="%s: %s" % (type(exc).__name__, exc))
            raise
        finally:
            if run.is_main and status.get("step") == "calib":
                _drop_partial_calibration(run)
            if run.is_main:
                description = run.source.describe()
                if before is not None:
                    after = _source_fingerprint(run)
                    description.update(sha256_before=before, sha256_after=after, unchanged=before == after)
                run.save_step("source", description)
                fileio.write_json(run.path("status.json"), status)
                report = write_report(run)
        if before is not None and before != after:
            raise PipelineError("the source data changed during the run (sha256 %s -> %s); this is a bug: "
                                "please report it" % (before, after))
        return report if run.is_main else {}
    finally:
        _unlock(lock)


def _drop_partial_calibration(run: Run) -> None:
    """Remove quantize_result/ after a failed or interrupted calib step: its files are written one by
    one (each atomically), and under torchrun a rank can fail after rank 0 wrote quant_info.json but
    before the fingerprint; a calibration is complete or absent."""
    import shutil
    if os.path.isdir(run.quant_dir):
        shutil.rmtree(run.quant_dir)
        log.info("calib: removed the incomplete %s", run.quant_dir)


DISTRIBUTED_STEPS = ("calib", "test")  # split over the ranks under torchrun; the others run on rank 0


def _sync(run: Run, where: str) -> None:
    """Under torch.distributed: wait for every rank at ``where`` (DistributedError naming a failed rank)."""
    if run.comm is not None:
        run.comm.context = where
        run.comm.barrier()


# What each step writes besides steps/<step>.json, and the steps whose results derive from it.
STEP_OUTPUTS = {
    "train": "model",
    "inspect": "inspect",
    "calib": "quantize_result",
    "test": "plots",
    "export": "export",
    "compile": "compile",
    "deploy": "deploy",
}
DERIVED_STEPS = {
    "train": ("calib", "test", "export", "compile", "deploy"),
    "inspect": (),
    "calib": ("test", "export", "compile", "deploy"),
    "test": (),
    "export": ("compile", "deploy"),
    "compile": ("deploy",),
    "deploy": (),
}


def _invalidate(run: Run, step: str) -> None:
    """Remove the results of ``step`` and of the steps derived from it, before ``step`` runs.

    The train step keeps model/ when model.weights names an outside file (it trains nothing then).
    """
    import shutil
    own = () if step == "train" and run.cfg.model.weights is not None else (step,)
    stale = []
    for name in own + DERIVED_STEPS[step]:
        folder, result = run.path(STEP_OUTPUTS[name]), run.path("steps", name + ".json")
        if name != step and (os.path.exists(folder) or os.path.exists(result)):
            stale.append(name)
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        if os.path.exists(result):
            os.remove(result)
    if stale:
        log.info("%s: removed the results of %s, which came from the previous %s", step, ", ".join(stale), step)


LOCK_FILE = ".pipeline.lock"
LOCK_ENV = "PIPELINE_LOCKED_WORK_DIR"  # set for the child processes of the run that holds the lock


def _lock_work_dir(work_dir: str) -> Any:
    """Create ``work_dir`` and take an exclusive lock on it (fcntl.flock on .pipeline.lock).

    Raises:
        PipelineError: the folder cannot be created or written, or another run holds the lock.
    """
    if os.environ.get(LOCK_ENV) == work_dir:
        return None  # a child process of the run that holds the lock
    import fcntl
    try:
        os.makedirs(work_dir, exist_ok=True)
        handle = open(os.path.join(work_dir, LOCK_FILE), "a+")
    except OSError as exc:
        raise PipelineError("run.work_dir %s cannot be used as the run folder (%s); choose a writable folder "
                            "with --set run.work_dir=..." % (work_dir, exc.strerror or exc))
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise PipelineError("run.work_dir %s is in use by another run (%s); wait for it to finish or choose another "
                            "folder with --set run.work_dir=..." % (work_dir, holder or "pid unknown"))
    handle.seek(0)
    handle.truncate()
    handle.write("pid %d" % os.getpid())
    handle.flush()
    return handle


def _unlock(handle: Any) -> None:
    if handle is not None:
        handle.close()  # closing releases the flock


def _remove_stale_temporaries(work_dir: str) -> None:
    """Delete ``.<name>.*.tmp`` files an earlier, killed run left behind (pipeline.fileio names them so)."""
    for folder, _, files in os.walk(work_dir):
        for name in files:
            if name.startswith(".") and name.endswith(".tmp"):
                os.remove(os.path.join(folder, name))


def _source_fingerprint(run: Run) -> str:
    from .tensors import fingerprint_array
    if getattr(run.source, "streaming", False):
        return run.source.fingerprint()
    return fingerprint_array(run.source.images)


def _run_in_child(run: Run, step: str) -> None:
    argv = [sys.executable, "-m", "pipeline", "run", "--config", run.path("config.resolved.yaml"), "--steps", step]
    log.info("running %s in its own process: %s", step, " ".join(argv))
    proc = subprocess.run(argv, env=dict(os.environ, **{LOCK_ENV: run.work_dir}))  # it runs under our lock
    if proc.returncode != 0:
        raise PipelineError("step %s failed in its child process (exit code %d); its messages are above"
                            % (step, proc.returncode))


def run_config(config: str, steps: Optional[List[str]] = None, overrides: Optional[List[str]] = None,
               images: Any = None, labels: Any = None, layout: str = "NHWC") -> Dict[str, Any]:
    """The Python API: run ``steps`` (default: all but inspect) of the YAML ``config``.

    Args:
        config: path of the YAML config.
        steps: subset of ``pipeline.config.STEPS``.
        overrides: ``["dotted.path=value", ...]`` as with ``--set``.
        images: optional caller-owned numpy array or torch tensor (4-D, ``layout``) used instead of
            ``data.source``; it is never written (the run hashes it before and after when
            ``run.verify_source_unchanged`` is on) and never copied before the quantizer boundary.
        labels: optional 1-D integer labels for ``images``.

    Returns the content of report.json. Raises PipelineError subclasses on bad input.
    """
    from .config import DEFAULT_STEPS, load_config
    source = None
    if images is not None:
        from .data.sources import open_source
        kind = "tensor" if isinstance(images, torch.Tensor) else "array"
        source = open_source({"type": kind, "images": images, "labels": labels, "layout": layout}, ".")
    return run_steps(load_config(config, overrides), list(steps or DEFAULT_STEPS), source=source)
