"""compile: compile the exported xmodel with vai_c_xir, or write the exact command and a plan when
vai_c_xir or the xmodel is absent."""
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..targets import hex_fingerprint
from .base import Step, StepResult, in_run_folder, omitted_when_none

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")


@dataclass
class CompileResult(StepResult):
    """steps/compile.json: the compiled files (None when only a plan was written), the vai_c_xir argv,
    the target; ``reason``, ``plan`` and ``next`` (what to do, true for this run: the final summary's
    line) when a plan was written instead; ``handed_on``: the sha256 of the compiled xmodel, or of
    compile.sh and compile_plan.md, which the deploy step checks before the bundle carries them.
    The exported xmodel is checked against the export step's record before it is compiled."""
    compiled: Optional[Dict[str, Any]] = None
    argv: List[str] = field(default_factory=list)
    target: str = ""
    reason: Optional[str] = omitted_when_none()
    plan: Optional[Dict[str, str]] = omitted_when_none()
    next: Optional[str] = omitted_when_none()

    REPORT_KEYS = ("compile", "compile_argv")

    def report_fields(self, work_dir: str) -> Dict[str, Any]:
        return {"compile": {k: v for k, v in self.to_json().items() if k != "argv"}, "compile_argv": self.argv}

    def _compiled_line(self, work_dir: str) -> str:
        """``compiled <net>.xmodel for <target> (fingerprint 0x...), log <vai_c_xir.log>``: paths shown
        against ``work_dir``."""
        c = dict(self.compiled or {})
        fingerprint = c.get("fingerprint")
        return "compiled %s for %s%s; log %s" % (
            in_run_folder(c.get("xmodel", "?"), work_dir), self.target,
            "" if fingerprint is None else " (arch.json fingerprint %s)" % hex_fingerprint(int(fingerprint)),
            in_run_folder(c["log"], work_dir) if c.get("log") else "none")

    def report_section(self, work_dir: str) -> List[str]:
        if self.compiled:
            line = self._compiled_line(work_dir) + "."
        else:
            plan = self._plan(work_dir)
            line = "not compiled: %s. Next: %s. The exact command is in `%s`." % (
                self.reason, self._next(work_dir) or "see `%s`" % plan.get("plan"), plan.get("script"))
        return ["## Compile", "", line, ""]

    def report_html(self, work_dir: str) -> List[Dict[str, Any]]:
        """The section, the vai_c_xir command, and the compile plan when one was written (shown when its
        sha256 is the one recorded in ``handed_on``)."""
        import shlex
        blocks = [{"markdown": self.report_section(work_dir)}]  # type: List[Dict[str, Any]]
        if self.argv:
            blocks.append({"title": "The vai_c_xir command", "pre": " ".join(shlex.quote(a) for a in self.argv)})
        plan = (self.plan or {}).get("plan")
        if plan:
            blocks.append({"title": "Compile plan (%s)" % in_run_folder(plan, work_dir), "markdown_file": plan,
                           "sha256": ((self.handed_on or {}).get(plan) or {}).get("sha256")})
        return blocks

    def summary_lines(self, work_dir: str) -> List[str]:
        if self.compiled:
            return [self._compiled_line(work_dir)]
        return ["not compiled: %s; %s" % (self.reason, self._next(work_dir) or "%s says how" % self._plan(work_dir).get("plan"))]

    def _plan(self, work_dir: str) -> Dict[str, str]:
        return {k: in_run_folder(v, work_dir) for k, v in (self.plan or {}).items()}

    def _next(self, work_dir: str) -> Optional[str]:
        """``next`` with the script's path (stored relative to the run folder) shown against ``work_dir``."""
        script = (self.plan or {}).get("script")
        if not self.next or not script or os.path.isabs(script):
            return self.next
        return self.next.replace(script, in_run_folder(script, work_dir), 1)


def preflight(ctx: "StepContext") -> None:
    """Before any work: an arch.json that exists here must be the target's (its fingerprint, public case P11).
    Raises CompileError."""
    arch = ctx.loaded.arch_json()
    if os.path.isfile(arch):
        from ..targets import check_arch_json
        check_arch_json(arch, ctx.loaded.target.name)


def environment() -> Tuple[str, bool, Optional[str]]:
    """check-env's line: vai_c_xir on PATH (inside the Vitis AI image), else the plan is written instead."""
    import shutil

    from ..compilers import vai_c
    from ..quantizers.nndct_calls import IMAGE_HINT
    return ("vai_c_xir -x <Model>_int.xmodel -a <arch.json> -o <dir> -n <net>",
            shutil.which(vai_c.EXECUTABLE) is not None,
            "vai_c_xir is not on PATH: %s. The compile step writes compile.sh and compile_plan.md instead" % IMAGE_HINT)


