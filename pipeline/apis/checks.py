"""The drop-in API's argument checks (``pipeline.apis``): quant_mode, input tensors and their layout,
device, target. Each raises a clear error saying what was expected and what came in."""
import warnings
from typing import Any, Optional, Tuple

import torch

from ..errors import ConfigError, QuantizationError

QUANT_MODES = {"calib": "calib", "test": "test", 1: "calib", 2: "test"}


def check_mode(quant_mode: Any) -> str:
    """``quant_mode`` as ``"calib"`` or ``"test"``, as the real quantizer reads it: 1 and 2 are
    accepted with a deprecation warning; anything else warns and calibrates (no error)."""
    if quant_mode in QUANT_MODES and not isinstance(quant_mode, bool):
        if isinstance(quant_mode, int):
            warnings.warn("integer quant_mode is deprecated; use 'calib' or 'test'")
        return QUANT_MODES[quant_mode]
    warnings.warn("quant_mode supported values are 'calib' and 'test'. Change it to 'calib'")
    return "calib"


def describe_value(value: Any) -> str:
    """A short description of ``value`` for error messages: a tensor's rank, dtype and shape, or
    the type (with shape and dtype for array-likes such as numpy arrays)."""
    if isinstance(value, torch.Tensor):
        return "a %d-D %s tensor of shape %s" % (value.dim(), value.dtype, tuple(value.shape))
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__, kind.__name__)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return "%s of shape %s and dtype %s" % (name, tuple(value.shape), value.dtype)
    return name


LAYOUT_NAMES = {1: "(N,)", 2: "(N, F)", 3: "(N, C, L)", 4: "(N, C, H, W)", 5: "(N, C, D, H, W)"}


def layout_name(rank: int) -> str:
    """The layout of a tensor of ``rank`` dimensions for messages, e.g. ``"(N, C, H, W)"`` for 4."""
    return LAYOUT_NAMES.get(rank, "of rank %d" % rank)


def check_input(value: Any, what: str, rank: Optional[int] = None) -> torch.Tensor:
    """Return ``value`` if it is a float32 ``torch.Tensor`` (of ``rank`` dimensions when given),
    else raise.

    The real quantizer takes tensors only; a numpy array, a tensor without the batch dimension
    or a float64 tensor fail deep inside it. Here they fail at once, with the fix in the message.

    Args:
        value: the candidate input (any object). Not modified; the same object is returned.
        what: the argument's name for the message (e.g. ``"input_args"``).
        rank: the rank the model was traced with (that of ``input_args``), or None: any rank >= 1.

    Raises:
        QuantizationError: not a tensor, not of the rank, or not float32; the message names what
            came in and how to convert it.
    """
    expected = layout_name(rank if rank is not None else 4)
    if not isinstance(value, torch.Tensor):
        numpy = type(value).__module__.split(".")[0] == "numpy"
        hint = numpy_hint(value) if numpy else "pass a torch.Tensor"
    elif (rank is not None and value.dim() != rank) or value.dim() == 0:
        expected = layout_name(rank) if rank is not None else "with a batch dimension"
        hint = "add the batch dimension with x.unsqueeze(0)" if rank is not None and value.dim() == rank - 1 else \
            "reshape it to %s, the shape of input_args" % expected
    elif value.dtype != torch.float32:
        expected = layout_name(value.dim())
        hint = "cast it with .float()"
    else:
        return value
    raise QuantizationError("%s: expected a float32 torch.Tensor %s, got %s; %s"
                            % (what, expected, describe_value(value), hint))


def numpy_hint(array: Any) -> str:
    """How to turn the numpy array ``array`` into the float32 tensor the quantizer takes.

    ``torch.from_numpy`` refuses negative strides (``a[..., ::-1]``, a BGR<->RGB flip), so such an
    array needs ``np.ascontiguousarray`` first (a copy); a dtype other than float32 needs ``.float()``.
    """
    strides = getattr(array, "strides", ())
    fix = "torch.from_numpy(np.ascontiguousarray(a))" if any(s < 0 for s in strides) else "torch.from_numpy(a)"
    if str(getattr(array, "dtype", "")) != "float32":
        fix += ".float()"
    why = " (the array has negative strides, which torch.from_numpy refuses; ascontiguousarray makes the " \
          "copy)" if any(s < 0 for s in strides) else ""
    return "convert it with %s%s" % (fix, why)


def example_inputs(input_args: Any) -> Tuple[torch.Tensor, ...]:
    """``input_args`` (a tensor, or a tuple/list of one tensor per forward argument) as a tuple of
    owned CPU copies: the examples are traced and shape-propagated, and a model whose first op
    writes in place (ReLU(inplace=True) on an input) would otherwise rewrite the caller's tensors."""
    args = tuple(input_args) if isinstance(input_args, (tuple, list)) else (input_args,)
    if not args:
        raise QuantizationError("input_args: expected one example tensor per input of forward(), got none")
    return tuple(check_input(a, "input_args" if len(args) == 1 else "input_args[%d]" % i).detach().cpu().clone()
                 for i, a in enumerate(args))


