"""The nndct adapter's typed-error checks: every way a ``pytorch_nndct`` call fails becomes a pipeline error.

The real quantizer often only logs an error (``[VAIQ_ERROR]``) and returns, or calls ``sys.exit``
(docs/quantizer.md#errors-that-exit-or-only-log): ``quantizer_call`` collects every ERROR record of its
``nndct_screen`` logger during a call and raises it as ``QuantizationError``/``ExportError``, and turns a
``SystemExit`` into the same (``BackendUnavailableError`` for its torch-version check).
``read_quant_info`` refuses a missing or malformed ``quant_info.json`` (or a missing ``bias_corr.pth``)
before the quantizer is called; ``owned`` hands the quantizer an owned copy of each batch (it rounds
its input in place, docs/quantizer.md#input-rounded-in-place). Nothing here imports ``pytorch_nndct``
(``pipeline.quantizers.nndct`` does, the only module that does).
"""
import contextlib
import itertools
import logging
import os
import re
import shutil
from typing import Any, Dict, Iterator, List

import torch

from ..errors import BackendUnavailableError, ExportError, PipelineError, QuantizationError
from ..fileio import parse_json
from ..targets.releases import pipeline_image
from .base import DEPLOY_CHECK_FOLDER

NNDCT_LOGGER = "nndct_screen"
# the image named by the pinned tag of pipeline.targets.releases (the one owner of the image tags)
IMAGE_HINT = ("it comes with the Vitis AI image (%s, conda env vitis-ai-pytorch; scripts/docker_run.sh)"
              % pipeline_image())
INSTALL_HINT = ("pytorch_nndct comes with the Vitis AI image (%s, conda env vitis-ai-pytorch): run the pipeline "
                "there with scripts/docker_run.sh, or use the sim backend" % pipeline_image())
QUANT_INFO = "quant_info.json"
BIAS_CORR = "bias_corr.pth"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ErrorRecorder(logging.Filter):
    """Collects the ERROR records of the quantizer's screen logger (it logs errors and goes on)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: List[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            self.messages.append(" ".join(_ANSI.sub("", record.getMessage()).split()))
        return True


@contextlib.contextmanager
def quantizer_call(step: str, error_cls: type) -> Iterator[ErrorRecorder]:
    """Run a block of quantizer calls and turn every way it can fail into a pipeline error.

    A ``SystemExit`` (``check2user``, config and version checks) and an exception become ``error_cls``
    (``BackendUnavailableError`` for the torch-version check and for a missing ``xir`` package);
    after the block, any ERROR record the quantizer logged becomes ``error_cls`` too.
    """
    logger = logging.getLogger(NNDCT_LOGGER)
    recorder = ErrorRecorder()
    logger.addFilter(recorder)
    try:
        try:
            yield recorder
        except SystemExit as exc:
            said = "; ".join(recorder.messages) or "no message"
            cls = BackendUnavailableError if "TORCH_VERSION" in said else error_cls
            raise cls("nndct %s: the quantizer ended the process with exit status %s: %s. %s"
                      % (step, exc.code, said, INSTALL_HINT if cls is BackendUnavailableError else
                         "Check the model and quantizer settings"))
        except PipelineError:
            raise
        except Exception as exc:  # the quantizer raises bare Exceptions, KeyErrors, ... (docs/quantizer.md#errors-that-exit-or-only-log)
            if "install xir" in str(exc):
                raise BackendUnavailableError("nndct %s: %s. The xir package comes with the Vitis AI image only; "
                                              "run this step there (scripts/docker_run.sh)" % (step, exc)) from exc
            raise error_cls("nndct %s failed: %s: %s" % (step, type(exc).__name__, exc)) from exc
    finally:
        logger.removeFilter(recorder)
    if recorder.messages:
        raise error_cls("nndct %s: the quantizer reported an error: %s" % (step, "; ".join(recorder.messages)))


def owned(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A new tensor with its own storage on ``device``: the quantizer rounds its input in place
    (docs/quantizer.md#input-rounded-in-place)."""
    return batch.detach().to(device, copy=True)


def model_device(module: torch.nn.Module, default: torch.device) -> torch.device:
    for p in itertools.chain(module.parameters(), module.buffers()):
        return p.device
    return default


def read_quant_info(folder: str, step: str) -> Dict[str, Any]:
    """Read ``quant_info.json`` of ``folder`` and check ``bias_corr.pth`` is there when it is needed.

    Raises:
        QuantizationError: the file is missing, not JSON (or nested too deep), not an object, or
            says bias_corrected without a ``bias_corr.pth`` beside it.
    """
    path = os.path.join(folder, QUANT_INFO)
    if not os.path.isfile(path):
        raise QuantizationError("nndct %s: no %s in %s; run the calib step first (the real quantizer would "
                                "exit(2) here)" % (step, QUANT_INFO, folder))
    try:
        with open(path, "r", encoding="utf-8") as f:
            info = parse_json(f.read())
    except ValueError as exc:  # not JSON, not UTF-8, or nested too deep (fileio.parse_json)
        raise QuantizationError("nndct %s: %s is not valid JSON (%s); run the calib step again" % (step, path, exc))
    if not isinstance(info, dict):
        raise QuantizationError("nndct %s: %s holds a JSON %s, not the object the quantizer writes; run the calib "
                                "step again" % (step, path, type(info).__name__))
    if info.get("bias_corrected") and not os.path.isfile(os.path.join(folder, BIAS_CORR)):
        raise QuantizationError("nndct %s: %s says bias_corrected but %s is missing in %s; run the calib step "
                                "again (test mode needs both files)" % (step, QUANT_INFO, BIAS_CORR, folder))
    return info


def move_dumps(work: str, out_dir: str, step: str) -> str:
    """Move the deploy-check dumps ``export_xmodel(output_dir=work, deploy_check=True)`` wrote
    (``work/deploy_check_data_int/<Model>/``, one graph) to ``out_dir/deploy_check_data_int/<Model>``
    in one rename, replacing an earlier folder of that name; returns the new folder.

    Raises:
        ExportError: the quantizer wrote no dumps, or dumps of several graphs (named).
    """
    top = os.path.join(work, DEPLOY_CHECK_FOLDER)
    graphs = sorted(os.listdir(top)) if os.path.isdir(top) else []
    if len(graphs) != 1 or not os.path.isdir(os.path.join(top, graphs[0])):
        raise ExportError("nndct %s: expected the deploy-check dumps of one graph in %s/, the quantizer wrote %s"
                          % (step, DEPLOY_CHECK_FOLDER, graphs or "none"))
    final = os.path.join(out_dir, DEPLOY_CHECK_FOLDER, graphs[0])
    os.makedirs(os.path.dirname(final), exist_ok=True)
    if os.path.isdir(final):  # an earlier export's: the new dumps replace it as a whole
        shutil.rmtree(final)
    os.replace(os.path.join(top, graphs[0]), final)
    return final
