"""check-env: installed packages, the Vitis AI pieces, and which steps can run, with the reason."""
import json
import os
import stat
import sys

import pytest
import torch

from pipeline import env


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path where a test can put fake Vitis AI packages."""
    d = tmp_path / "site"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    yield d
    for name in ("pytorch_nndct", "xir"):
        sys.modules.pop(name, None)


def _package(site, name, version=None):
    pkg = site / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('check-env must not import %s')\n" % name)
    if version:
        (pkg / "version.py").write_text("__version__ = '%s'\n" % version)


def _arch_root(tmp_path):
    root = tmp_path / "arch"
    (root / "DPUCZDX8G" / "ZCU102").mkdir(parents=True)
    (root / "DPUCZDX8G" / "ZCU102" / "arch.json").write_text(json.dumps({"target": "DPUCZDX8G_ISA1_B4096"}))
    (root / "DPUCZDX8G" / "KV260").mkdir()
    (root / "DPUCZDX8G" / "KV260" / "arch.json").write_text(json.dumps({"fingerprint": "0x101000016010407"}))
    (root / "broken").mkdir()
    (root / "broken" / "arch.json").write_text("{")
    return str(root)


def test_bare_cpu_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    d = env.check_env(arch_root=str(tmp_path / "none"))
    json.dumps(d)
    assert d["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert d["python"]["executable"] == sys.executable
    if not d["pytorch_nndct"]["found"]:
        assert not d["steps"]["calib/test (nndct)"]["can_run"]
        assert "Vitis AI image" in d["steps"]["calib/test (nndct)"]["why_not"]
    assert d["steps"]["calib/test (sim)"] == {
        "uses": d["steps"]["calib/test (sim)"]["uses"], "can_run": True, "why_not": None,
        "checked": "calibrated and tested a conv/BN/linear model and an nn.MultiheadAttention model"}
    assert d["steps"]["export xmodel (sim)"]["checked"].startswith("wrote a conv/BN/linear model's xmodel")
    assert d["support"]["kind"] in ("proven", "within", "newer")
    assert d["vai_c_xir"] == {"path": None, "version": None}
    assert not d["steps"]["compile"]["can_run"]
    assert "compile_plan.md" in d["steps"]["compile"]["why_not"]
    assert d["steps"]["deploy"]["can_run"]
    assert d["arch_json"]["files"] == []
    assert "pytorch_nndct" not in sys.modules


def test_arch_json_files_are_listed_with_target_and_fingerprint(tmp_path):
    files = env.check_env(arch_root=_arch_root(tmp_path), probe=False)["arch_json"]["files"]
    by_dir = {os.path.basename(os.path.dirname(f["path"])): f for f in files}
    assert by_dir["ZCU102"]["target"] == "DPUCZDX8G_ISA1_B4096"
    assert by_dir["ZCU102"]["fingerprint"] == "0x0101000056010407"
    assert by_dir["KV260"]["target"] is None and by_dir["KV260"]["fingerprint"] == "0x0101000016010407"
    assert "not valid JSON" in by_dir["broken"]["error"]
    text = env.format_env(env.check_env(arch_root=_arch_root(tmp_path / "x"), probe=False))
    assert "3 under" in text and "0x0101000056010407" in text


def test_the_image_pieces_are_found_without_importing_them(site, tmp_path, monkeypatch):
    _package(site, "pytorch_nndct", "3.5.0+abc+torch%s" % torch.__version__)
    _package(site, "xir")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vai_c_xir"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bindir))
    d = env.check_env(arch_root=_arch_root(tmp_path), probe=False)
    assert d["pytorch_nndct"] == {"found": True, "version": "3.5.0+abc+torch%s" % torch.__version__,
                                  "torch_matches": True}
    assert d["modules"]["xir"] is True
    assert d["vai_c_xir"]["path"] == str(exe)
    for step in ("calib/test (nndct)", "export xmodel (nndct)", "compile"):
        assert d["steps"][step]["can_run"] and d["steps"][step]["why_not"] is None, step
    assert "pytorch_nndct" not in sys.modules and "xir" not in sys.modules


def test_quantizer_built_for_another_torch(site, tmp_path):
    _package(site, "pytorch_nndct", "3.5.0+abc+torch1.4.0")
    d = env.check_env(arch_root=str(tmp_path), probe=False)
    assert d["pytorch_nndct"]["torch_matches"] is False
    why = d["steps"]["calib/test (nndct)"]["why_not"]
    assert "another torch" in why and "1.4.0" in why and torch.__version__ in why
    assert "built for another torch" in env.format_env(d)


def test_xir_missing_blocks_only_the_xmodel_export(site, tmp_path):
    _package(site, "pytorch_nndct", "3.5.0+abc+torch%s" % torch.__version__)
    d = env.check_env(arch_root=str(tmp_path), probe=False)
    if d["modules"]["xir"]:
        pytest.skip("a real xir is installed here")
    assert d["steps"]["calib/test (nndct)"]["can_run"]
    assert not d["steps"]["export xmodel (nndct)"]["can_run"]
    assert "xir package is not installed" in d["steps"]["export xmodel (nndct)"]["why_not"]


def test_format_env_says_why_a_step_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    text = env.format_env(env.check_env(arch_root=str(tmp_path), probe=False))
    assert "vai_c_xir      not on PATH" in text
    assert "why not: vai_c_xir is not on PATH" in text
    assert text.splitlines()[0].startswith("python         ")


def test_the_backend_lines_come_from_the_backend_classes(tmp_path, monkeypatch):
    """Every ``<step> (<backend>)`` line is one ``Requirement`` a registered backend class declares, in
    step order, then registry order; a missing distribution blocks only the lines that need it."""
    from pipeline.quantizers.base import Requirement, backend_classes
    d = env.check_env(arch_root=str(tmp_path), probe=False)
    lines = [k for k in d["steps"] if k not in ("compile", "deploy")]
    declared = {"%s (%s)" % (r.step, cls.name): r for cls in backend_classes() for r in cls.requirements}
    assert sorted(lines) == sorted(declared)
    assert lines[:2] == ["calib/test (sim)", "calib/test (nndct)"]
    for line in lines:
        assert d["steps"][line]["uses"] == declared[line].uses
    sim = [cls for cls in backend_classes() if cls.name == "sim"][0]
    monkeypatch.setattr(sim, "requirements", sim.requirements + (
        Requirement("export extra", "a package nobody has", ("no-such-distribution-here",), why_not="not here"),))
    steps = env.check_env(arch_root=str(tmp_path), probe=False)["steps"]
    assert steps["export extra (sim)"] == {"uses": "a package nobody has", "can_run": False, "why_not": "not here",
                                           "checked": None}
    assert steps["calib/test (sim)"]["can_run"]


def test_a_step_whose_packages_are_installed_but_which_fails_here_says_no_with_the_error(tmp_path, monkeypatch):
    """check-env probes the step on a tiny model: an installed onnx whose export fails (as torch 1.13 did
    when the exporter looked up a torch 2 function) is reported as not working, with the error."""
    from pipeline.quantizers.sim import export

    def broken(*args, **kwargs):
        raise AttributeError("module 'torch.nn.functional' has no attribute 'scaled_dot_product_attention'")
    monkeypatch.setattr(export, "export_onnx", broken)
    d = env.check_env(arch_root=str(tmp_path / "none"))
    onnx = d["steps"]["export onnx (sim)"]
    assert not onnx["can_run"] and onnx["checked"] is None
    assert onnx["why_not"] == ("its packages are installed, but it fails here (probed on a tiny model): AttributeError: "
                               "module 'torch.nn.functional' has no attribute 'scaled_dot_product_attention'")
    assert d["steps"]["export xmodel (sim)"]["can_run"]
    text = env.format_env(d)
    assert "export onnx (sim)      no" in text and "why not: its packages are installed, but it fails here" in text


def test_the_support_verdict_of_the_proven_and_the_refused_environments():
    from pipeline import support
    assert support.verdict("3.8.18", "1.13.1+cu117").kind == "proven"
    assert support.verdict("3.11.7", "2.13.0+cpu").kind == "proven"
    refused = support.verdict("3.11.7", "1.13.1")
    assert refused.kind == "refused" and "cannot unpack tuples on Python 3.11" in refused.text
    assert support.verdict("3.12.1", "1.13.1").kind == "refused"
    assert support.verdict("3.8.18", "1.12.1").kind == "refused"
    newer = support.verdict("3.11.7", "2.16.0.dev20261201+cpu")
    assert newer.kind == "newer" and "--torch 2.16.0" in newer.text and support.NEWEST_CHECKED in newer.text
    assert support.verdict("3.10.13", "2.4.1").kind == "within"
    assert support.verdict("3.9.18", "1.13.1").kind == "within"
    assert support.verdict("3.14.0", "2.15.0").kind == "newer"
    assert support.verdict("3.11.7", None).kind == "refused"
    numpy2 = support.verdict("3.10.13", "1.13.1", "2.2.6")
    assert numpy2.kind == "refused" and "install numpy below 2" in numpy2.text
    assert support.verdict("3.8.18", "1.13.1+cu117", "1.22.4").kind == "proven"
    assert support.verdict("3.11.7", "2.13.0+cpu", "2.4.6").kind == "proven"


def test_a_trace_that_fails_in_a_refused_environment_says_why(monkeypatch):
    """torch 1.x on Python 3.11 cannot trace tuple unpacking: the capture's error names the environment."""
    from torch import nn

    from pipeline import support
    from pipeline.errors import QuantizationError
    from pipeline.fx.capture import capture

    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x  # data-dependent: no trace can record it
    text = support.verdict("3.11.7", "1.13.1").text
    monkeypatch.setattr(support, "current", lambda: support.Verdict("refused", text))
    with pytest.raises(QuantizationError) as err:
        capture(Branchy(), torch.ones(1, 3), None)
    assert str(err.value).startswith("the sim quantizer could not trace Branchy (")
    assert str(err.value).endswith("this environment is not supported: " + text)


