"""The ``nndct`` backend: an adapter over the real Vitis AI quantizer (``pytorch_nndct``).

This is the only module of the package that imports ``pytorch_nndct``, and only inside functions:
the package ships with the Vitis AI image (conda env ``vitis-ai-pytorch``), is not on PyPI, compiles
or loads C++ kernels on import and rewrites ``sys.argv`` (docs/quantizer.md#import-side-effects).

What the adapter adds to the documented flow (docs/quantizer.md#methods-and-exports,
docs/quantizer.md#files-in-output_dir; the official example ``vai_q_pytorch/example/resnet18_quant.py``):

- calib: ``torch_quantizer('calib', ...)``, the calibration forwards, ``export_quant_config()``.
- test: ``torch_quantizer('test', ...)``, the evaluation forwards; export runs one batch-1 forward and
  then ``export_xmodel()`` (``export_onnx_model()`` and ``export_torch_script()`` on request).
- Soft failures become errors (``nndct_calls.py``). The quantizer often only logs an error
  (``[VAIQ_ERROR]``) and returns, or calls ``sys.exit`` (docs/quantizer.md#errors-that-exit-or-only-log): every ERROR record of its
  ``nndct_screen`` logger during a call is collected and raised as ``QuantizationError``/``ExportError``;
  a ``SystemExit`` is caught and raised the same way (``BackendUnavailableError`` for its torch-version
  check). Zero calibration batches, a batch size other than 1 at export and a missing
  ``quant_info.json``/``bias_corr.pth`` are refused before the quantizer is called, and every expected
  output file is checked.
- Ownership: each batch is handed over as an owned copy (the quantizer rounds its input in place,
  docs/quantizer.md#input-rounded-in-place) and the model as a deep copy (with CLE on, it replaces ReLU6
  by ReLU in the model it is given, docs/quantizer.md#the-callers-model-is-rewritten). The caller's
  tensors and model are never changed.
- ``sys.argv`` is hidden from the import (it strips ``--nndct_*`` flags from the list,
  docs/quantizer.md#import-side-effects); configure the quantizer through the config and the ``NNDCT_*``
  environment variables instead.
- One quantizer mode per process. A ``torch_quantizer('test', ...)`` created in a process that already
  ran a calibration gives results a few LSB away from the documented two-process flow
  (docs/quantizer.md#calib-and-test-in-separate-processes), so ``calibrate`` refuses to run in a process
  that created a test-mode quantizer and ``load_test`` refuses in a process that calibrated. The runner
  runs ``--steps calib`` and ``--steps test`` as two processes; ``calibrate``/``load_test`` assume they
  are alone in theirs.

Settings map onto ``torch_quantizer``'s own arguments: ``target``, ``bitwidth``,
``quant_config_file`` and ``device`` (docs/quantizer.md#torch_quantizer-arguments).
"""
import copy
import importlib.util
import itertools
import os
import re
import shutil
import sys
import tempfile
from typing import Any, Dict, Iterable, List, Optional

import torch

from ..errors import BackendUnavailableError, ConfigError, ExportError, QuantizationError
from ..fileio import not_a_file
from .base import DEPLOY_CHECK, CalibrationSummary, FinetuneRequest, QuantizerBackend, QuantSettings, Requirement
from .nndct_calls import (IMAGE_HINT, INSTALL_HINT, QUANT_INFO, model_device, move_dumps, owned, quantizer_call,
                          read_quant_info)

# export.formats name -> (torch_quantizer method, suffix of the file it writes; docs/quantizer.md#methods-and-exports).
# export_onnx_model's default native_onnx=True writes standard QuantizeLinear/DequantizeLinear: "onnx_qdq".
EXPORT_FORMATS = {
    "xmodel": ("export_xmodel", "_int.xmodel"),
    "onnx_qdq": ("export_onnx_model", "_int.onnx"),
    "torchscript": ("export_torch_script", "_int.pt"),
}

# torch_quantizer modes created in this process (see the module docstring).
_MODES_CREATED = set()


def _find_spec() -> Any:
    try:
        return importlib.util.find_spec("pytorch_nndct")
    except (ImportError, ValueError):
        return None


