"""The pipeline's steps, one module each, in pipeline order (``ORDER``).

Each module declares ``STEP`` (``pipeline.steps.base.Step``: its name, what it requires, what it
writes, whether it runs in its own process or over the ranks) and ``run(ctx) -> <Step>Result``.
This list is the one place the step graph is written: ``--steps`` names, the run folder's
invalidation (``derived``) and the driver read it. To add a step: a module here, and its ``STEP`` in ``ORDER``.
"""
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import calib, compile, deploy, export, inspect, qat, test, train
from .base import Step

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

ORDER = (train.STEP, inspect.STEP, calib.STEP, qat.STEP, test.STEP, export.STEP, compile.STEP, deploy.STEP)  # type: Tuple[Step, ...]
BY_NAME = {s.name: s for s in ORDER}  # type: Dict[str, Step]
NAMES = [s.name for s in ORDER]
DEFAULT_STEPS = [s.name for s in ORDER if s.default]


def derived(name: str) -> Tuple[str, ...]:
    """The steps whose results derive from ``name``'s (through ``requires`` and ``after``), in pipeline order."""
    out = set()  # type: set
    changed = True
    while changed:
        changed = False
        for s in ORDER:
            if s.name not in out and any(d == name or d in out for d in s.requires + s.after):
                out.add(s.name)
                changed = True
    return tuple(s.name for s in ORDER if s.name in out)


def selected(names: Optional[List[str]]) -> List[str]:
    """The step names a run is asked for: ``DEFAULT_STEPS`` for None, ``[]`` or ``["all"]``, else ``names``
    (``--steps`` and ``pipeline.run(steps=...)`` both go through here). Raises ConfigError for a name
    that is not a step, naming the steps."""
    from ..errors import ConfigError
    if not names or list(names) == ["all"]:
        return list(DEFAULT_STEPS)
    unknown = [s for s in names if s not in NAMES]
    if unknown:
        raise ConfigError("unknown steps %s; choose from %s (comma separated for --steps) or 'all'" % (unknown, ",".join(NAMES)))
    return list(names)


def active(names: List[str], cfg: Any) -> Tuple[List[str], List[Tuple[str, str]]]:
    """``names`` in pipeline order without the steps the config turns off (``Step.off``), and
    ``(step, why)`` of those left out."""
    kept, left = [], []  # type: List[str], List[Tuple[str, str]]
    for s in ORDER:
        if s.name in names:
            why = s.off_reason(cfg)
            if why:
                left.append((s.name, why))
            else:
                kept.append(s.name)
    return kept, left


def invalidated(name: str, cfg: Any) -> List[Tuple[str, str]]:
    """``(step, folder)`` of each step whose results a new run of ``name`` makes stale: ``name`` itself
    (unless the config supplies its output, ``Step.given_by_config``) and every step ``derived`` from it."""
    own = [] if BY_NAME[name].given(cfg) else [name]
    return [(s, BY_NAME[s].writes) for s in own + list(derived(name))]


def check_requirements(names: List[str], folder: Any, cfg: Any) -> None:
    """Before any step runs: each of ``names`` (pipeline order) finds the results it ``requires``, saved
    in ``folder`` (``pipeline.runner.folder.RunDir``) and not made stale by an earlier one of ``names``
    (``invalidated``), or made by an earlier one. Raises PipelineError naming the step to run first."""
    from ..errors import PipelineError
    available = {s.name for s in ORDER if folder.load_step(s.name) is not None}
    for name in names:
        available -= {stale for stale, _ in invalidated(name, cfg)}
        for dep in BY_NAME[name].required(cfg):
            if dep not in available:
                stale = "" if folder.load_step(dep) is None else (
                    " (its results in %s would be removed by an earlier step of this run)" % folder.work_dir)
                chain = _missing_chain([d for d in BY_NAME[name].required(cfg) if d not in available], available, cfg)
                if len(chain) == 1:
                    raise PipelineError("%s: the %s step has not run in %s%s; run it first, e.g. --steps %s,%s"
                                        % (name, dep, folder.work_dir, stale, dep, name))
                raise PipelineError("%s: the %s and %s steps have not run in %s%s; run them first, e.g. --steps %s,%s"
                                    % (name, ", ".join(chain[:-1]), chain[-1], folder.work_dir, stale,
                                       ",".join(chain), name))
        available.add(name)


def _missing_chain(missing: List[str], available: Any, cfg: Any) -> List[str]:
    """The ``missing`` steps and every step they need, directly or through others, whose results are not
    ``available``, in pipeline order: what a run must do before the step that needs them."""
    chain, todo = set(), list(missing)  # type: Any, List[str]
    while todo:
        step = todo.pop()
        if step in chain or (step not in missing and step in available):
            continue
        chain.add(step)
        todo.extend(BY_NAME[step].required(cfg))
    return [s for s in NAMES if s in chain]


def execute(ctx: "StepContext", name: str) -> Any:
    """Run step ``name`` on ``ctx`` (``pipeline.steps.context.StepContext``), save steps/<name>.json, then its
    verdict (``Step.check``). Returns the typed result. The driver has checked the results it requires
    (``check_requirements``) before any step of the run."""
    step = BY_NAME[name]
    result = step.run(ctx)
    ctx.folder.save_step(name, result.to_json())
    if step.check is not None:
        step.check(ctx, result)
    return result


def load_results(folder: Any) -> Dict[str, Any]:
    """The saved results of every step in the run folder ``folder`` (``pipeline.runner.folder.RunDir``),
    typed (``<Step>Result.from_json``), in pipeline order."""
    out = {}
    for s in ORDER:
        data = folder.load_step(s.name)
        if data is not None:
            out[s.name] = s.result.from_json(data)
    return out


__all__ = ["ORDER", "BY_NAME", "NAMES", "DEFAULT_STEPS", "selected", "active", "derived", "invalidated", "check_requirements",
           "execute", "load_results", "Step"]