def test_a_refused_environment_stops_a_run_before_any_work(tmp_path, monkeypatch):
    import pipeline
    from pipeline import support
    from pipeline.errors import PipelineError
    from tests.support import make_case
    config, _ = make_case(tmp_path)
    text = support.verdict("3.10.13", "1.13.1", "2.2.6").text
    monkeypatch.setattr(support, "current", lambda: support.Verdict("refused", text))
    with pytest.raises(PipelineError) as err:
        pipeline.run(config, steps=["train"])
    assert str(err.value) == "this environment cannot run the pipeline: " + text
    assert not (tmp_path / "run").exists()


def _matrix(path):
    """The rows of the "Supported versions" table of ``path`` (README.md or docs/environment.md)."""
    from tests.support import REPO
    with open(os.path.join(REPO, path)) as f:
        text = f.read()
    section = text[text.index("## Supported versions"):]
    return [line for line in section.splitlines() if line.startswith("| 3.")]


def test_the_matrix_in_the_readme_and_the_docs_is_the_proven_one():
    """README.md and docs/environment.md print the same table, and its measured rows are pipeline.support's."""
    import re

    from pipeline import support
    rows = _matrix("README.md")
    assert rows == _matrix(os.path.join("docs", "environment.md"))
    measured = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if cells[2] != "refused":
            python, torch_release = re.match(r"(3\.\d+)\.\d+$", cells[0]).group(1), cells[1].split()[0].rstrip(":,")
            measured.add((python, torch_release.split("+")[0]))
    assert measured == {(r.python, r.torch) for r in support.PROVEN}
    refused = [c for c in (r.strip("|").split("|") for r in rows) if c[2].strip() == "refused"]
    for cells in refused:
        python, torch_release = cells[0].strip(), cells[1].split()[0]
        numpy = re.search(r"numpy (\d+\.\d+\.\d+)", cells[1])
        assert support.verdict(python, torch_release, numpy.group(1) if numpy else None).kind == "refused"
