"""deploy: assemble the deploy bundle (compiled xmodel or compile plan, preprocessing spec, class names,
manifest) from files checked against the records of the steps that wrote them.

Before anything is written: the calibration is checked as committed and made under this config's
settings (its input fix_pos goes into the bundle, beside this config's preprocessing), the compiled
xmodel (or compile.sh and compile_plan.md, and the quantized xmodel) against the compile (and export)
step's sha256, the export step's example input (the model input's shape) against the export step's; ``pipeline.deploy.build_bundle`` then copies the bytes it matched and reads the
quantized xmodel back and checks it. Reads, when present, the test step's accuracy (not required).
"""
import os
from dataclasses import dataclass, field
import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import qat as qat_step
from .base import Step, StepResult

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")


@dataclass
class DeployResult(StepResult):
    """steps/deploy.json: the bundle's manifest (``deploy_check``: the export's deploy-check dumps in the
    model folder, with export.deploy_check), and ``warnings`` (a bundle without class names)."""
    manifest: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)

    def step_warnings(self) -> List[str]:
        return list(self.warnings)

    def summary_lines(self, work_dir: str) -> List[str]:
        m = self.manifest
        if not m:
            return []
        if m.get("compiled"):
            what = "compiled %s.xmodel" % m["model_name"]
        elif m.get("quantized_xmodel"):
            what = "quantized %s + compile plan" % m["quantized_xmodel"]["path"].split("/", 1)[1]
        else:
            what = "compile plan (no xmodel)"
        names = (m.get("preprocess") or {}).get("class_names")
        return ["deploy bundle %s: %s, prototxt, preprocess.json%s%s; inputs checked by sha256"
                % (os.path.join(work_dir, "deploy", m["model_dir"]), what,
                   ", words.txt (%d classes)" % len(names) if names else "",
                   ", the deploy-check dumps" if m.get("deploy_check") else "")]


def run(ctx: "StepContext") -> DeployResult:
    import numpy as np

    from ..data.class_names import origin
    from ..deploy import build_bundle
    from ..deploy.spec import units_warning
    from ..errors import PipelineError
    from ..handoff import verify
    from ..quantizers.quant_info import read_quant_info
    from ..stages.geometry import source_box
    from .compile import REDO_COMPILE, REDO_EXPORT, exported_xmodel
    from .export import deploy_check_record
    from .gate import refuse_failed_gate
    comp = ctx.folder.require("compile", "deploy")
    refuse_failed_gate(ctx, "deploy")  # a test result that failed its gate is not shipped
    export = ctx.folder.load_step("export") or {}
    work = ctx.folder.work_dir
    # every file the bundle carries or reads, checked against the record of the step that wrote it
    # made under this config's settings: the bundle carries this config's preprocessing beside the export's model
    ctx.model.check_calibration_settings(redo="run the calib step again, and the steps after it")
    if ctx.model.qat_enabled:  # the input fix_pos that ships is the QAT result's
        ctx.model.check_qat()
    expected = {}  # type: Dict[str, Any]

    def checked(result: Dict[str, Any], name: str, writer: str, redo: str) -> str:
        path = verify(work, result.get("handed_on"), name, writer, "deploy", redo)
        expected[path] = result["handed_on"][name]  # build_bundle matches the bytes it copies with it again
        return path

    compiled, quantized = None, None
    if comp.get("compiled"):
        compiled = checked(comp, "compile/" + os.path.basename(comp["compiled"]["xmodel"]), "compile", REDO_COMPILE)
    else:
        for path in sorted((comp.get("plan") or {}).values()):
            checked(comp, "compile/" + os.path.basename(path), "compile", REDO_COMPILE)
        name = exported_xmodel(export)
        quantized = checked(export, name, "export", REDO_EXPORT) if name else None
    dumps = deploy_check_record(export)
    if bool(dumps) != ctx.cfg.export.deploy_check:  # the export this config asks for is not the one on record
        raise PipelineError("deploy: export.deploy_check is %s in this config, but the export step in %s ran with "
                            "%s (%s deploy-check dumps); %s" % (str(ctx.cfg.export.deploy_check).lower(), work,
                                                                str(bool(dumps)).lower(), "its" if dumps else "no",
                                                                REDO_EXPORT))
    # the dumps go into the model folder as the export wrote them: deploy_check_data_int/<Model>/...
    deploy_check = {name.split("/", 1)[1]: checked(export, name, "export", REDO_EXPORT) for name in dumps}
    example_shape = export.get("example_shape")
    if export.get("example_input"):  # the model input's shape, from the file the export step wrote
        example = checked(export, "export/" + os.path.basename(export["example_input"]), "export", REDO_EXPORT)
        example_shape = [int(d) for d in np.load(example, mmap_mode="r", allow_pickle=False).shape]
    source = ctx.feed.source
    image = [int(d) for d in source.shape[1:]]
    size = [image[source.layout.index(a) - 1] for a in "HW"]
    box = source_box(ctx.feed.compose, image, source.layout)
    settings = getattr(source, "settings", None)  # an image folder's decode: resize, crop, mode
    names = source.classes
    preprocess = dict(ctx.feed.boundary.spec(), source_color=source.color, source_layout=source.layout,
                      input_fix_pos=input_fix_pos(read_quant_info(ctx.model.deployed_dir)), input_shape=example_shape,
                      image_size=size, box=None if box is None else list(box), stages=list(ctx.cfg.preprocess.stages),
                      decode={k: settings.get(k) for k in ("resize", "crop", "mode")} if isinstance(settings, dict)
                      else None, class_names=names, class_names_from=origin(ctx.cfg.data.source, names))
    stats = (ctx.folder.load_step("calib") or {}).get("input_stats") or {}
    if stats.get("source_min") and stats.get("source_max"):  # the source's units, for spec.units_warning
        preprocess.update(source_dtype=source.describe().get("dtype"),
                          source_range=[min(stats["source_min"]), max(stats["source_max"])])
    labels = source.labels  # the test step measures top-1 against them: a classifier
    classes = len(names) if names else int(labels.max()) + 1 if labels is not None and len(labels) else 5
    classification = {"top_k": min(5, classes), "accuracy": (ctx.folder.load_step("test") or {}).get("quant_accuracy")}
    warnings = []  # type: List[str]
    units = units_warning(preprocess.get("source_dtype"), preprocess.get("source_range"), preprocess["mean"],
                          preprocess["std"])
    if units:
        warnings.append("deploy: " + units)
    not_classifier = _not_a_classifier(export)
    if not_classifier:  # no CLASSIFICATION model_type for a model the library's classifier cannot read
        classification = None
        warnings.append("deploy: " + not_classifier)
    manifest = build_bundle(work, ctx.folder.path("deploy"), compiled, preprocess,
                            ctx.cfg.compile.net_name or ctx.cfg.run.name, classification=classification,
                            quantized_xmodel=quantized, expected=expected, deploy_check=deploy_check,
                            redo="Run the step that wrote it again (the export step: --steps export,compile,deploy; "
                                 "the compile step: --steps compile,deploy)")
    if not names:
        warnings.append("deploy: the bundle has no class names (words.txt): " + origin(ctx.cfg.data.source, None))
    for warning in warnings:
        log.warning("%s", warning)
    return DeployResult(manifest=manifest, warnings=warnings)


