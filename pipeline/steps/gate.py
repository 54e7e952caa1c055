"""The test step's accuracy gate as a precondition of export, compile and deploy.

A test result that failed its gate stays saved (steps/test.json, with ``gate_failed``) so the report
shows it; the steps that ship the model read it before they go on. It is a precondition, not an input:
their results do not derive from the test result (export, compile and deploy are not made stale by a new
run of the test step), so the check lives here rather than in a step module.
"""
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

SHIPPING = ("export", "compile", "deploy")


def refuse_failed_gate(ctx: "StepContext", by: str) -> None:
    """Before export, compile or deploy (``by``) go on: refuse a saved test result that failed its gate
    (``TestResult.gate_failed``; for a result saved without it, a drop past the ``max_accuracy_drop`` it
    recorded or past this config's). No saved test result: nothing to refuse (the test step is optional).

    Raises:
        QuantizationError: the gate's message with its numbers, and what to do.
    """
    from ..errors import QuantizationError
    saved = ctx.folder.load_step("test")
    if not saved:
        return
    failed = saved.get("gate_failed")
    drop = float(saved.get("accuracy_drop") or 0.0)
    limit = min(float(saved.get("max_accuracy_drop") or 0.0), float(ctx.cfg.quantizer.max_accuracy_drop))
    if not failed and drop > limit:
        failed = ("quantized accuracy %.4f is %.2f points below float %.4f, more than max_accuracy_drop=%.4f"
                  % (float(saved.get("quant_accuracy") or 0.0), 100 * drop, float(saved.get("float_accuracy") or 0.0),
                     limit))
    if not failed:
        return
    raise QuantizationError(
        "%s: the test step's result (steps/test.json) failed its accuracy gate, so the %s step does not go on from "
        "it: %s. Fix the cause and run the steps from calib again (--steps calib,test,export,compile,deploy); to "
        "accept this model as it is, set the gate so that it passes (quantizer.max_accuracy_drop, "
        "quantizer.require_float_above_chance) and run the test step again: --steps test,%s"
        % (by, by, failed[len("test: "):] if failed.startswith("test: ") else failed,
           ",".join(SHIPPING[SHIPPING.index(by):])))
