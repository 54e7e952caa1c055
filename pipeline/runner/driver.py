"""The driver: runs the asked steps (``pipeline.steps``) in pipeline order on one run folder
(``pipeline.runner.folder``), with the pre-flight checks, the lock, status.json, child processes and the
torch.distributed hooks. It names no step and no backend: what a step requires, writes and where it
runs comes from its ``Step`` declaration, what a backend needs from its class.

Because every step reads only files, steps can run in separate processes. A backend that declares
``separate_processes`` (the real quantizer, docs/quantizer.md#calib-and-test-in-separate-processes)
gets each ``own_process`` step in a child process when more than one of them runs in one invocation.
"""
import logging
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch

from .. import fileio, steps as step_graph
from ..config import LoadedConfig
from ..errors import ConfigError, PipelineError
from ..quantizers.base import backend_class, backend_classes
from .folder import SOURCE_FILE, RunDir, check_owned, in_use, lock_work_dir, unlock
from .status import LOCK_ENV, RunStatus, is_step_child
from ..steps.context import StepContext

log = logging.getLogger("pipeline")
ROWS_ENV = "PIPELINE_ROWS_SHA256"  # the run's split rows, checked by each child process it starts


def run_steps(loaded: LoadedConfig, steps: List[str], source: Any = None) -> Dict[str, Any]:
    """Run ``steps`` in pipeline order and write the report; returns report.json's content.

    Steps the config turns off (``Step.off``) are left out with a log line saying why; a run left
    with none is a ConfigError. Before the first step: the pre-flight checks (no work done when they fail) and an exclusive
    lock on the run folder (a second run into the same folder stops with an error). Before each
    step: the results of that step and of every step that derives from it are removed, so the
    run folder never mixes a new calibration with an old export. The report is written whatever
    happens and says which step failed or was interrupted.

    With a backend that declares ``separate_processes`` (nndct), the ``own_process`` steps (calib,
    test, export) each run in a child process when more than one of them is asked for (the real
    quantizer keeps state across modes, docs/quantizer.md#calib-and-test-in-separate-processes).

    A folder another run holds is refused before the source is read (the lock is probed; under
    torchrun only the lock itself decides). An environment ``pipeline.support`` refuses (torch 1.x on Python 3.11, a torch built for NumPy 1
    beside NumPy 2) raises PipelineError with the reason before anything is done.

    Under torchrun (``WORLD_SIZE`` > 1, ``pipeline.distributed``): the ``distributed`` steps (calib
    and test) split their batches over the ranks and give one process's results; every other step runs on rank 0 while
    the others wait. Rank 0 alone takes the lock, removes stale results, writes the run folder,
    status.json and the report. A rank that fails makes every rank fail (DistributedError naming
    it) instead of hanging. A backend that is not ``distributed`` (nndct) refuses (ConfigError). Before
    anything else the ranks compare their resolved configs (``check_same_config``): ranks started with
    different ones (another ``--set``) refuse with a ConfigError naming the first differing key.
    """
    from .. import distributed, runlock, support
    verdict = support.current()
    if verdict.kind == "refused":  # before any work: such an environment fails halfway, less clearly
        raise PipelineError("this environment cannot run the pipeline: %s" % verdict.text)
    if distributed.env_world_size() < 2 and not is_step_child(loaded.work_dir):
        holder = runlock.holder(loaded.work_dir)  # before the source is read: the lock itself is taken later
        if holder is not None:
            raise in_use(loaded.work_dir, holder)
    ordered, left_out = step_graph.active(steps, loaded.cfg)
    for name, why in left_out:
        log.info("%s: not run: %s", name, why)
    if not ordered:
        raise ConfigError("nothing to run: %s" % "; ".join("the %s step is off (%s)" % kv for kv in left_out))
    if loaded.cfg.run.num_threads:
        torch.set_num_threads(loaded.cfg.run.num_threads)
    comm = distributed.init_from_env(loaded.cfg.run.distributed_timeout_s)
    try:
        if comm is not None and not backend_class(loaded.cfg.quantizer.backend).distributed:
            able = [c.name for c in backend_classes() if c.distributed]
            raise ConfigError("quantizer.backend %s cannot run under torchrun (%d processes): it keeps process-global "
                              "state; run it in one process, or use a backend that splits calib and test over the "
                              "ranks (%s)" % (loaded.cfg.quantizer.backend, comm.world, ", ".join(able)))
        check_same_config(loaded, comm)  # before any step
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
    from .report import remove_report, write_report
    check_owned(loaded.work_dir)  # before anything reads it: a folder the pipeline did not mark is refused
    run = StepContext(loaded, RunDir(loaded, comm), source, comm)
    # the saved results this run removes before anything reads them: a damaged one does not stop it
    run.folder.replacing = {name for s in ordered for name, _ in step_graph.invalidated(s, loaded.cfg)}
    step_graph.check_requirements(ordered, run.folder, loaded.cfg)
    run.preflight([step_graph.BY_NAME[s] for s in ordered])
    backend = backend_class(loaded.cfg.quantizer.backend)
    children = [s for s in ordered if step_graph.BY_NAME[s].own_process]
    separate = backend.separate_processes and len(children) > 1
    if separate and source is not None:
        raise ConfigError("quantizer.backend %s runs %s each in a child process, which reads data.source from the "
                          "config and cannot see the array passed as images=; run one of those steps per call, or "
                          "save the array (np.save) and name it in data.source" % (backend.name, ", ".join(children)))
    expected = os.environ.get(ROWS_ENV) if is_step_child(loaded.work_dir) else None
    rows = run.feed.rows_sha256() if expected else None
    if expected and rows != expected:
        raise PipelineError("this child process of the run would cut the source into other train/calib/eval rows than "
                            "the run that started it (rows sha256 %s, the run's %s); its config or source differs from "
                            "the run's: this is a bug, please report it" % (rows[:12], expected[:12]))
    lock = lock_work_dir(loaded.work_dir) if run.is_main else None
    try:
        # status.json says "running" from here on; rank 0 alone writes it
        status = RunStatus(loaded.work_dir, ordered, active=run.is_main)
        if comm is not None:
            status.status["world_size"] = comm.world
        previous = status.start()
        if previous:
            log.warning("the previous run in %s (pid %s) was interrupted during step %s; it is redone if asked for",
                        loaded.work_dir, previous.get("pid"), previous.get("step"))
        before = after = None
        report = {}  # type: Dict[str, Any]
        state, error = "failed", "the run stopped unexpectedly"
        try:
            if run.is_main:
                run.folder.remove_stale_temporaries()
                run.folder.write_resolved_config()
                before = run.feed.source.fingerprint() if loaded.cfg.run.verify_source_unchanged else None
            for step in ordered:
                status.step(step)
                log.info("step %s", step)
                if run.is_main:
                    remove_report(loaded.work_dir)  # it would list the files invalidate removes
                    run.folder.invalidate(step, step_graph.invalidated(step, run.cfg))
                    write_report(run.folder)  # the report on disk lists what exists now, should the step be killed
                _sync(run, "the start of step %s" % step)
                declared = step_graph.BY_NAME[step]
                run.feed.sharded = comm is not None and declared.distributed
                snapshot = run.folder.snapshot(declared.writes) if run.is_main else {}
                try:
                    if separate and declared.own_process:
                        _run_in_child(run, step)
                    elif run.is_main or run.feed.sharded:
                        if comm is not None:
                            comm.context = "step %s" % step
                        step_graph.execute(run, step)
                finally:
                    run.folder.record_written(step, declared.writes, snapshot)  # what the next invalidation removes
                run.feed.sharded = False
                _sync(run, "the end of step %s (rank 0 writes its results)" % step)
            state, error = "ok", None
        except KeyboardInterrupt:
            state, error = "interrupted", "interrupted by the user (Ctrl-C)"
            raise
        except Exception as exc:
            state, error = "failed", "%s: %s" % (type(exc).__name__, exc)
            if not isinstance(exc, PipelineError) and run.is_main:
                mark_internal(exc, status.status.get("step"), loaded.work_dir)
            raise
        finally:
            failed = step_graph.BY_NAME.get(status.status.get("step") or "")
            if run.is_main and state != "ok" and failed is not None and failed.one_unit:
                run.folder.drop_partial(failed.name, failed.writes)
            if run.is_main:
                description = dict(run.feed.source.describe(), split_order=loaded.cfg.data.split_order,
                                   splits=run.feed.split_summary())
                if before is not None:
                    after = run.feed.source.fingerprint()
                    description.update(sha256_before=before, sha256_after=after, unchanged=before == after)
                fileio.write_json(run.folder.path(SOURCE_FILE), description)
                status.finish(state, error)
                report = write_report(run.folder)
        if before is not None and before != after:
            raise PipelineError("the source data changed during the run (sha256 %s -> %s); this is a bug: "
                                "please report it" % (before, after))
        return report if run.is_main else {}
    finally:
        unlock(lock)