def _not_a_classifier(export: Dict[str, Any]) -> Optional[str]:
    """Why the exported model is no classifier the Vitis AI Library's ``model_type: CLASSIFICATION`` reads (one
    ``[1, classes]`` output), from the model's outputs the export step's run of the xmodel recorded (the
    interpreter's outputs, one per model output, in the file's dims); None for such a model, or where the
    export recorded no run (a backend that does not read its file back)."""
    outputs = ((((export.get("agreement") or {}).get("xmodel") or {}).get("interpreter") or {}).get("outputs"))
    if not outputs:
        return None
    shapes = [list(o.get("shape") or []) for o in outputs]
    if len(shapes) == 1 and len(shapes[0]) == 2:
        return None
    return ("the model's xmodel has %d output%s (%s), not one [1, classes] tensor: the prototxt names no model_type "
            "(the Vitis AI Library's CLASSIFICATION reads one score vector); write this model's post-processing on "
            "the board" % (len(shapes), "" if len(shapes) == 1 else "s", ", ".join(str(sh) for sh in shapes)))


def input_fix_pos(quant_info: Dict[str, Any]) -> Optional[int]:
    """The model input's fix_pos: the ``<Model>::nndct_input_0`` output entry of quant_info.json."""
    for name, entry in sorted(quant_info.get("output", {}).items()):
        if name.endswith("::nndct_input_0"):
            return int(entry[0][1])
    return None


def environment() -> Tuple[str, bool, Optional[str]]:
    """check-env's line: the bundle needs nothing beyond the pipeline."""
    return ("the deploy bundle: compiled xmodel (or the compile plan), prototxt, preprocess.json, words.txt, "
            "checksums, manifest",
            True, None)


STEP = Step("deploy", run, writes="deploy", requires=("calib", "compile"), after=("test",),  # its accuracy
            requires_when=qat_step.needed, environment=environment, result=DeployResult)
