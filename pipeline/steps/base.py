"""What a step declares (``Step``) and the base of its typed results (``StepResult``).

A step module defines ``STEP = Step(...)`` and a ``run(ctx) -> <Step>Result``; ``pipeline.steps.execute``
checks ``requires``, runs it, saves the result as steps/<name>.json and then calls ``check`` (a verdict
that fails the step after its results are saved); the driver (``pipeline.runner.driver``) calls it.
"""
import json
import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional, Tuple


def in_run_folder(path: Any, root: str) -> Any:
    """A path a saved step result holds, shown against ``root``: the run folder stores the paths inside
    it relative to itself (a moved or copied folder reads the same), so a relative ``path`` is joined to
    ``root`` ("" for the run folder's own reports: the path stays relative to it; the folder's current
    path for the command line); an absolute one (outside the folder, or saved by an older version) is
    kept. Anything else (None, "") comes back as it is."""
    if not isinstance(path, str) or not path or os.path.isabs(path):
        return path
    return os.path.join(root, path) if root else path


def omitted_when_none(default: Any = None) -> Any:
    """A result field left out of steps/<step>.json when it is None (a variant of the result)."""
    return field(default=default, metadata={"omit_none": True})


def transient(default_factory: Callable[[], Any]) -> Any:
    """A result field the step's ``check`` reads but steps/<step>.json does not hold."""
    return field(default_factory=default_factory, metadata={"transient": True})


@dataclass
class StepResult:
    """Base of the step results: ``to_json`` gives steps/<step>.json's content, ``from_json`` reads it back
    (unknown keys ignored, missing ones at their defaults).

    ``handed_on``: the files this step hands to later steps, ``{path relative to the run folder:
    {"sha256", "bytes"}}`` (``pipeline.handoff.record``); the steps that read them check them against it
    (``pipeline.handoff.verify``) and refuse a changed, truncated or replaced file. None: it hands on none.
    """
    handed_on: Optional[Dict[str, Dict[str, Any]]] = omitted_when_none()

    def to_json(self) -> Dict[str, Any]:
        out = {}
        for f in fields(self):
            if f.metadata.get("transient"):  # the verdict's inputs, not saved
                continue
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Optional[Dict[str, Any]]) -> Any:
        if data is None:
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    # What the step adds to the run's report (pipeline.runner.report keeps only the frame: status,
    # warnings, the quantizer's changes, the source, artifacts, versions). REPORT_KEYS: the keys of
    # report.json it fills, None there while the step has no result.
    REPORT_KEYS = ()  # type: Tuple[str, ...]

    # ``work_dir`` below is the folder the result's paths are shown against (``in_run_folder``): "" for
    # report.json and report.md (paths relative to the run folder), its current path for the command line.
    def report_fields(self, work_dir: str) -> Dict[str, Any]:
        """This result's keys of report.json (``REPORT_KEYS``); paths shown against ``work_dir``."""
        return {}

    def report_section(self, work_dir: str) -> List[str]:
        """report.md's section(s) of this step, Markdown lines (empty: none)."""
        return []

    def report_html(self, work_dir: str) -> List[Dict[str, Any]]:
        """report.html's blocks of this step, plain data that ``pipeline.runner.html_parts`` renders and
        escapes (``{"markdown": lines}``, ``{"table": ...}``, ``{"pre": text}``, ``{"svg": text}``,
        ``{"markdown_file": path}``): its report.md section unless the step shows more."""
        lines = self.report_section(work_dir)
        return [{"markdown": lines}] if lines else []

    def summary_lines(self, work_dir: str) -> List[str]:
        """The lines the command line prints for this step at the end of a run."""
        return []

    def step_warnings(self) -> List[str]:
        """The warnings the step gave (report.json's ``warnings``, the first lines of the summary)."""
        return []

    def quantizer_changes(self) -> List[Tuple[str, str]]:
        """``(change, node)`` for each change the quantizer makes to a node on its way to the DPU."""
        return []


