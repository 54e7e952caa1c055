"""deploy: assemble the deploy bundle (compiled xmodel or compile plan, preprocessing spec, manifest).

Reads, when present, the export step's example shape and the test step's accuracy (not required).
"""
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from .base import Step, StepResult

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext


@dataclass
class DeployResult(StepResult):
    """steps/deploy.json: the bundle's manifest."""
    manifest: Dict[str, Any] = field(default_factory=dict)


def run(ctx: "StepContext") -> DeployResult:
    from ..deploy import build_bundle
    from ..quantizers.quant_info import read_quant_info
    comp = ctx.folder.require("compile", "deploy")
    qi = read_quant_info(ctx.model.quant_dir)
    export = ctx.folder.load_step("export") or {}
    example_shape = export.get("example_shape")
    preprocess = dict(ctx.feed.boundary.spec(), source_color=ctx.feed.source.color, source_layout=ctx.feed.source.layout,
                      input_fix_pos=input_fix_pos(qi), input_shape=example_shape)
    labels = ctx.feed.source.labels  # the test step measures top-1 against them: a classifier
    classification = {"top_k": min(5, int(labels.max()) + 1) if labels is not None and len(labels) else 5,
                      "accuracy": (ctx.folder.load_step("test") or {}).get("quant_accuracy")}
    from .compile import quantized_xmodel
    compiled = comp.get("compiled")
    if isinstance(compiled, dict) and isinstance(compiled.get("xmodel"), str):  # stored relative to the run folder
        compiled = dict(compiled, xmodel=os.path.join(ctx.folder.work_dir, compiled["xmodel"]))
    manifest = build_bundle(ctx.folder.work_dir, ctx.folder.path("deploy"), compiled, preprocess,
                            ctx.cfg.compile.net_name or ctx.cfg.run.name, classification=classification,
                            quantized_xmodel=quantized_xmodel(ctx, export))
    return DeployResult(manifest=manifest)


def input_fix_pos(quant_info: Dict[str, Any]) -> Optional[int]:
    """The model input's fix_pos: the ``<Model>::nndct_input_0`` output entry of quant_info.json."""
    for name, entry in sorted(quant_info.get("output", {}).items()):
        if name.endswith("::nndct_input_0"):
            return int(entry[0][1])
    return None


def environment() -> Tuple[str, bool, Optional[str]]:
    """check-env's line: the bundle needs nothing beyond the pipeline."""
    return ("the deploy bundle: compiled xmodel (or the compile plan), prototxt, preprocess.json, checksums, manifest",
            True, None)


STEP = Step("deploy", run, writes="deploy", requires=("calib", "compile"), after=("test",),  # its accuracy
            environment=environment, result=DeployResult)
