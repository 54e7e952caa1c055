"""The drop-in refuses to write into a run folder a run holds (issue 34, item 2), and shows its notes by
default the way the real quantizer prints its [VAIQ_NOTE] lines (item 6).

Before: export_quant_config() into a run folder's quantize_result while a run held the folder's lock
replaced the run's committed calibration without a word; the exports and the inspection did the same to
export/ and inspect/. The drop-in's "written to" lines and fast finetune's progress went to
logging.info, hidden by Python's default level: minutes of finetuning printed nothing.
"""
import os
import subprocess
import sys

import pytest
import torch

from tests.support import REPO
from tests.support.small_net import SmallNet

from pipeline.apis import Inspector, torch_quantizer
from pipeline.errors import RunFolderError
from pipeline.runner.folder import lock_work_dir, unlock


def _net():
    torch.manual_seed(0)
    return SmallNet().eval()


X = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))


def _files(folder):
    out = {}
    for root, _, names in os.walk(str(folder)):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), str(folder))] = f.read()
    return out


@pytest.fixture
def held_run(tmp_path):
    """A run folder with a committed calibration in quantize_result/, held by a run (this process
    takes its lock, as the driver does); yields (run folder, its calibration folder)."""
    work = tmp_path / "run"
    unlock(lock_work_dir(str(work)))  # claimed and marked as a run does
    q = torch_quantizer("calib", _net(), (X,), output_dir=str(work / "quantize_result"), device="cpu")
    q.quant_model(X)
    q.export_quant_config()
    handle = lock_work_dir(str(work))
    try:
        yield work, work / "quantize_result"
    finally:
        unlock(handle)


def _refused(err, work):
    text = str(err.value)
    assert "lies in the run folder %s, which a pipeline run holds now (pid %d)" % (work, os.getpid()) in text
    assert "Nothing was written" in text and "python -m pipeline status %s" % work in text


def test_a_calib_quantizer_into_a_held_run_folder_is_refused_at_construction(held_run):
    work, quant = held_run
    before = _files(work)
    with pytest.raises(RunFolderError) as err:
        torch_quantizer("calib", _net(), (X,), output_dir=str(quant), device="cpu")
    _refused(err, work)
    with pytest.raises(RunFolderError):  # a new folder inside it too
        torch_quantizer("calib", _net(), (X,), output_dir=str(work / "mine" / "q"), device="cpu")
    assert _files(work) == before and not (work / "mine").exists()


def test_export_quant_config_refuses_when_a_run_took_the_folder_meanwhile(tmp_path):
    work = tmp_path / "run"
    unlock(lock_work_dir(str(work)))
    first = torch_quantizer("calib", _net(), (X,), output_dir=str(work / "quantize_result"), device="cpu")
    first.quant_model(X)
    first.export_quant_config()
    late = torch_quantizer("calib", _net(), (X * 2,), output_dir=str(work / "quantize_result"), device="cpu")
    late.quant_model(X * 2)
    handle = lock_work_dir(str(work))  # the run starts while the script calibrates
    try:
        before = _files(work)
        with pytest.raises(RunFolderError) as err:
            late.export_quant_config()
        _refused(err, work)
        assert _files(work) == before                      # the run's committed calibration is intact
    finally:
        unlock(handle)
    assert late.export_quant_config().endswith("quant_info.json")  # once the run is over, it writes


def test_the_exports_and_the_inspection_refuse_a_held_run_folder_and_reading_it_is_fine(held_run):
    work, quant = held_run
    t = torch_quantizer("test", _net(), (X,), output_dir=str(quant), device="cpu")  # reading: allowed
    t.quant_model(X[:1])
    before = _files(work)
    for export in (t.export_xmodel, t.export_onnx_model, t.export_torch_script):
        with pytest.raises(RunFolderError) as err:
            export(str(work / "export"))
        _refused(err, work)
    with pytest.raises(RunFolderError) as err:
        Inspector("DPUCZDX8G_ISA1_B4096").inspect(_net(), (X,), output_dir=str(work / "inspect"), verbose_level=0)
    _refused(err, work)
    assert _files(work) == before


