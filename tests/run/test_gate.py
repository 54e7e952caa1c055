"""A test result that failed its accuracy gate stops export, compile and deploy, also when they run later alone."""
import json
import os

import pytest

import pipeline
from pipeline.errors import QuantizationError
from tests.support import make_case

STRICT = ["quantizer.max_accuracy_drop=0.0"]


def _gate_message(by, then):
    return (r"%s: the test step's result \(steps/test\.json\) failed its accuracy gate, so the %s step does not go on "
            r"from it: quantized accuracy \d\.\d{4} is \d+\.\d\d points below float \d\.\d{4}, more than "
            r"(quantizer\.)?max_accuracy_drop=0\.0000.* Fix the cause and run the steps from calib again \(--steps "
            r"calib,test,export,compile,deploy\); to accept this model as it is, set the gate so that it passes "
            r"\(quantizer\.max_accuracy_drop, quantizer\.require_float_above_chance\) and run the test step again: "
            r"--steps test,%s$" % (by, by, then))


def test_a_failed_gate_stops_the_steps_after_it(tmp_path):
    config, _ = make_case(tmp_path, quantizer={"max_accuracy_drop": 1.0, "bitwidth": 3})
    work = str(tmp_path / "run")
    pipeline.run(config)  # everything, the gate passing: a bundle
    assert os.path.isdir(os.path.join(work, "deploy"))
    with pytest.raises(QuantizationError, match="more than quantizer.max_accuracy_drop=0.0000"):
        pipeline.run(config, steps=["test"], overrides=STRICT)
    with open(os.path.join(work, "steps", "test.json")) as f:
        saved = json.load(f)
    assert saved["gate_failed"].startswith("test: quantized accuracy ") and saved["accuracy_drop"] > 0
    for by, then in (("deploy", "deploy"), ("compile", "compile,deploy"), ("export", "export,compile,deploy")):
        with pytest.raises(QuantizationError, match=_gate_message(by, then)):
            pipeline.run(config, steps=[by], overrides=STRICT)
    assert not os.path.exists(os.path.join(work, "deploy"))
    # a result saved without the verdict (an older run) is judged by the max_accuracy_drop it recorded
    saved.pop("gate_failed")
    with open(os.path.join(work, "steps", "test.json"), "w") as f:
        json.dump(saved, f)
    with pytest.raises(QuantizationError, match=_gate_message("export", "export,compile,deploy")):
        pipeline.run(config, steps=["export"])
    # accepting the drop: the gate set so that it passes, and the test step run again
    pipeline.run(config, steps=["test", "export", "compile", "deploy"])
    assert os.path.isdir(os.path.join(work, "deploy"))