def _import_torch_quantizer() -> Any:
    """Import ``pytorch_nndct.apis.torch_quantizer`` with ``sys.argv`` out of its reach.

    Raises:
        BackendUnavailableError: not installed, or the import ended the process (kernel build failure).
    """
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        from pytorch_nndct.apis import torch_quantizer
    except ImportError as exc:
        raise BackendUnavailableError("nndct backend: cannot import pytorch_nndct (%s). %s" % (exc, INSTALL_HINT))
    except SystemExit as exc:
        raise BackendUnavailableError("nndct backend: importing pytorch_nndct exited with status %s (its C++ "
                                      "kernels failed to load or compile). %s" % (exc.code, INSTALL_HINT))
    finally:
        sys.argv = saved
    return torch_quantizer


class NndctTestHandle:
    """A test-mode ``torch_quantizer`` and its quantized module.

    ``handle(batch)`` runs one forward on an owned copy of ``batch`` (float32 NCHW, any batch size)
    and returns the quantized model's output (a tensor on the CPU, float32). ``forwards`` counts them.

    The quantizer records tensor shapes on its FIRST test-mode forward only, and ``export_xmodel``
    writes those shapes (batch 16 after an eval batch of 16, with an error logged; docs/xmodel.md#batch-1).
    So the handle's first forward is always a batch-1 one: before a first batch of another size it
    runs the batch's first sample alone (its output is dropped; test mode keeps no other state).
    """

    def __init__(self, quantizer: Any, quant_model: torch.nn.Module, device: torch.device) -> None:
        self.quantizer = quantizer
        self.quant_model = quant_model
        self.device = device
        self.forwards = 0
        self.last_batch_size = None  # type: Optional[int]

    def __call__(self, batch: torch.Tensor) -> Any:
        with quantizer_call("test forward", QuantizationError), torch.no_grad():
            if self.forwards == 0 and (batch.dim() == 0 or int(batch.shape[0]) != 1):
                self.quant_model(owned(batch[:1], self.device))  # the shapes export_xmodel writes
                self.forwards += 1
            out = self.quant_model(owned(batch, self.device))
        self.forwards += 1
        self.last_batch_size = int(batch.shape[0])
        return out.detach().cpu() if isinstance(out, torch.Tensor) else out


def _finetune_batches(request: FinetuneRequest) -> List[torch.Tensor]:
    """The finetune batches as a list (nndct runs its ``run_fn`` twice and keeps them all itself)."""
    batches = [b for b in request.batches]
    if len(batches) < 2:
        raise QuantizationError("fast finetune needs at least 2 batches of finetune data, got %d: AdaQuant takes one "
                                "Adam step per batch and judges each pass on the same data" % len(batches))
    return batches


def _fast_finetune(quantizer: Any, quant_model: Any, device: Any, batches: List[torch.Tensor]) -> Dict[str, Any]:
    """The real ``quantizer.fast_finetune`` on ``batches``. Returns ``{"method", "batches", "seconds"}``."""
    import time

    def run_fn() -> None:
        for batch in batches:
            quant_model(owned(batch, device))

    start = time.perf_counter()
    with quantizer_call("calib: fast_finetune()", QuantizationError):
        quantizer.fast_finetune(run_fn, ())
    return {"method": "adaquant", "batches": len(batches), "seconds": round(time.perf_counter() - start, 3)}