def run(ctx: "StepContext") -> CompileResult:
    from ..compilers import plan, vai_c
    from ..handoff import record
    from ..quantizers.base import artifact_name
    c = ctx.cfg.compile
    target = ctx.loaded.target  # resolved once, by the config
    arch = ctx.loaded.arch_json()
    from .gate import refuse_failed_gate
    export = ctx.folder.require("export", "compile")
    refuse_failed_gate(ctx, "compile")  # a test result that failed its gate is not compiled
    # the export compiled here came from the calibration, which must be this config's (model, data, quantizer)
    ctx.model.check_calibration_settings(redo="run the calib step again, and the steps after it")
    xmodel = quantized_xmodel(ctx, export)
    net = c.net_name or ctx.cfg.run.name
    out_dir = ctx.folder.path("compile")  # (the arch.json fingerprint was checked before any work: preflight, P11)
    # without an exported xmodel, the file the backend that writes xmodels writes inside the image
    expected = ctx.folder.path("export", artifact_name("xmodel", type(ctx.model.float_model(need_weights=False)).__name__))
    argv = vai_c.build_argv(xmodel or expected, arch, out_dir, net, c.options or None)
    wrong = _other_release(target) if vai_c.is_available() else None
    if xmodel and vai_c.is_available() and wrong is None:
        compiled = vai_c.compile_xmodel(xmodel, arch, out_dir, net, c.options or None, target=target.name)
        # the deploy step checks the compiled model against this sha256 before the bundle carries it
        return CompileResult(compiled=compiled, argv=argv, target=target.name,
                             handed_on=record(ctx.folder.work_dir, [compiled["xmodel"]]))
    reasons = [wrong] if wrong else [] if vai_c.is_available() else [
        "vai_c_xir is not on this machine: compiling needs the Vitis AI image"]
    if xmodel is None:
        reasons.append(_no_xmodel(ctx, export))
    reason = "; and ".join(reasons)
    config = ctx.loaded.path
    if not os.path.relpath(config).startswith(".."):
        config = os.path.relpath(config)  # as the user passes it from the repository root
    plan_files = plan.write_compile_plan(out_dir, argv, target.name, reason, config_path=config,
                                         factory=ctx.cfg.model.factory,
                                         release_warnings=export.get("release_warnings"), root=ctx.folder.work_dir)
    log.warning("compile: %s; wrote the exact command to %s", reason, plan_files["script"])
    return CompileResult(compiled=None, argv=argv, target=target.name, reason=reason, plan=plan_files,
                         next=_next(ctx, xmodel is not None, vai_c.is_available() and wrong is None, plan_files),
                         handed_on=record(ctx.folder.work_dir, [plan_files["plan"], plan_files["script"]]))


def _other_release(target: Any) -> Optional[str]:
    """Why this machine's vai_c_xir must not compile for ``target``: the target's family compiles with an
    older Vitis AI release's compiler (``DpuTarget.release.compile_release``,
    docs/targets.md#releases-and-images: VCK190 and VCK5000 with 3.0's, their DPU not updated after it) than
    the installed one (``vai_c.release()``). None when the installed one is that release or older (an older compiler that
    lacks the target says so itself) or either is unknown: then it compiles, as before."""
    from ..compilers import vai_c
    want, have = target.release.compile_release, vai_c.release()
    if want is None or have is None or _release_key(want) >= _release_key(have):
        return None
    return ("%s compiles with Vitis AI %s's vai_c_xir (docs/targets.md#releases-and-images), and this machine's is "
            "%s's (%s): compile.sh runs it in %s" % (target.name, want, have, vai_c.version(), target.compile_image))


def _release_key(release: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in release.split("."))


def _no_xmodel(ctx: "StepContext", export: Dict[str, Any]) -> str:
    """Why there is no xmodel to compile, in one sentence (a recorded one that is missing was refused)."""
    return "no xmodel was exported (export.formats: %s)" % ", ".join(ctx.cfg.export.formats)


def _next(ctx: "StepContext", exported: bool, compiler: bool, plan_files: Dict[str, str]) -> str:
    """What the user does next, true for this run: compile.sh compiles an xmodel only when there is one."""
    # the script's path relative to the run folder, as the result stores it (summary_lines shows it in place)
    image = "run %s inside the Vitis AI image (%s)" % (os.path.relpath(plan_files["script"], ctx.folder.work_dir),
                                                       ctx.loaded.target.compile_image)
    if exported:  # only the compiler is missing
        return image
    formats = [f for f in ctx.cfg.export.formats if f != "xmodel"] + ["xmodel"]
    export = "export the xmodel first: run again with --set export.formats=[%s] --steps export,compile,deploy" \
        % ",".join(formats)
    return export + (" (the compile step then compiles it here)" if compiler else ", then " + image)


REDO_EXPORT = "run the export step again: --steps export,compile,deploy"
REDO_COMPILE = "run the compile step again: --steps compile,deploy"


def exported_xmodel(export: Dict[str, Any]) -> Optional[str]:
    """The exported ``<Model>_int.xmodel`` as the export step's record names it (``export/<file>``,
    relative to the run folder), or None when none was exported.

    By file name under ``export/``, not by the path the export step recorded: the folder may be read
    at another path (inside the Vitis AI image, where the repository is mounted at /workspace,
    ``scripts/docker_run.sh ... --steps compile,deploy``)."""
    recorded = (export.get("files") or {}).get("xmodel")
    return "export/" + os.path.basename(recorded) if recorded else None


def quantized_xmodel(ctx: "StepContext", export: Dict[str, Any], by: str = "compile") -> Optional[str]:
    """The exported ``<Model>_int.xmodel`` in THIS run folder, checked against the sha256 the export
    step recorded (``pipeline.handoff``), or None when none was exported.

    Raises:
        HandoffError: the file is missing, empty, truncated, changed or another model's: it names the
            file, the recorded and the found sha256, and to run the export step again.
    """
    from ..handoff import verify
    name = exported_xmodel(export)
    if name is None:
        return None
    return verify(ctx.folder.work_dir, export.get("handed_on"), name, "export", by, REDO_EXPORT)


STEP = Step("compile", run, writes="compile", requires=("export",), preflight=preflight, environment=environment,
            result=CompileResult)