def test_a_folder_next_to_a_held_run_folder_is_not_refused(held_run, tmp_path):
    q = torch_quantizer("calib", _net(), (X,), output_dir=str(tmp_path / "elsewhere"), device="cpu")
    q.quant_model(X)
    assert q.export_quant_config() == str(tmp_path / "elsewhere" / "quant_info.json")


def test_fast_finetune_refuses_before_its_minutes_of_work(tmp_path):
    work = tmp_path / "run"
    unlock(lock_work_dir(str(work)))
    q = torch_quantizer("calib", _net(), (X,), output_dir=str(work / "quantize_result"), device="cpu")
    calls = []
    handle = lock_work_dir(str(work))
    try:
        with pytest.raises(RunFolderError, match="fast_finetune: .* which a pipeline run holds now"):
            q.fast_finetune(lambda *a: calls.append(a), (q.quant_model,))
    finally:
        unlock(handle)
    assert calls == []


# ---- the notes, as the real quantizer's [VAIQ_NOTE] lines ---------------------------------------

SCRIPT = r"""
import logging, sys, torch
sys.path.insert(0, %(repo)r)
%(setup)s
from pipeline.apis import torch_quantizer
from tests.support.small_net import SmallNet
torch.manual_seed(0)
net, x = SmallNet().eval(), torch.rand(4, 3, 8, 8)
out = %(out)r
q = torch_quantizer("calib", net, (x,), output_dir=out, device="cpu")
if %(finetune)r:
    q.fast_finetune(lambda m, batches: [m(b) for b in batches], (q.quant_model, [x, x * 0.5]))
q.quant_model(x)
q.export_quant_config()
t = torch_quantizer("test", net, (x,), output_dir=out, device="cpu")
t.quant_model(x[:1])
t.export_xmodel(out)
t.export_onnx_model(out)
t.export_torch_script(out)
print("done")
"""


def _script(tmp_path, setup="", finetune=False):
    code = SCRIPT % {"repo": REPO, "setup": setup, "out": str(tmp_path / "q"), "finetune": finetune}
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_notes_are_shown_on_stderr_without_any_logging_setup(tmp_path):
    proc = _script(tmp_path)
    q = tmp_path / "q"
    notes = [line for line in proc.stderr.splitlines() if line.startswith("[VAIQ_NOTE]: ")]
    assert "[VAIQ_NOTE]: =>Exporting quant config.(%s); with it: bias_corr.pth, calib_fingerprint.json, " \
           "calib_manifest.json" % (q / "quant_info.json") in notes
    assert "[VAIQ_NOTE]: =>Successfully convert 'SmallNet' to xmodel.(%s)" % (q / "SmallNet_int.xmodel") in notes
    assert "[VAIQ_NOTE]: =>Exporting quant model to ONNX.(%s)" % (q / "SmallNet_int.onnx") in notes
    assert "[VAIQ_NOTE]: =>Exporting torch script model.(%s)" % (q / "SmallNet_int.pt") in notes
    assert "VAIQ" not in proc.stdout and proc.stdout.strip() == "done"


def test_fast_finetune_shows_its_progress(tmp_path):
    proc = _script(tmp_path, finetune=True)
    assert "[VAIQ_NOTE]: =>Fast finetuning module parameters for better quantization accuracy" in proc.stderr
    assert "[VAIQ_NOTE]: fast finetune: layer 1/" in proc.stderr


def test_a_user_silences_the_notes_with_the_logger_level(tmp_path):
    proc = _script(tmp_path, setup='logging.getLogger("pipeline.apis").setLevel(logging.WARNING)')
    assert "VAIQ_NOTE" not in proc.stderr and "=>" not in proc.stderr


def test_a_script_that_configured_logging_gets_each_note_once_through_its_handler(tmp_path):
    proc = _script(tmp_path, setup='logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")')
    lines = proc.stderr.splitlines()
    exported = [line for line in lines if "=>Exporting quant config" in line]
    assert len(exported) == 1 and exported[0].startswith("LOG pipeline.apis =>Exporting quant config")
