"""The model and quantizer part of the step context: the float model, its one fx trace, the
calibration fingerprint, the quantizer settings and backend, and the calibration-checked test-mode
model that the test and export steps share. It reads the config and the run folder's files; it
names no backend (the registry, ``pipeline.quantizers.base``, resolves the configured one)."""
import os
from typing import Any, Dict, Optional

import numpy as np
import torch

from ..errors import DataError

QAT = "qat"  # the qat step's name, and its folder in the run folder
QAT_WEIGHTS = "deployable.pth"
QAT_FILES = ("quant_info.json", "test/quant_info.json", QAT_WEIGHTS)  # what the qat step hands on, in qat/

# Fingerprint fields recorded for the record only: compile_target (without hardware-aware
# quantization the calibration does not depend on it) and config_hash (the config.* keys it
# hashes are compared one by one, so a mismatch names the key).
FINGERPRINT_INFORMATIVE = ("compile_target", "config_hash")


class ModelPart:
    """The float model and its quantizer, built lazily from the config.

    Args:
        loaded: the validated config (``pipeline.config.LoadedConfig``).
        folder: the run folder (``pipeline.runner.folder.RunDir``): the trained weights and the calibration live there.
        rows_sha256: ``rows_sha256(parts)``, the sha256 of the rows of those splits (``DataFeed.rows_sha256``),
            recorded in the fingerprint.
    """

    def __init__(self, loaded: Any, folder: Any, rows_sha256: Any) -> None:
        self.loaded = loaded
        self.cfg = loaded.cfg
        self.folder = folder
        self._rows_sha256 = rows_sha256
        self._trace = None  # type: Any  # (model, FloatTrace): the step's one fx trace of its float model
        self._weights_checked = None  # type: Any  # model/float.pt's (inode, size, mtime) when it matched the record
        self._deployed = None  # type: Any  # ((id(model), deployable.pth, mtime), the deployed float model)

    @property
    def weights_path(self) -> str:
        """The float model's state_dict: model.weights when set, else model/float.pt in the run folder."""
        return self.loaded.resolve(self.cfg.model.weights) or self.folder.path("model", "float.pt")

    @property
    def quant_dir(self) -> str:
        """The calibration's folder: quantize_result/ (quant_info.json, bias_corr.pth, the fingerprint)."""
        return self.folder.path("quantize_result")

    def float_model(self, need_weights: bool = True) -> torch.nn.Module:
        """The float model with its trained weights, in eval mode; the train step's file is checked
        against its record first (``check_trained_weights``).

        With ``need_weights=False`` and no weights file yet, the seeded, untrained model (enough to
        inspect the architecture).
        """
        from ..models.loading import build_model, load_weights
        m = self.cfg.model
        torch.manual_seed(self.cfg.run.seed)
        model = build_model(m.zoo, m.factory, m.kwargs)
        if not need_weights and not os.path.isfile(self.weights_path):
            return model
        self.check_trained_weights()
        return load_weights(model, self.weights_path)

    def check_trained_weights(self) -> None:
        """When the weights are the train step's (``model/float.pt``, no model.weights), check the file
        against the sha256 the train step recorded (``pipeline.handoff``). Raises HandoffError."""
        if self.cfg.model.weights is not None:
            return  # the user's file: the calibration fingerprint records its hash
        train = self.folder.load_step("train")
        if train is None or train.get("skipped"):
            return  # no train step made it in this folder (a file put there by hand is loaded as it is)
        from ..handoff import rel, verify
        st = os.stat(self.weights_path) if os.path.isfile(self.weights_path) else None
        key = None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)
        if key is not None and key == self._weights_checked:
            return  # checked by this process, not rewritten since
        verify(self.folder.work_dir, train.get("handed_on"), rel(self.folder.work_dir, self.weights_path), "train",
               "loading the float model", "run the train step again, and the steps after it "
               "(e.g. --steps train,calib,test,export,compile,deploy)")
        self._weights_checked = key

    def settings(self) -> Any:
        """The quantizer settings (``pipeline.quantizers.base.QuantSettings``) of quantizer.*."""
        from ..quantizers.base import QuantSettings
        q = self.cfg.quantizer
        return QuantSettings(target=q.target, bitwidth=q.bitwidth,
                             quant_config_file=self.loaded.resolve(q.quant_config_file), device=q.device)

    def backend(self) -> Any:
        """The configured quantizer backend (``quantizer.backend``, from the registry)."""
        from ..quantizers.base import get_backend
        return get_backend(self.cfg.quantizer.backend)

    def trace(self, model: torch.nn.Module) -> Any:
        """The one ``torch.fx`` trace of ``model`` (``pipeline.fx.float_trace.FloatTrace``), made on the
        first call for this model object and handed to the fingerprint, the backend and the sensitivity."""
        if self._trace is None or self._trace[0] is not model:
            from ..fx.float_trace import FloatTrace
            self._trace = (model, FloatTrace.of(model))
        return self._trace[1]

    def fingerprint(self, model: torch.nn.Module, example: torch.Tensor) -> Dict[str, Any]:
        """The calibration fingerprint of this config (pipeline.quantizers.fingerprint), plus the
        DPU target the run compiles for and the ``config.*`` settings that shape a calibration
        (FINGERPRINT_INFORMATIVE fields are recorded but do not invalidate a calibration)."""
        from ..quantizers.fingerprint import make_fingerprint
        fp = make_fingerprint(model, example, self.settings(), self.loaded.calib_hash(), self.cfg.quantizer.backend,
                              traced=self.trace(model))
        fp["compile_target"] = self.cfg.compile.target
        fp["calib_rows_sha256"] = self._rows_sha256(("calib",))
        # the settings themselves, so that a mismatch names the key that changed, not only the hash
        fp.update(("config." + k, v) for k, v in self.loaded.calib_settings().items())
        return fp

    def test_handle(self, model: torch.nn.Module, example: torch.Tensor) -> Any:
        """The quantized model that ships, one method for the test and export steps: the backend's
        test-mode model of ``model`` from the calibration in quant_dir, after checking that the
        calibration is complete and was made for this model, data and config (fingerprint); with
        quantizer.qat.enabled, the same test-mode model of the QAT-trained weights with qat/'s
        quant_info.json (``qat_handle``), after checking the qat step's files and settings
        (``check_qat``). Raises QuantizationError (run the calib step again), HandoffError or
        PipelineError (run the qat step again) otherwise."""
        if self.qat_enabled:
            self.check_calibration(model, example)  # what QAT started from and is compared with
            self.check_qat()
            return self.qat_handle(model, example, self.qat_dir)
        return self.ptq_handle(model, example)

    def check_calibration(self, model: torch.nn.Module, example: torch.Tensor) -> None:
        """Refuse a calibration in quant_dir that is incomplete or was made for another model, data or
        config (its fingerprint). Raises QuantizationError (run the calib step again)."""
        from ..quantizers.calib_commit import check_committed
        check_committed(self.quant_dir, self.fingerprint(model, example), ignore=FINGERPRINT_INFORMATIVE,
                        redo="run the calib step again")

    def check_calibration_settings(self, redo: str) -> None:
        """Refuse a calibration in quant_dir that is incomplete or was made under other settings of this config
        for what ships (its fingerprint's ``config.preprocess.*``, ``config.model.*`` and ``config.quantizer.*``
        fields), without building the model: the compile and deploy steps, which ship what the export made from
        that calibration beside this config's preprocessing. The data's fields are left out: the config a run
        folder resolves (``config.resolved.yaml``) spells the same files as absolute paths. Raises
        QuantizationError or FingerprintMismatchError (every differing key named, with the calibrated and the
        current value, and ``redo`` or the keys to set back)."""
        import json

        from ..quantizers.calib_commit import check_committed
        settings = json.loads(json.dumps({"config." + k: v for k, v in self.loaded.calib_settings().items()
                                          if k.split(".", 1)[0] in ("preprocess", "model", "quantizer")}))
        check_committed(self.quant_dir, settings, ignore=FINGERPRINT_INFORMATIVE, redo=redo)

    def ptq_handle(self, model: torch.nn.Module, example: torch.Tensor) -> Any:
        """The backend's test-mode model of ``model`` from the calibration in quant_dir (PTQ), after
        ``check_calibration``."""
        self.check_calibration(model, example)
        return self.backend().load_test(model, example, self.quant_dir, self.settings(), traced=self.trace(model))

    # ---- quantization-aware training (the qat step's result) ---------------------------------------
    @property
    def qat_enabled(self) -> bool:
        """quantizer.qat.enabled: the test, export and deploy steps use the qat step's result."""
        return bool(self.cfg.quantizer.qat.enabled)

    @property
    def qat_dir(self) -> str:
        """The qat step's folder: quant_info.json (shipped), test/quant_info.json (raw), deployable.pth."""
        return self.folder.path(QAT)

    @property
    def deployed_dir(self) -> str:
        """The folder whose quant_info.json ships: qat/ with quantizer.qat.enabled, else quant_dir."""
        return self.qat_dir if self.qat_enabled else self.quant_dir

    def qat_settings(self) -> Any:
        """The QuantSettings of a QAT-trained model (``QuantSettings(qat=True)``: CLE and bias correction off)."""
        from ..quantizers.base import QuantSettings
        q = self.cfg.quantizer
        return QuantSettings(target=q.target, bitwidth=q.bitwidth, device=q.device, qat=True)

    def deployed_float(self, model: torch.nn.Module, qat_dir: Optional[str] = None) -> torch.nn.Module:
        """The float model the shipped quantized model is made of: ``model`` itself without QAT; else a
        copy of it (eval mode) holding ``qat_dir``'s (default: qat/) ``deployable.pth``, the trained
        weights. ``model`` is not modified. Raises PipelineError: a missing or damaged file;
        QuantizationError: a file made for another model."""
        if qat_dir is None and not self.qat_enabled:
            return model
        import copy
        from ..errors import QuantizationError
        from ..models.loading import load_state_dict_file
        path = os.path.join(qat_dir or self.qat_dir, QAT_WEIGHTS)
        key = (id(model), path, os.stat(path).st_mtime_ns if os.path.isfile(path) else None)
        if self._deployed is not None and self._deployed[0] == key:
            return self._deployed[1]
        deployed = copy.deepcopy(model).eval()
        try:
            deployed.load_state_dict(load_state_dict_file(path))
        except RuntimeError as exc:
            raise QuantizationError("%s was made for another model (%s); run the qat step again"
                                    % (path, str(exc).splitlines()[0]))
        self._deployed = (key, deployed)
        return deployed

    def qat_handle(self, model: torch.nn.Module, example: torch.Tensor, qat_dir: str) -> Any:
        """The deployed QAT model: the backend's test-mode model (as PTQ's) of ``deployed_float(model,
        qat_dir)`` with ``qat_dir/quant_info.json`` under ``qat_settings()``; its outputs are the
        trained model's eval-mode outputs bit for bit when it was trained with exact_deploy. Runs
        no check of the files (``check_qat`` does; the qat step builds it from the files it wrote)."""
        return self.backend().load_test(self.deployed_float(model, qat_dir), example, qat_dir, self.qat_settings())

    def check_qat(self) -> None:
        """The qat step's result in this run folder is the one to use: saved, its quant_info.json,
        test/quant_info.json and deployable.pth match its record (``pipeline.handoff``), and it was
        trained with the quantizer.qat settings of this config.

        Raises:
            PipelineError: no result; HandoffError: a changed or missing file; QuantizationError: other
                settings (the first differing key named).
        """
        from ..errors import PipelineError, QuantizationError
        from ..handoff import verify
        redo = "run the qat step again, and the steps after it (e.g. --steps qat,test,export,compile,deploy)"
        result = self.folder.load_step(QAT)
        if result is None or result.get("skipped"):
            raise PipelineError("quantizer.qat.enabled is true but the qat step has no result in %s; %s"
                                % (self.folder.work_dir, redo))
        for name in QAT_FILES:
            verify(self.folder.work_dir, result.get("handed_on"), QAT + "/" + name, "qat", "loading the QAT "
                   "result", redo)
        trained, now = result.get("settings") or {}, qat_settings_record(self.cfg)
        for key in sorted(now):
            if trained.get(key) != now[key]:
                raise QuantizationError("%s is %r in this config, but the qat step in %s trained with %r; %s"
                                        % ("quantizer." + key if key == "bitwidth" else "quantizer.qat." + key, now[key],
                                           self.folder.work_dir, trained.get(key, "(not set)"), redo))


