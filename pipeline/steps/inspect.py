"""inspect: assign each node of the float model to the DPU or the CPU for compile.target."""
import json
import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .base import Step, StepResult, in_run_folder, omitted_when_none

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")


@dataclass
class InspectResult(StepResult):
    """steps/inspect.json: the one-line summary, the report files, each node's quantizer change, and
    ``graph``: the DPU/CPU partition (``graph_of``), drawn in report.html."""
    summary: str = ""
    files: Dict[str, str] = field(default_factory=dict)
    changes: List[str] = field(default_factory=list)
    graph: Optional[Dict[str, Any]] = omitted_when_none()
    made_under: Optional[Dict[str, Any]] = omitted_when_none()  # inspected_settings(cfg) of the run that made it

    def report_html(self, work_dir: str) -> List[Dict[str, Any]]:
        """The partition: the graph as inline SVG (``pipeline.inspect.svg``, no graphviz) and each node's verdict."""
        blocks = [{"markdown": ["## DPU/CPU partition (%s)" % ((self.graph or {}).get("target") or "inspection"), "",
                                self.summary, ""]}]  # type: List[Dict[str, Any]]
        if not self.graph:
            return blocks
        nodes = self.graph["nodes"]
        blocks.append({"svg": graph_svg(self.graph)})
        part = self.graph.get("partition")
        if part:
            blocks.append({"markdown": ["### Subgraphs: %s" % part["line"], "", "Rule: " + part["rule"], ""]
                           + ["- " + c for c in part["caveats"]] + [""]})
            blocks.append({"table": {"title": "Subgraphs (%d)" % len(part["subgraphs"]),
                                     "columns": ["subgraph", "device", "nodes", "inputs"],
                                     "rows": [[g["name"], g["device"], ", ".join(g["nodes"]), ", ".join(g["inputs"])]
                                              for g in part["subgraphs"]]}})
            blocks.append({"table": {"title": "How to move each CPU node to the DPU (fixes)",
                                     "columns": ["node", "op", "device", "subgraph", "breaks", "fix"],
                                     "rows": [[r["node"], r["op"], r["device"], r["subgraph"], " ".join(r["reasons"]),
                                               " / ".join(_fix_text(f) for f in r["fixes"]) or "none known here"]
                                              for r in part["fixes"]]}})
        blocks.append({"table": {"title": "Nodes (%d)" % len(nodes),
                                 "columns": ["#", "node", "op", "device", "shape", "inputs", "hardware constraints",
                                             "notes"],
                                 "rows": [[i, n["name"], n["op"], n["device"],
                                           "x".join(str(d) for d in n.get("shape") or []), ", ".join(n["inputs"]),
                                           " ".join(n.get("reasons") or []), " ".join(n.get("notes") or [])]
                                          for i, n in enumerate(nodes)]}})
        return blocks

    def quantizer_changes(self) -> List[Tuple[str, str]]:
        return [(change, node) for node, _, change in (line.partition(": ") for line in self.changes)]

    def summary_lines(self, work_dir: str) -> List[str]:
        part = (self.graph or {}).get("partition")
        return (["partition: " + part["line"]] if part else []) + [
            "reports: %s" % ", ".join(sorted(in_run_folder(p, work_dir) for p in self.files.values())), self.summary]


def _fix_text(fix: Dict[str, Any]) -> str:
    """One fix of ``partition_data`` as a line: its message, then the code change when it has one."""
    code = fix.get("code")
    return fix.get("message", "") + ((" `" + code + "`") if code else "")


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
    return InspectResult(summary=inspection.summary_line(), files=paths, changes=changes, graph=graph_of(inspection),
                         made_under=json.loads(json.dumps(inspected_settings(ctx.cfg))))


def inspected_settings(cfg: Any) -> Dict[str, Any]:
    """The config settings an inspection derives from (it requires no step's results): the model's architecture
    (``model.zoo``/``factory``/``kwargs``: the inspection needs no weights), the preprocessing (the example's
    shape) and ``compile.target``. The report leaves out an inspection made under others (``Step.made_under``)."""
    settings = {"model." + k: v for k, v in cfg.model.model_dump(include={"zoo", "factory", "kwargs"}).items()}
    settings.update({"preprocess": cfg.preprocess.model_dump(), "compile.target": cfg.compile.target})
    return settings


GRAPH_NODE_KEYS = ("name", "op", "device", "shape", "inputs", "reasons", "notes")


def graph_of(inspection: Any) -> Dict[str, Any]:
    """The partition as plain data: model, target, summary line, inputs, outputs, per node (topological
    order) ``GRAPH_NODE_KEYS`` of ``Inspection.to_json``, and ``partition`` (the subgraphs, their count
    and each CPU node's fixes: ``pipeline.inspect.partition.partition_data``)."""
    data = inspection.to_json()
    return {"model": data["model"], "target": data["target"], "summary": data["summary"]["line"],
            "inputs": data["inputs"], "outputs": data["outputs"], "partition": data.get("partition"),
            "nodes": [{k: n.get(k) for k in GRAPH_NODE_KEYS} for n in data["nodes"]]}


def graph_svg(graph: Dict[str, Any]) -> str:
    """``graph`` (``graph_of``) drawn by the inspection's own SVG writer, the picture of inspect_<target>.svg."""
    from ..inspect.svg import render_svg
    nodes = [SimpleNamespace(name=n["name"], op=n["op"], device=n["device"], shape=n.get("shape"),
                             inputs=list(n["inputs"]), reasons=list(n.get("reasons") or []),
                             notes=list(n.get("notes") or [])) for n in graph["nodes"]]
    stand_in = SimpleNamespace(inputs=[(i["name"], i.get("shape")) for i in graph["inputs"]], nodes=nodes,
                               outputs=list(graph["outputs"]), model_name=graph["model"],
                               target=SimpleNamespace(name=graph["target"]), summary_line=lambda: graph["summary"])
    return render_svg(stand_in)


STEP = Step("inspect", run, writes="inspect", reads=("eval",), result=InspectResult, default=False,
            made_under=inspected_settings, command="DPU/CPU assignment of every node for compile.target")
