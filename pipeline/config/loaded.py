"""A validated config plus where it came from: the YAML's folder that input paths resolve against,
the run folder, the resolved DPU target, and the hashes that fingerprint a calibration."""
import copy
import hashlib
import json
import os
from typing import Any, Dict, Optional

from .sections import Config

# Keys of data.source and (section, key) pairs that name input files: resolved against the YAML's folder.
SOURCE_PATH_KEYS = ("path", "labels", "root", "class_names")  # class_names: a file, or a list (kept)
INPUT_PATHS = (("model", "weights"), ("quantizer", "quant_config_file"), ("compile", "arch_json"))


class LoadedConfig:
    """A validated config plus where it came from.

    Attributes:
        cfg: the validated ``Config``.
        path: absolute path of the YAML file.
        base_dir: folder that relative input paths resolve against.
        work_dir: absolute run folder.
        raw: the resolved plain dict (after overrides), as written to the run's config.resolved.yaml.
        target: the DPU target of ``compile.target`` (a ``pipeline.targets.DpuTarget``), resolved
            once by ``load_config``: every step reads it here. ``quantizer.target`` is null or the
            same name (``quantizer_target``).
    """

    def __init__(self, cfg: Config, path: str, raw: Dict[str, Any]) -> None:
        self.cfg = cfg
        self.path = os.path.abspath(path)
        self.base_dir = os.path.dirname(self.path)
        self.raw = raw
        self.work_dir = os.path.abspath(cfg.run.work_dir or os.path.join("runs", cfg.run.name))
        self.target = None  # type: Any  # DpuTarget, set by load_config once the config is valid

    @property
    def quantizer_target(self) -> Optional[str]:
        """The ``target=`` torch_quantizer gets: the target's name when ``quantizer.target`` is set
        (hardware-aware mode; it equals ``compile.target``), else None."""
        return self.target.name if self.cfg.quantizer.target is not None else None

    def arch_json(self) -> str:
        """The arch.json the compile step uses: ``compile.arch_json`` (resolved against the YAML's
        folder), else the board's or the target's path inside the Vitis AI image.

        Raises:
            ConfigError: no path is documented for the target (``targets.arch_json_path``).
        """
        from ..targets import arch_json_path
        c = self.cfg.compile
        return self.resolve(c.arch_json) or arch_json_path(self.target.name, c.board)

    def resolve(self, path: Optional[str]) -> Optional[str]:
        """An input path made absolute against the YAML file's folder (None stays None)."""
        if path is None:
            return None
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(self.base_dir, path))

    def absolute_raw(self) -> Dict[str, Any]:
        """A copy of the resolved dict with every input path and ``run.work_dir`` made absolute: what a
        child process runs (config.resolved.yaml in the run folder) and what the ranks of a torchrun compare."""
        raw = copy.deepcopy(self.raw)
        source = raw.get("data", {}).get("source", {})
        for key in SOURCE_PATH_KEYS:
            if isinstance(source.get(key), str):
                source[key] = self.resolve(source[key])
        for section, key in INPUT_PATHS:
            sec = raw.get(section) or {}
            if isinstance(sec.get(key), str):
                sec[key] = self.resolve(sec[key])
        raw.setdefault("run", {})["work_dir"] = self.work_dir
        return raw

    def hash(self) -> str:
        """sha256 of the resolved config, minus run.work_dir (moving a run folder keeps the hash)."""
        raw = copy.deepcopy(self.raw)
        raw.get("run", {}).pop("work_dir", None)
        return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()

    def calib_settings(self) -> Dict[str, Any]:
        """The settings that shape a calibration, as ``{"dotted.key": value}``: the data and its
        split, batching, the preprocessing, the model's architecture, and the quantizer's
        arguments. Changing the export formats, the accuracy budget or the compile target keeps a
        calibration valid. (The quant_config_file's content and the weights are fingerprinted
        separately, by hash.)"""
        c = self.cfg
        sections = {
            "data": c.data.model_dump(exclude={"eval_batches"}),
            "preprocess": c.preprocess.model_dump(),
            "model": c.model.model_dump(include={"zoo", "factory", "kwargs"}),
            # fast_finetune.memory_mb only moves caches between memory and files: same result; qat comes after
            # the calibration (the qat step's result records and checks its own settings)
            "quantizer": c.quantizer.model_dump(exclude={"max_accuracy_drop": True, "require_float_above_chance": True,
                                                         "device": True, "quant_config_file": True,
                                                         "fast_finetune": {"memory_mb"}, "qat": True}),
        }
        return {"%s.%s" % (section, key): value for section, values in sections.items()
                for key, value in sorted(values.items())}

    def calib_hash(self) -> str:
        """sha256 of ``calib_settings()``."""
        return hashlib.sha256(json.dumps(self.calib_settings(), sort_keys=True, default=str).encode()).hexdigest()