def qat_settings_record(cfg: Any) -> Dict[str, Any]:
    """The quantizer.qat settings a QAT result was trained with (all but ``enabled``; ``seed`` resolved to
    run.seed when null), and the bit width:
    saved in steps/qat.json and compared by ``ModelPart.check_qat``."""
    out = {k: v for k, v in cfg.quantizer.qat.model_dump().items() if k != "enabled"}
    out["bitwidth"] = cfg.quantizer.bitwidth
    if out["seed"] is None:
        out["seed"] = cfg.run.seed  # the seed it trained with
    return out


def check_labels(labels: Optional[np.ndarray], model: torch.nn.Module, example: torch.Tensor, by: str) -> None:
    """Refuse a source without labels, and labels that the model's outputs cannot represent
    (label >= number of outputs): ``by`` (train, test) needs them. Raises DataError."""
    if labels is None:
        raise DataError("%s: the source has no labels; training and the accuracy test need them (give "
                        "data.source.labels, or set model.weights and run only calib, export, compile, deploy)"
                        % by)
    with torch.no_grad():
        outputs = model(example.clone())
    if not isinstance(outputs, torch.Tensor):
        raise DataError("%s: the model returns %s, not one tensor of class scores (N, classes); training and the "
                        "accuracy test need one. Run only calib, export, compile, deploy for this model (give "
                        "model.weights), or wrap it so that forward returns the scores"
                        % (by, type(outputs).__name__))
    classes = int(outputs.shape[1]) if outputs.dim() == 2 else None
    top = int(np.max(labels))
    if classes is not None and (top >= classes or int(np.min(labels)) < 0):
        raise DataError("%s: the labels run from %d to %d but the model has %d outputs; set model.kwargs."
                        "num_classes (zoo models) to the number of classes, or check the labels"
                        % (by, int(np.min(labels)), top, classes))
