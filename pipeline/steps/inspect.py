"""inspect: assign each node of the float model to the DPU or the CPU for compile.target."""
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from .base import Step, StepResult, in_run_folder

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")


@dataclass
class InspectResult(StepResult):
    """steps/inspect.json: the one-line summary, the report files, each node's quantizer change."""
    summary: str = ""
    files: Dict[str, str] = field(default_factory=dict)
    changes: List[str] = field(default_factory=list)

    def quantizer_changes(self) -> List[Tuple[str, str]]:
        return [(change, node) for node, _, change in (line.partition(": ") for line in self.changes)]

    def summary_lines(self, work_dir: str) -> List[str]:
        return ["reports: %s" % ", ".join(sorted(in_run_folder(p, work_dir) for p in self.files.values())), self.summary]


def run(ctx: "StepContext") -> InspectResult:
    from ..inspect import inspect_model, write_reports
    from ..progress import phase
    model, target = ctx.model.float_model(need_weights=False), ctx.loaded.target
    with phase("inspect: assigning the nodes of %s to the DPU of %s or the CPU" % (type(model).__name__, target.name)):
        inspection = inspect_model(model, ctx.feed.example(), target)
    with phase("inspect: writing the reports to %s" % ctx.folder.path("inspect")):
        paths = write_reports(inspection, ctx.folder.path("inspect"))
    log.info("inspect: %s", inspection.summary_line())
    changes = ["%s: %s" % (n.name, change) for n in inspection.nodes for change in n.changes]
    return InspectResult(summary=inspection.summary_line(), files=paths, changes=changes)


STEP = Step("inspect", run, writes="inspect", reads=("eval",), result=InspectResult, default=False,
            command="DPU/CPU assignment of every node for compile.target")