class NndctBackend(QuantizerBackend):
    """The real Vitis AI quantizer behind the backend contract of ``base.py`` (see the module docstring)."""

    name = "nndct"
    formats = EXPORT_FORMATS
    default_formats = ("xmodel",)
    separate_processes = True  # docs/quantizer.md#calib-and-test-in-separate-processes
    finetune_methods = ("adaquant",)
    requirements = (
        Requirement("calib/test", "pytorch_nndct torch_quantizer('calib'/'test'), one process per step"),
        Requirement("export xmodel", "pytorch_nndct export_xmodel() with the xir package", modules=("xir",),
                    why_not="the xir package is not installed: %s" % IMAGE_HINT),
    )

    @classmethod
    def version(cls) -> Optional[str]:
        """The installed pytorch_nndct version, read from its ``version.py`` without importing it; None if
        absent. The string looks like ``3.5.0+<git sha>+torch1.13.1`` (written by its setup.py,
        docs/quantizer.md#version-check)."""
        spec = _find_spec()
        for folder in (getattr(spec, "submodule_search_locations", None) or []):
            path = os.path.join(folder, "version.py")
            if os.path.isfile(path):
                with open(path) as f:
                    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read())
                if match:
                    return match.group(1)
        return None

    @classmethod
    def torch_matches(cls) -> Optional[bool]:
        """Whether pytorch_nndct was built for the installed torch (``torch.__version__``, with any local
        suffix such as ``+cpu``, is part of its version string: the quantizer's own check,
        docs/quantizer.md#version-check); None when its version is unknown."""
        version = cls.version()
        return (torch.__version__ in version) if version else None

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        """None when pytorch_nndct is installed for this torch, else why not."""
        if not cls.is_available():
            return "pytorch_nndct is not installed: %s" % IMAGE_HINT
        if cls.torch_matches() is False:
            return ("pytorch_nndct %s was built for another torch than the installed %s; torch_quantizer exits "
                    "on that" % (cls.version(), torch.__version__))
        return None

    @classmethod
    def is_available(cls) -> bool:
        """True when ``pytorch_nndct`` can be found (checked without importing it)."""
        return _find_spec() is not None

    def _make_quantizer(self, mode: str, model: torch.nn.Module, example: torch.Tensor, out_dir: str,
                        settings: QuantSettings) -> Any:
        other = "test" if mode == "calib" else "calib"
        if other in _MODES_CREATED:
            raise QuantizationError(
                "nndct %s: this process already created a %s-mode quantizer; the real quantizer keeps state "
                "that changes test results when calib and test share a process. Run the steps as "
                "separate processes: python -m pipeline run <run_dir>/config.resolved.yaml "
                "--steps calib, then --steps test" % (mode, other))
        torch_quantizer = _import_torch_quantizer()
        config_file = os.path.abspath(settings.quant_config_file) if settings.quant_config_file else None
        if config_file is not None and not os.path.isfile(config_file):
            raise ConfigError("quantizer.quant_config_file: %s %s" % (config_file, not_a_file(config_file)))
        device = torch.device(settings.device)
        module = copy.deepcopy(model).eval()  # CLE rewrites the module it is given (docs/quantizer.md#the-callers-model-is-rewritten)
        _MODES_CREATED.add(mode)
        with quantizer_call("%s: torch_quantizer(%r, ...)" % (mode, mode), QuantizationError):
            quantizer = torch_quantizer(mode, module, (owned(example, device),), output_dir=out_dir,
                                        bitwidth=settings.bitwidth, device=device,
                                        quant_config_file=config_file, target=settings.target)
            quant_model = quantizer.quant_model
        return quantizer, quant_model, model_device(quant_model, device)

    def calibrate(self, model: torch.nn.Module, example: torch.Tensor, batches: Iterable[torch.Tensor],
                  out_dir: str, settings: QuantSettings, traced: Any = None,
                  finetune: Optional[FinetuneRequest] = None) -> CalibrationSummary:
        """Run the real calibration and move its files into ``out_dir``.

        With ``finetune`` (method ``adaquant``): the real ``quantizer.fast_finetune`` runs first on
        its batches (held in memory, as nndct holds them), then ``batches`` are the re-calibration;
        nndct's ``param.pth`` is moved into ``out_dir`` with the rest.

        Args:
            model: float model (not modified); example: an input batch (float32 NCHW) for the trace;
            batches: calibration batches (float32 NCHW, owned by the pipeline; not modified).
            traced: unused (the real quantizer parses the model with torch.jit.trace).

        Returns:
            a ``CalibrationSummary`` (``fast_finetune``: method, batches, seconds; no ``sha256``).
            The files (``quant_info.json``, ``bias_corr.pth`` when bias correction is on, the generated
            ``<Model>.py``) are written in a temporary folder inside ``out_dir`` and moved into place
            only after every check passed; ``quant_info.json`` is moved last.

        Raises:
            QuantizationError: no batches (P03; before the quantizer is created, nothing written), a
                logged quantizer error, a SystemExit, missing output files, or a test-mode quantizer
                already created in this process.
            BackendUnavailableError: pytorch_nndct is missing or was built for another torch.
        """
        iterator = iter(batches)
        first = next(iterator, None)
        if first is None:
            raise QuantizationError("calibration saw 0 batches: the calib data is empty (check the data source "
                                    "and the calibration batch limit); nothing was quantized or written")
        os.makedirs(out_dir, exist_ok=True)
        work = tempfile.mkdtemp(dir=out_dir, prefix=".nndct-calib-")
        try:
            ft_batches = None if finetune is None else _finetune_batches(finetune)  # checked before nndct starts
            quantizer, quant_model, device = self._make_quantizer("calib", model, example, work, settings)
            record = None
            if ft_batches is not None:
                record = _fast_finetune(quantizer, quant_model, device, ft_batches)
            count = 0
            with quantizer_call("calib forward", QuantizationError), torch.no_grad():
                for batch in itertools.chain([first], iterator):
                    quant_model(owned(batch, device))
                    count += 1
            with quantizer_call("calib: export_quant_config()", QuantizationError):
                quantizer.export_quant_config()
            info = read_quant_info(work, "calib: export_quant_config()")
            names = sorted(n for n in os.listdir(work) if os.path.isfile(os.path.join(work, n)))
            names.remove(QUANT_INFO)
            files = []
            for name in names + [QUANT_INFO]:
                os.replace(os.path.join(work, name), os.path.join(out_dir, name))
                files.append(os.path.join(out_dir, name))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return CalibrationSummary(batches=count, files=files, quant_info=info, quantizer_version=self.version(),
                                  fast_finetune=record)

    def load_test(self, model: torch.nn.Module, example: torch.Tensor, out_dir: str,
                  settings: QuantSettings, traced: Any = None) -> NndctTestHandle:
        """Create the test-mode quantizer from ``out_dir`` (``quant_info.json``, ``bias_corr.pth``).

        The quantizer traces ``example[:1]``: a batch-1 trace is what ``export_xmodel`` needs
        (docs/quantizer.md#export-needs-batch-1), and forwards of any batch size work on it.

        Raises:
            QuantizationError: missing ``quant_info.json`` or ``bias_corr.pth``, a logged error or
                SystemExit while building the quantizer, or a calibration already run in this process.
            BackendUnavailableError: pytorch_nndct is missing or was built for another torch.
        """
        info = read_quant_info(out_dir, "test")
        quantizer, quant_model, device = self._make_quantizer("test", model, example[:1], out_dir, settings)
        if info.get("fast_finetuned") is True:  # before the first forward, as nndct needs
            with quantizer_call("test: load_ft_param()", QuantizationError):
                quantizer.load_ft_param()
        return NndctTestHandle(quantizer, quant_model, device)

    def export(self, handle: NndctTestHandle, example1: torch.Tensor, out_dir: str,
               formats: List[str], deploy_check: bool = False) -> Dict[str, str]:
        """Run one forward on ``example1`` (batch 1), then write each requested format into ``out_dir``.
        ``deploy_check``: ``export_xmodel(deploy_check=True)``, its ``deploy_check_data_int`` folder moved
        into ``out_dir`` in one rename (replacing an earlier one) before the xmodel, and named under
        ``DEPLOY_CHECK`` in the result.

        Args:
            formats: any of ``"xmodel"`` (``<Model>_int.xmodel``, needs ``xir``), ``"onnx_qdq"``
                (``<Model>_int.onnx``, QuantizeLinear/DequantizeLinear), ``"torchscript"`` (``<Model>_int.pt``).

        Returns ``{format: path}``. Each file is written in a temporary folder and moved into
        ``out_dir`` once it exists.

        Raises:
            ConfigError: an unknown format.
            ExportError: ``example1`` has a batch size other than 1 (P04: pass ``example[:1]``), the
                quantizer logged an error or exited, or it wrote no file (or several graphs).
            BackendUnavailableError: ``export_xmodel`` without the ``xir`` package (outside the image).
        """
        unknown = [f for f in formats if f not in EXPORT_FORMATS]
        if unknown:
            raise ConfigError("export.formats: the nndct backend writes %s, got %s" % (sorted(EXPORT_FORMATS), unknown))
        if example1.dim() == 0 or int(example1.shape[0]) != 1:
            raise ExportError("nndct export: the example input must have batch size 1 (the DPU export needs batch 1), "
                              "got shape %s; pass example[:1]" % (tuple(example1.shape),))
        handle(example1)
        os.makedirs(out_dir, exist_ok=True)
        work = tempfile.mkdtemp(dir=out_dir, prefix=".nndct-export-")
        written = {}
        try:
            for fmt in formats:
                method, suffix = EXPORT_FORMATS[fmt]
                step = "export %s (%s)" % (fmt, method)
                dumps = fmt == "xmodel" and deploy_check
                with quantizer_call(step, ExportError):
                    getattr(handle.quantizer, method)(output_dir=work, **({"deploy_check": True} if dumps else {}))
                produced = sorted(n for n in os.listdir(work) if n.endswith(suffix))
                if len(produced) != 1:
                    raise ExportError("nndct %s: expected one *%s file, the quantizer wrote %s" % (step, suffix, produced or "none"))
                if dumps:  # once the xmodel is there, before it is moved: its name appears last
                    written[DEPLOY_CHECK] = move_dumps(work, out_dir, step)
                final = os.path.join(out_dir, produced[0])
                os.replace(os.path.join(work, produced[0]), final)
                written[fmt] = final
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return written