def mark_internal(exc: BaseException, step: Optional[str], work_dir: str) -> None:
    """Note on ``exc``, an exception a step raised that is no PipelineError (an internal error: every refusal
    and user error is a PipelineError), the step it stopped (``exc.pipeline_step``) and the run folder
    (``exc.pipeline_work_dir``): the CLI reports it in one line as a bug, its traceback in a file of the
    run folder (``cli.internal_error``). The exception itself is raised on unchanged, for library callers."""
    try:
        exc.pipeline_step, exc.pipeline_work_dir = step, work_dir
    except AttributeError:  # an exception type with __slots__: the CLI prints its traceback as before
        pass


def first_difference(a: Any, b: Any, path: str = "") -> Optional[Tuple[str, Any, Any]]:
    """The first place where two plain (JSON-like) values differ: ``(dotted path, value in a, value in
    b)``, keys in ``a``'s order then those only in ``b``; a key one side lacks has the value
    ``MISSING``. None when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            where = "%s.%s" % (path, key) if path else str(key)
            if key not in b or key not in a:
                return where, a.get(key, MISSING), b.get(key, MISSING)
            found = first_difference(a[key], b[key], where)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, "%s[%d]" % (path, i))
            if found is not None:
                return found
        return None
    return None if a == b and type(a) == type(b) else (path or "(the whole config)", a, b)


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


MISSING = _Missing()


def check_same_config(loaded: LoadedConfig, comm: Any) -> None:
    """Under torch.distributed: refuse to start when the ranks resolved different configs.

    torchrun starts one command on every rank, but a rank can still resolve another config (another
    ``--set``, another file or environment behind it on another machine); it would then calibrate and
    evaluate with its own preprocessing while rank 0 writes as if all had rank 0's. Each rank hashes its
    resolved config (``LoadedConfig.absolute_raw``) and the hashes are compared (one collective); on a mismatch the
    configs are gathered and every rank raises the same error. A collective: every rank calls it
    before any step.

    Raises:
        ConfigError: a rank's config differs from rank 0's, naming the first differing key (dotted
            path) and both values, for each such rank.
        DistributedError: a rank failed or timed out meanwhile.
    """
    if comm is None:
        return
    import hashlib
    import json
    comm.context = "comparing the ranks' configs"
    raw = loaded.absolute_raw()
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    digests = comm.gather(digest)
    if all(d == digests[0] for d in digests):
        return
    raws = comm.gather(raw)  # every rank sees the mismatch, so every rank makes this call
    lines = []
    for r in range(1, comm.world):
        if digests[r] == digests[0]:
            continue
        found = first_difference(raws[0], raws[r]) or ("(a value of another type)", raws[0], raws[r])
        lines.append("rank %d's config differs from rank 0's at %s: rank 0 has %r, rank %d has %r"
                     % (r, found[0], found[1], r, found[2]))
    raise ConfigError("the %d ranks of this torchrun were started with different configs, so they would calibrate "
                      "and evaluate different things while rank 0 writes one result: %s. Nothing was run; give every "
                      "rank the same config file and the same --set overrides, and run again"
                      % (comm.world, "; ".join(lines)))


def _sync(run: StepContext, where: str) -> None:
    """Under torch.distributed: wait for every rank at ``where`` (DistributedError naming a failed rank)."""
    if run.comm is not None:
        run.comm.context = where
        run.comm.barrier()


def _run_in_child(run: StepContext, step: str) -> None:
    argv = [sys.executable, "-m", "pipeline", "run", "--config", run.folder.path("config.resolved.yaml"), "--steps", step]
    log.info("running %s in its own process: %s", step, " ".join(argv))
    env = dict(os.environ, **{LOCK_ENV: run.folder.work_dir, ROWS_ENV: run.feed.rows_sha256()})  # it runs under our lock
    proc = subprocess.run(argv, env=env)
    if proc.returncode != 0:
        raise PipelineError("step %s failed in its child process (exit code %d); its messages are above"
                            % (step, proc.returncode))


def run_config(config: str, steps: Optional[List[str]] = None, overrides: Optional[List[str]] = None,
               images: Any = None, labels: Any = None, layout: str = "NHWC") -> Dict[str, Any]:
    """The Python API: run ``steps`` of the YAML ``config``.

    Args:
        config: path of the YAML config.
        steps: a list of ``pipeline.steps.NAMES`` (run in pipeline order), or None or ``["all"]`` for the
            default steps (``pipeline.steps.DEFAULT_STEPS``: all but inspect).
        overrides: ``["dotted.path=value", ...]`` as with ``--set``.
        images: optional caller-owned numpy array or torch tensor (4-D, ``layout``) used instead of
            ``data.source``; it is never written (the run hashes it before and after when
            ``run.verify_source_unchanged`` is on) and never copied before the quantizer boundary.
        labels: optional 1-D integer labels for ``images`` (only with ``images``).
        layout: the axis order of ``images``: ``NHWC`` or ``NCHW``.

    Returns the content of report.json.

    Raises:
        ConfigError: ``steps`` is a string or names an unknown step; ``labels`` without ``images``; and
            every PipelineError a run raises.
    """
    from ..config import load_config
    if isinstance(steps, str) or (steps is not None and not all(isinstance(s, str) for s in steps)):
        raise ConfigError("steps must be a list of step names such as [\"calib\", \"test\"], got %r" % (steps,))
    names = step_graph.selected(steps)
    if labels is not None and images is None:
        raise ConfigError("labels= goes with images=: without images the run reads data.source (give its labels "
                          "there), or pass the images too")
    source = None
    if images is not None:
        from ..data.sources import open_source
        kind = "tensor" if isinstance(images, torch.Tensor) else "array"
        source = open_source({"type": kind, "images": images, "labels": labels, "layout": layout}, ".")
    return run_steps(load_config(config, overrides), names, source=source)