def cpu_device(device: Any) -> torch.device:
    """The device the simulation runs on (always the CPU) for the requested ``device``; a CUDA
    request warns (with the real quantizer's wording when CUDA is missing).

    Raises:
        RuntimeError: ``device`` is no device torch knows (``torch.device`` raises it)."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            warnings.warn("CUDA (HIP) is not available, change device to CPU")
        else:
            warnings.warn("the sim quantizer runs on the CPU; device %s is not used" % device)
    return torch.device("cpu")


def check_target(target: Optional[str], quant_config_file: Optional[str]) -> Optional[str]:
    """Validate ``target`` (a name or a ``0x`` fingerprint, :func:`target_name`) and warn;
    returns it unchanged. The real quantizer refuses an unknown name ("... is invalid target name."
    and exit, docs/targets.md#inspector) only in hardware-aware mode (no quant_config_file); here
    always. A valid target warns: the sim does no hardware-aware quantization.

    Raises:
        ConfigError: not a str, an unknown name, or an unknown fingerprint.
    """
    if target is None:
        return None
    target_name(target, "target")
    if quant_config_file is not None:
        warnings.warn("target and quant_config_file are both given: hardware-aware mode is off "
                      "(as in the real quantizer)")
    else:
        warnings.warn("target=%r: the sim quantizer does not do hardware-aware quantization (no DPU "
                      "partitioning, which needs target_factory and xcompiler from the Vitis AI image); "
                      "the fix positions are those of the default DPU flow, as without a target. Use "
                      "the nndct backend in the image for hardware-aware quantization" % target)
    return target


def target_name(value: Any, what: str) -> str:
    """The registered DPU target name for a name or a ``0x`` fingerprint, as the real
    ``torch_quantizer(target=...)`` and ``Inspector(...)`` take them (docs/targets.md#inspector).

    Args:
        value: the caller's argument. what: its name for the messages (``"target"``).

    Raises:
        ConfigError: not a str, an unknown name (the closest registered names are given), or a
            fingerprint of no registered target.
    """
    from ..targets import get_target, targets_by_fingerprint
    if not isinstance(value, str):
        raise ConfigError("%s: expected a DPU target name such as 'DPUCZDX8G_ISA1_B4096' or a '0x' fingerprint "
                          "(a str), got %s" % (what, type(value).__name__))
    if value.lower().startswith("0x"):
        try:
            known = targets_by_fingerprint(int(value, 16))
        except ValueError:
            known = []
        if not known:
            raise ConfigError("%s: %r is not the fingerprint of a DPU target of Vitis AI 3.x or 2.5; "
                              "`python -m pipeline targets` lists names and fingerprints" % (what, value))
        return known[0][0]
    return get_target(value).name  # ConfigError naming the closest registered names


def output_folder(output_dir: Any, what: str, create: bool = False, writes: bool = True,
                  error: type = ConfigError) -> str:
    """``output_dir`` checked as a folder the drop-in may write into (or, ``writes`` False, read from);
    returns it as a str.

    The folder must be a non-empty path and not a file; one written into must not lie in a run folder
    a pipeline run holds now (``refuse_running_run``); with ``create`` it is made (with its parents) when
    missing.

    Args:
        output_dir: the caller's argument. what: the call, for the messages (``"torch_quantizer"``).
        create: make the folder now (calib mode, which writes there later).
        writes: the call will write into it (False: test mode's construction, which only reads).
        error: the class raised for a value that is no path (``ExportError`` for the exports, which
            raised it before).

    Raises:
        ConfigError (or ``error``): not a str/PathLike, or empty.
        StorageError: a file (or a file above it) is in the way, or the folder cannot be made
            (no permission, read-only file system); nothing was written.
        RunFolderError: it is written into and lies in a run folder a run holds (``refuse_running_run``).
    """
    import errno
    import os

    from ..errors import StorageError
    if not isinstance(output_dir, (str, os.PathLike)) or not str(output_dir):
        raise error("%s: output_dir must be a folder path (a str), got %r; nothing was written" % (what, output_dir))
    path = os.fspath(output_dir)
    if os.path.exists(path) and not os.path.isdir(path):
        raise StorageError("%s: output_dir %s is a file, not a folder; give a folder path (it is created when "
                           "missing); nothing was written" % (what, path))
    if writes:
        refuse_running_run(path, what)
    if create:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            blocked = exc.errno in (errno.EEXIST, errno.ENOTDIR)  # a file above it
            raise StorageError("%s: output_dir %s cannot be created (%s); %s; nothing was written"
                               % (what, path, "a file is in the way above it" if blocked else exc.strerror or exc,
                                  "give a folder path" if blocked else "give a folder you may write to"))
    return path


def refuse_running_run(path: str, what: str) -> None:
    """Raise when ``path`` lies in a run folder that a pipeline run holds now (its lock,
    ``pipeline.runlock``): the drop-in writing there would replace that run's files while it runs
    (its committed calibration, its exports), with no word to either side.

    Raises:
        RunFolderError: naming the run folder, the run's pid (as its lock says) and what to do.
    """
    from ..errors import RunFolderError
    from ..runlock import locked_run_of
    found = locked_run_of(path)
    if found is None:
        return
    folder, who = found
    raise RunFolderError("%s: %s lies in the run folder %s, which a pipeline run holds now (%s): writing there "
                         "would replace that run's files while it runs. Nothing was written. Wait for the run to "
                         "finish (python -m pipeline status %s shows it), or give an output_dir outside the run "
                         "folder" % (what, path, folder, who, folder))