@dataclass(frozen=True)
class Step:
    """One step of the pipeline.

    Attributes:
        name: the ``--steps`` name.
        run: ``run(ctx) -> StepResult`` (ctx: ``pipeline.steps.context.StepContext``).
        writes: the run-folder entry the step writes besides steps/<name>.json.
        requires: steps whose saved results it reads; the driver refuses to run it without them
            (PipelineError saying to run them first), and re-running one of them removes this step's results.
        after: steps whose outputs it reads when present without requiring their results (calib reads
            train's model, or an outside model.weights): re-running them removes this step's results.
        reads: the data splits it reads (``data.split``); the pre-flight refuses an empty one before any work.
        one_unit: its output is complete or absent: what a failed or interrupted run of it wrote is removed.
        given_by_config: ``given_by_config(cfg)`` is True when the config supplies the step's output
            (train: ``model.weights``); re-running the step then keeps those files and it needs no split.
        preflight: ``preflight(ctx)``, checks of its own before any step runs (no work; raises).
        own_process: runs in a child process when the backend needs separate processes and more
            than one such step runs in one invocation.
        distributed: splits its batches over the ranks under torchrun (the others run on rank 0).
        check: ``check(ctx, result)``, run after the result is saved; raises to fail the step.
        command: help text of a top-level command (``python -m pipeline <name>``) that runs this step
            alone, or None.
        environment: ``environment() -> (uses, can_run, why_not)``, the step's line of ``check-env``
            when it needs a tool of its own (the backends' steps come from their ``requirements``).
        default: part of a run that names no steps (``--steps all``); False: on request only.
        requires_when: ``requires_when(cfg) -> (step, ...)``: steps whose saved results it reads under
            this config, besides ``requires`` (test and export read the qat step's when QAT is on).
        off: ``off(cfg) -> reason or None``: the config turns the step off (a reason, e.g. "quantizer.qat.enabled
            is false"): the driver leaves it out of the run, saying why; None: it runs.
        made_under: ``made_under(cfg) -> {setting: value}`` (JSON values): the config settings the step's result
            derives from beyond the steps it requires (inspect: the model's architecture, the preprocessing,
            compile.target); its result records them (``made_under``) and the report leaves out a result
            made under other settings than the current config's, with a warning. None: no such settings.
        result: its ``StepResult`` subclass.
    """
    name: str
    run: Callable[[Any], StepResult]
    writes: str
    requires: Tuple[str, ...] = ()
    after: Tuple[str, ...] = ()
    reads: Tuple[str, ...] = ()
    one_unit: bool = False
    given_by_config: Optional[Callable[[Any], bool]] = None
    preflight: Optional[Callable[[Any], None]] = None
    own_process: bool = False
    distributed: bool = False
    check: Optional[Callable[[Any, Any], None]] = None
    command: Optional[str] = None
    environment: Optional[Callable[[], Tuple[str, bool, Optional[str]]]] = None
    default: bool = True
    requires_when: Optional[Callable[[Any], Tuple[str, ...]]] = None
    off: Optional[Callable[[Any], Optional[str]]] = None
    made_under: Optional[Callable[[Any], Dict[str, Any]]] = None
    result: Any = None

    def __post_init__(self) -> None:
        if not (isinstance(self.result, type) and issubclass(self.result, StepResult)):
            raise TypeError("Step %r: result= must be its StepResult subclass, got %r" % (self.name, self.result))

    def required(self, cfg: Any) -> Tuple[str, ...]:
        """The steps whose saved results it reads under ``cfg``: ``requires`` and ``requires_when(cfg)``."""
        extra = tuple(self.requires_when(cfg)) if self.requires_when is not None else ()
        return self.requires + tuple(s for s in extra if s not in self.requires)

    def off_reason(self, cfg: Any) -> Optional[str]:
        """Why the config turns this step off (``off``), or None when it runs."""
        return None if self.off is None else self.off(cfg)

    def settings_changed(self, cfg: Any, result: Any) -> Optional[List[str]]:
        """The settings (``made_under``) whose values in ``cfg`` differ from those ``result`` recorded, as
        ``"key: then X, now Y"``; None where the step has none or the result recorded none (an older one)."""
        recorded = getattr(result, "made_under", None)
        if self.made_under is None or recorded is None:
            return None
        now = json.loads(json.dumps(self.made_under(cfg)))
        return ["%s: then %s, now %s" % (k, json.dumps(recorded.get(k)), json.dumps(now.get(k)))
                for k in sorted(set(recorded) | set(now)) if recorded.get(k) != now.get(k)]

    def given(self, cfg: Any) -> bool:
        """Whether the config supplies this step's output (``given_by_config``)."""
        return self.given_by_config is not None and bool(self.given_by_config(cfg))
