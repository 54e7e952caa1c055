"""export: write the quantized model in export.formats from a batch-1 example, verified by the backend."""
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from . import qat as qat_step
from ..quantizers.base import DEPLOY_CHECK
from .base import Step, StepResult, in_run_folder, omitted_when_none

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")


@dataclass
class ExportResult(StepResult):
    """steps/export.json: ``{format: path}``, the example input, the backend's verification reports,
    ``release_warnings``: the Vitis AI 3.0/3.5 differences the model meets when compile.target's boards
    run 3.0 (``pipeline.inspect.releases``; the compile plan lists them too), and ``handed_on``: the
    sha256 of every file written (the compile and deploy steps check the xmodel and the example input
    against it). ``deploy_check``: with export.deploy_check, the folder of the deploy-check dumps
    (``export/deploy_check_data_int/<Model>``, each file in ``handed_on``; the deploy step carries them
    and refuses a record made with another export.deploy_check than the config's); None without."""
    files: Dict[str, str] = field(default_factory=dict)
    example_input: str = ""
    example_shape: List[int] = field(default_factory=list)
    agreement: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    ledger: Dict[str, Any] = field(default_factory=dict)
    release_warnings: List[str] = field(default_factory=list)
    deploy_check: Optional[str] = omitted_when_none()

    REPORT_KEYS = ("onnx_agreement", "xmodel")

    def step_warnings(self) -> List[str]:
        return list(self.warnings) + list(self.release_warnings)

    def report_fields(self, work_dir: str) -> Dict[str, Any]:
        return {"onnx_agreement": {k: v for k, v in self.agreement.items() if k.startswith("onnx")} or None,
                "xmodel": xmodel_summary(self.agreement.get("xmodel"), work_dir)}

    def report_section(self, work_dir: str) -> List[str]:
        f, lines = self.report_fields(work_dir), []  # type: Dict[str, Any], List[str]
        if f["onnx_agreement"]:
            lines += ["## ONNX Runtime vs simulation", "",
                      "| flavour | max abs diff | differing | elements | max LSB | ORT optimizations |",
                      "|---|---|---|---|---|---|"]
            for fmt, a in sorted(f["onnx_agreement"].items()):
                lines.append("| %s | %g | %d | %d | %s | %s |" % (fmt, a["max_abs_diff"], a["mismatches"], a["elements"],
                                                                a["max_diff_lsb"], a.get("ort_optimizations", "none")))
            lines += ["", "The simulation and `onnx_exact` reproduce the DPU's numbers. `onnx_qdq` rounds ties half to "
                      "even (ONNX QuantizeLinear) where the DPU rounds half_up; it was checked bit for bit against the "
                      "simulation with that one change, and its difference from the DPU's numbers is shown above.", ""]
        x = f["xmodel"]
        if x:
            lines += ["## xmodel", "",
                      "`%s`: %d ops (%d fix), %d bytes; read back and checked (topological order, arguments, "
                      "attributes, shapes): %s; run by the interpreter on the batch-1 example: %d of %d output elements "
                      "differ from the simulation." % (x["path"], x["ops"], x["fix_ops"], x["bytes"], x["check"],
                                                       x["mismatches"], x["elements"]),
                      "", "`vai_c_xir` compiles this file (the compile plan names it); it is the file the real "
                      "quantizer's `export_xmodel()` writes for this model and calibration.", ""]
        if self.deploy_check:
            lines += ["Deploy-check dumps (export.deploy_check): `%s/`, %d files, every tensor of the deploy graph on "
                      "the batch-1 example as float32 and fixed-point codes (docs/xmodel.md#deploy-check-dumps)."
                      % (in_run_folder(self.deploy_check, work_dir), len(deploy_check_record(self.to_json()))), ""]
        return lines

    def summary_lines(self, work_dir: str) -> List[str]:
        f, out = self.report_fields(work_dir), []
        for fmt, a in sorted((f["onnx_agreement"] or {}).items()):
            out.append("%s vs simulation in ONNX Runtime: max abs diff %g, %d of %d elements differ%s"
                       % (fmt, a["max_abs_diff"], a["mismatches"], a["elements"],
                          " (bit-exact with the simulation rounding half to even)" if "reference_mismatches" in a
                          else ""))
        x = f["xmodel"]
        if x:
            out.append("xmodel %s written and verified: %d ops, checked; the interpreter reproduces the simulation "
                       "(%d of %d elements differ)" % (x["path"], x["ops"], x["mismatches"], x["elements"]))
        if self.deploy_check:
            out.append("deploy-check dumps %s/: %d files (float32, fixed-point codes, shape.txt)"
                       % (in_run_folder(self.deploy_check, work_dir), len(deploy_check_record(self.to_json()))))
        return out


