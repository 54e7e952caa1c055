"""Drop-in ``Inspector`` of ``pytorch_nndct.apis`` (Vitis AI 3.5), for ``from pipeline.apis import Inspector``.

``Inspector(target).inspect(model, (x,), device=..., output_dir=..., image_format=...)`` runs the
CPU inspection of :mod:`pipeline.inspect` (the real Inspector needs ``xir``/``xcompiler`` from the
Vitis AI image) and writes ``inspect_<target>.txt``/``.json``/``.gv`` into ``output_dir``, plus
``.svg``/``.png`` when ``image_format`` asks for it and graphviz's ``dot`` is installed.
"""
import shutil
import subprocess
import warnings
from typing import Any, Optional

import torch
from torch import nn

from .. import fileio
from ..errors import ConfigError, PipelineError
from .checks import output_folder, target_name
from .notes import note

IMAGE_FORMATS = ("svg", "png")


class Inspector:
    """``pytorch_nndct.apis.Inspector`` on the CPU.

    Args:
        name_or_fingerprint: a DPU target name (``pipeline.targets.TARGETS``) or its ``0x``
            fingerprint.

    Raises:
        ConfigError: unknown target (the real one logs "... is invalid target name." and exits).
    """

    def __init__(self, name_or_fingerprint: str) -> None:
        self.target = target_name(name_or_fingerprint, "Inspector")

    def inspect(self, module: nn.Module, input_args: Any, device: Any = torch.device("cuda"),
                output_dir: str = "quantize_result", verbose_level: int = 1,
                image_format: Optional[str] = None):
        """Assign every operation of ``module`` to the DPU or the CPU and write the reports.

        Args:
            module: the float model; not modified.
            input_args: example input: a tensor or a tuple of tensors (one per forward argument).
            device: accepted for compatibility; the inspection runs on the CPU.
            output_dir: folder of ``inspect_<target>.txt``, ``.json``, ``.gv`` (created).
            verbose_level: 0 silent, 1 prints the CPU operations, 2 every assignment.
            image_format: None, ``"svg"`` or ``"png"``: also draw the graph (needs graphviz's ``dot``;
                without it a warning says so).

        Returns:
            The :class:`pipeline.inspect.Inspection` (the real one returns None).

        Raises:
            ConfigError: ``image_format`` not None, "svg" or "png"; ``output_dir`` no path.
            StorageError: ``output_dir`` is a file.
            RunFolderError: ``output_dir`` lies in a run folder that a pipeline run holds now.
            PipelineError: the model cannot be traced or fails on the example (node named).
        """
        from ..inspect import inspect_model, write_reports
        if image_format is not None and image_format not in IMAGE_FORMATS:
            raise ConfigError("Inspector.inspect: image_format must be None, 'svg' or 'png', got %r" % (image_format,))
        output_dir = output_folder(output_dir, "Inspector.inspect")
        args = tuple(input_args) if isinstance(input_args, (tuple, list)) else (input_args,)
        inspection = inspect_model(module, args[0] if len(args) == 1 else args, self.target)
        paths = write_reports(inspection, output_dir)
        if image_format is not None:
            self._draw(paths, image_format)
        note("=>Inspection reports written: %s", ", ".join(paths[k] for k in sorted(paths)))
        if verbose_level >= 1:
            shown = [n for n in inspection.nodes if verbose_level >= 2 or n.device != "DPU"]
            for n in shown:
                print("%s %s -> %s%s" % (n.op, n.name, n.device, (": " + "; ".join(n.reasons)) if n.reasons else ""))
            print(inspection.summary_line())
        return inspection

    @staticmethod
    def _draw(paths: dict, image_format: str) -> None:
        if image_format in paths:
            return
        dot = shutil.which("dot")
        if dot is None:
            warnings.warn("Inspector.inspect: image_format=%r needs graphviz's 'dot', which is not installed; "
                          "%s holds the graph source (render it with `dot -T%s`)" % (image_format, paths["gv"], image_format))
            return
        target = paths["gv"][:-len(".gv")] + "." + image_format
        with fileio.atomic_path(target) as temporary:
            result = subprocess.run([dot, "-T" + image_format, paths["gv"], "-o", temporary],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if result.returncode != 0:
                raise PipelineError("graphviz 'dot -T%s %s' failed with exit status %d: %s" % (
                    image_format, paths["gv"], result.returncode, result.stderr.decode(errors="replace")[-2000:]))
        paths[image_format] = target
