"""The step context ``Run``: the run folder plus the data feed (``pipeline.data.feed.DataFeed``:
source -> stages -> quantizer boundary), the model and the quantizer settings every step builds
lazily from the config (the float model, the fingerprint). One ``Run`` per invocation; a step reads
only files, so it can run in its own process.
"""
import logging
import os
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from ..config import LoadedConfig
from ..data.feed import DataFeed
from ..errors import DataError
from ..rundir import RunDir

log = logging.getLogger("pipeline")

# Fingerprint fields recorded for the record only: compile_target (without hardware-aware
# quantization the calibration does not depend on it) and config_hash (the config.* keys it
# hashes are compared one by one, so a mismatch names the key).
FINGERPRINT_INFORMATIVE = ("compile_target", "config_hash")


class Run(RunDir):
    """The step context: the run folder (``pipeline.rundir.RunDir``) and everything a step needs, built
    lazily from the config.

    Args:
        loaded: the validated config.
        source: an already opened source (``pipeline.data.base.Source``) to use instead of
            ``data.source``; the Python API passes the caller's array this way (handed to the feed).
    """

    def __init__(self, loaded: LoadedConfig, source: Any = None) -> None:
        super().__init__(loaded)
        self._source = source
        self._trace = None  # type: Any  # (model, FloatTrace): the step's one fx trace of its float model
        self._feed = None  # type: Optional[DataFeed]

    # ------------------------------------------------------------------ data
    @property
    def feed(self) -> DataFeed:
        """The data feed (``pipeline.data.feed.DataFeed``): source -> stages -> quantizer boundary, built
        on first use from the config's data and preprocess sections, with ``comm`` as set by then."""
        if self._feed is None:
            c = self.cfg
            self._feed = DataFeed(c.data, c.preprocess, c.run.seed, self.loaded.base_dir, source=self._source,
                                  comm=self.comm)
        return self._feed

    def preflight(self, steps: List[str]) -> None:
        """Checks that need the data's shape but no work, for the ``steps`` about to run: the feed's
        (declared layout, channel count after the stages against preprocess.mean/std, a shuffled
        split with stages that keep the batch), the splits the steps need, the arch.json fingerprint.
        Raises DataError, ConfigError, QuantizationError or CompileError."""
        feed = self.feed
        feed.check_shapes()
        if "calib" in steps:
            feed.check_calib_split("calib")
        ft = self.cfg.quantizer.fast_finetune
        if "calib" in steps and ft.enabled:
            feed.check_finetune_batches(ft.data, ft.batches)
        for step, part in (("train", "train"), ("test", "eval"), ("export", "eval"), ("inspect", "eval")):
            if step in steps and not (step == "train" and self.cfg.model.weights):
                feed.require_split(part, step)
        if "compile" in steps:
            arch = self.arch_json()
            if os.path.isfile(arch):
                from ..targets import check_arch_json
                check_arch_json(arch, self.loaded.target.name)  # P11, before any work

    def arch_json(self) -> str:
        """The arch.json the compile step uses: compile.arch_json, else the board's or the target's
        path inside the Vitis AI image (``LoadedConfig.arch_json``). Raises ConfigError when none is known."""
        return self.loaded.arch_json()

    # ------------------------------------------------------------------ model
    def float_model(self, need_weights: bool = True) -> torch.nn.Module:
        """The float model with its trained weights, in eval mode.

        With ``need_weights=False`` and no weights file yet, the seeded, untrained model (enough to
        inspect the architecture).
        """
        from ..models.loading import build_model, load_weights
        m = self.cfg.model
        torch.manual_seed(self.cfg.run.seed)
        model = build_model(m.zoo, m.factory, m.kwargs)
        if not need_weights and not os.path.isfile(self.weights_path):
            return model
        return load_weights(model, self.weights_path)

    def settings(self) -> Any:
        from ..quantizers.base import QuantSettings
        q = self.cfg.quantizer
        return QuantSettings(target=self.loaded.quantizer_target, bitwidth=q.bitwidth,
                             quant_config_file=self.loaded.resolve(q.quant_config_file), device=q.device)

    def backend(self) -> Any:
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
        fp["compile_target"] = self.loaded.target.name
        fp["calib_rows_sha256"] = self.feed.rows_sha256(("calib",))
        # the settings themselves, so that a mismatch names the key that changed, not only the hash
        fp.update(("config." + k, v) for k, v in self.loaded.calib_settings().items())
        return fp

    def check_labels(self, model: torch.nn.Module, example: torch.Tensor, by: str) -> None:
        """Refuse a source without labels, and labels that the model's outputs cannot represent
        (label >= number of outputs): ``by`` (train, test) needs them."""
        labels = self.feed.source.labels
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