def run(ctx: "StepContext") -> ExportResult:
    import numpy as np
    import torch

    from .. import fileio
    from ..boundary import contiguous_parameters
    from ..handoff import record
    from ..inspect.releases import check_model
    from ..progress import phase
    from .gate import refuse_failed_gate
    refuse_failed_gate(ctx, "export")  # a test result that failed its gate is not exported
    ledger = ctx.feed.new_ledger()
    model, example = ctx.model.float_model(), ctx.feed.example(ledger=ledger)
    model = contiguous_parameters(model, ledger=ledger)  # the same values: the fingerprint is the same
    backend = ctx.model.backend()
    handle = ctx.model.test_handle(model, example)
    files = {}
    # in the order of the backend's formats table (a model one format cannot carry keeps the files written before it)
    formats = sorted(ctx.cfg.export.formats, key=list(backend.formats).index)
    for i, fmt in enumerate(formats):
        # export.deploy_check: the real quantizer's dumps, written with the xmodel (config checks it is listed)
        dumps = {"deploy_check": True} if fmt == "xmodel" and ctx.cfg.export.deploy_check else {}
        with phase("export: writing %s%s (%d of %d)" % (fmt, " and its deploy-check dumps" if dumps else "",
                                                        i + 1, len(formats))):
            files.update(backend.export(handle, example, ctx.folder.path("export"), [fmt], **dumps))
    dump_dir = files.pop(DEPLOY_CHECK, None)
    dump_files = dump_list(dump_dir)

    def inputs() -> torch.Tensor:
        return torch.cat([x for x, _ in ctx.feed.batches("eval", limit=ctx.cfg.data.eval_batches)])

    with phase("export: verifying %s against the quantized model" % ", ".join(sorted(files))):
        agreement, warnings = backend.verify(handle, files, inputs, ctx.cfg.export.verify_max_lsb)
    agreement.get("xmodel", {}).pop(DEPLOY_CHECK, None)  # the writer's list of dumps: the result's own field
    np_example = ctx.folder.path("export", "example_input.npy")
    with fileio.atomic_path(np_example) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, example.numpy())
    log.info("export: %s", ", ".join("%s -> %s" % kv for kv in sorted(files.items())))
    if dump_dir:
        log.info("export: deploy-check dumps -> %s (%d files)", dump_dir, len(dump_files))
    # the xmodel goes to vai_c_xir for boards that may run another release than the quantizer reproduced
    release = check_model(model, example, ctx.loaded.target, traced=ctx.model.trace(model))
    for line in release:
        log.warning("export: %s", line)
    # what compile and deploy read, with the sha256 they check before using it (pipeline.handoff)
    handed_on = record(ctx.folder.work_dir, sorted(files.values()) + [np_example] + dump_files)
    return ExportResult(files=files, example_input=np_example, example_shape=list(example.shape),
                        agreement=agreement, warnings=warnings, ledger=ledger.summary(), release_warnings=release,
                        handed_on=handed_on, deploy_check=dump_dir)


def dump_list(folder: Optional[str]) -> List[str]:
    """The files under the deploy-check dumps' ``folder``, sorted (none for None).

    Raises:
        ExportError: the backend named a folder that holds no file.
    """
    from ..errors import ExportError
    if folder is None:
        return []
    out = sorted(os.path.join(root, name) for root, _, names in os.walk(folder) for name in names)
    if not out:
        raise ExportError("export.deploy_check: the backend wrote no deploy-check dumps in %s" % folder)
    return out


def deploy_check_record(export: Dict[str, Any]) -> List[str]:
    """The deploy-check dumps an export result (steps/export.json) records: their paths relative to the
    run folder ('/'-separated), from ``handed_on``, sorted; none when it wrote none."""
    folder = export.get("deploy_check")
    if not folder:
        return []
    prefix = folder.replace(os.sep, "/").rstrip("/") + "/"
    return sorted(p for p in (export.get("handed_on") or {}) if p.startswith(prefix))


def xmodel_summary(report: Any, work_dir: str) -> Any:
    """The export's xmodel report for report.json: path (shown against ``work_dir``), ops, fix ops,
    bytes, check, and the interpreter's comparison with the simulation; None without an xmodel."""
    if not report or "path" not in report:
        return None
    run = report.get("interpreter", {})
    return {"path": in_run_folder(report["path"], work_dir), "ops": report["ops"], "fix_ops": report["fix_ops"],
            "bytes": report["bytes"], "check": report["check"], "elements": run.get("elements", 0),
            "mismatches": run.get("mismatches", 0)}


STEP = Step("export", run, writes="export", requires=("calib",), after=("qat",), requires_when=qat_step.needed,
            reads=("eval",), own_process=True, result=ExportResult)
