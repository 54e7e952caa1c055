"""The drop-in API's argument checks (``pipeline.apis``): quant_mode, input tensors and their layout,
device, target. Each raises a clear error saying what was expected and what came in."""
import warnings
from typing import Any, Optional, Tuple

import torch

from .apis_inspector import target_name
from .errors import QuantizationError

QUANT_MODES = {"calib": "calib", "test": "test", 1: "calib", 2: "test"}


def _mode(quant_mode: Any) -> str:
    if quant_mode in QUANT_MODES and not isinstance(quant_mode, bool):
        if isinstance(quant_mode, int):
            warnings.warn("integer quant_mode is deprecated; use 'calib' or 'test'")
        return QUANT_MODES[quant_mode]
    warnings.warn("quant_mode supported values are 'calib' and 'test'. Change it to 'calib'")
    return "calib"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "a %d-D %s tensor of shape %s" % (value.dim(), value.dtype, tuple(value.shape))
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__, kind.__name__)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return "%s of shape %s and dtype %s" % (name, tuple(value.shape), value.dtype)
    return name


LAYOUT_NAMES = {1: "(N,)", 2: "(N, F)", 3: "(N, C, L)", 4: "(N, C, H, W)", 5: "(N, C, D, H, W)"}


def _layout(rank: int) -> str:
    return LAYOUT_NAMES.get(rank, "of rank %d" % rank)


def _check_input(value: Any, what: str, rank: Optional[int] = None) -> torch.Tensor:
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
    expected = _layout(rank if rank is not None else 4)
    if not isinstance(value, torch.Tensor):
        numpy = type(value).__module__.split(".")[0] == "numpy"
        hint = _numpy_hint(value) if numpy else "pass a torch.Tensor"
    elif (rank is not None and value.dim() != rank) or value.dim() == 0:
        expected = _layout(rank) if rank is not None else "with a batch dimension"
        hint = "add the batch dimension with x.unsqueeze(0)" if rank is not None and value.dim() == rank - 1 else \
            "reshape it to %s, the shape of input_args" % expected
    elif value.dtype != torch.float32:
        expected = _layout(value.dim())
        hint = "cast it with .float()"
    else:
        return value
    raise QuantizationError("%s: expected a float32 torch.Tensor %s, got %s; %s"
                            % (what, expected, _describe(value), hint))


def _numpy_hint(array: Any) -> str:
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


def _examples(input_args: Any) -> Tuple[torch.Tensor, ...]:
    """``input_args`` (a tensor, or a tuple/list of one tensor per forward argument) as a tuple of
    owned CPU copies: the examples are traced and shape-propagated, and a model whose first op
    writes in place (ReLU(inplace=True) on an input) would otherwise rewrite the caller's tensors."""
    args = tuple(input_args) if isinstance(input_args, (tuple, list)) else (input_args,)
    if not args:
        raise QuantizationError("input_args: expected one example tensor per input of forward(), got none")
    return tuple(_check_input(a, "input_args" if len(args) == 1 else "input_args[%d]" % i).detach().cpu().clone()
                 for i, a in enumerate(args))


def _device(device: Any) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            warnings.warn("CUDA (HIP) is not available, change device to CPU")
        else:
            warnings.warn("the sim quantizer runs on the CPU; device %s is not used" % device)
    return torch.device("cpu")


def _check_target(target: Optional[str], quant_config_file: Optional[str]) -> Optional[str]:
    """Validate ``target`` (a name or a ``0x`` fingerprint, ``apis_inspector.target_name``) and warn;
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
