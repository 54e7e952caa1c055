"""What a step declares (``Step``) and the base of its typed results (``StepResult``).

A step module defines ``STEP = Step(...)`` and a ``run(ctx) -> <Step>Result``; the driver
(``pipeline.runner``) checks ``requires``, runs it, saves the result as steps/<name>.json and then
calls ``check`` (a verdict that fails the step after its results are saved).
"""
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, Optional, Tuple


def omitted_when_none(default: Any = None) -> Any:
    """A result field left out of steps/<step>.json when it is None (a variant of the result)."""
    return field(default=default, metadata={"omit_none": True})


def transient(default_factory: Callable[[], Any]) -> Any:
    """A result field the step's ``check`` reads but steps/<step>.json does not hold."""
    return field(default_factory=default_factory, metadata={"transient": True})


@dataclass
class StepResult:
    """Base of the step results: ``to_json`` gives steps/<step>.json's content, ``from_json`` reads it back
    (unknown keys ignored, missing ones at their defaults)."""

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


@dataclass(frozen=True)
class Step:
    """One step of the pipeline.

    Attributes:
        name: the ``--steps`` name.
        run: ``run(ctx) -> StepResult`` (ctx: ``pipeline.steps.context.Run``).
        writes: the run-folder entry the step writes besides steps/<name>.json.
        requires: steps whose saved results it reads; the driver refuses to run it without them
            (PipelineError saying to run them first), and re-running one of them removes this step's results.
        after: steps whose outputs it reads when present without requiring their results (calib reads
            train's model, or an outside model.weights): re-running them removes this step's results.
        own_process: runs in a child process when the backend needs separate processes and more
            than one such step runs in one invocation.
        distributed: splits its batches over the ranks under torchrun (the others run on rank 0).
        check: ``check(ctx, result)``, run after the result is saved; raises to fail the step.
    """
    name: str
    run: Callable[[Any], StepResult]
    writes: str
    requires: Tuple[str, ...] = ()
    after: Tuple[str, ...] = ()
    own_process: bool = False
    distributed: bool = False
    check: Optional[Callable[[Any, Any], None]] = None
    result: Any = None
