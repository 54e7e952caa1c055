"""Checks shared by the config, the registries (stages, sources) and the quantizer boundary: known
names, allowed keys, closest match, the layouts, mean/std.

A spec is a plain dict from YAML, e.g. ``{"type": "crop", "top": 0, "left": 0, "height": 8, "width": 8}``.
Every error says where (``where``, e.g. ``preprocess.stages[2]``), what was expected, what came in and
the closest valid name (``difflib``), so a misspelt key or type is fixed from the message alone.
"""
import difflib
import math
import re
import struct
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .errors import ConfigError

# The axis orders of a 4-D image batch (sources, stages) and the memory formats of the quantizer
# boundary's buffer (preprocess.layout): two different things, each defined here only.
TENSOR_LAYOUTS = ("NCHW", "NHWC")
MEMORY_LAYOUTS = ("NCHW", "channels_last")


def check_mean_std(mean: Any, std: Any) -> Tuple[List[float], List[float]]:
    """``preprocess.mean`` and ``preprocess.std`` as lists of floats, one per channel, in source pixel
    units (normalization ``(x - mean) / std``); a single number counts as one channel. The one check
    of them: the config runs it when it loads, ``QuantizerBoundary`` when it is made (its callers may
    give it values of their own); the deploy bundle takes the boundary's checked ``spec()``.

    The boundary computes in float32, so every value must be a finite float32 (|v| below 3.4e38)
    and every std at least float32's smallest normal number (1.2e-38): below it, ``(x - mean) / std``
    overflows to Inf for any pixel more than 4 from the mean, and the batch would be refused as if
    the data held non-finite values.

    Raises:
        ConfigError: not numbers, not finite, empty, lengths that differ, a std <= 0, a value beyond
            float32's range or a std below its smallest normal number (naming preprocess.mean/std).
    """
    values = []
    for name, given in (("mean", mean), ("std", std)):
        if isinstance(given, (int, float)) and not isinstance(given, bool):
            given = [given]
        try:
            values.append([float(v) for v in given])
        except (TypeError, ValueError):
            raise ConfigError("preprocess.%s: expected a list of numbers (one per channel), got %r" % (name, given))
    mean, std = values
    if not mean or not std or not all(math.isfinite(v) for v in mean + std):
        raise ConfigError("preprocess.mean and std must be finite numbers, one per channel, got mean %s, std %s"
                          % (mean, std))
    if len(mean) != len(std):
        raise ConfigError("preprocess: mean has %d values but std has %d; give one per channel" % (len(mean), len(std)))
    if any(s <= 0 for s in std):
        raise ConfigError("preprocess.std: every value must be > 0, got %s" % std)
    for name, values in (("mean", mean), ("std", std)):
        huge = [v for v in values if not _fits_float32(v)]
        if huge:
            raise ConfigError("preprocess.%s: %s beyond float32's range (largest %.7g), the type the quantizer "
                              "boundary computes (x - mean) / std in; give it in the source's pixel units (e.g. "
                              "mean 123.7, std 58.4 for 0..255 pixels)" % (name, _listed(huge), F32_MAX))
    tiny = [v for v in std if v < F32_MIN_NORMAL]
    if tiny:
        raise ConfigError("preprocess.std: %s below float32's smallest normal number (%.7g): (x - mean) / std, "
                          "computed in float32, overflows to Inf for any pixel more than 4 from the mean; give the "
                          "std in the source's pixel units (e.g. 58.4 for 0..255 pixels)" % (_listed(tiny), F32_MIN_NORMAL))
    return mean, std


F32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max
F32_MIN_NORMAL = 1.1754943508222875e-38  # numpy.finfo(numpy.float32).tiny


def _fits_float32(value: float) -> bool:
    """True when ``value`` rounds to a finite float32."""
    try:
        struct.pack("<f", value)
    except OverflowError:
        return False
    return True


def _listed(values: List[float]) -> str:
    return ("%r is" % values[0]) if len(values) == 1 else ("%s are" % ", ".join(repr(v) for v in values))


def closest_match(name: str, choices: Iterable[str]) -> Optional[str]:
    """The most similar string in ``choices`` (difflib ratio >= 0.6), or None."""
    close = difflib.get_close_matches(str(name), sorted(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def _hint(name: str, choices: Iterable[str]) -> str:
    close = closest_match(name, choices)
    return "; did you mean %r?" % close if close else ""


def lookup(registry: Dict[str, Any], name: Any, where: str) -> Any:
    """``registry[name]``, or ConfigError naming ``where``, the valid names and the closest match."""
    if not isinstance(name, str) or name not in registry:
        raise ConfigError("%s: unknown type %r; valid types: %s%s"
                          % (where, name, ", ".join(sorted(registry)), _hint(str(name), registry)))
    return registry[name]


def check_keys(spec: Dict[str, Any], allowed: Iterable[str], required: Iterable[str], where: str) -> None:
    """Raise ConfigError when ``spec`` has a key outside ``allowed`` or lacks one in ``required``.

    The message names ``where``, the bad key, the allowed keys and the closest match (public case P12).
    ``type`` is always allowed (it selects the registry entry).
    """
    allowed = sorted(set(allowed) | {"type"})
    if not isinstance(spec, dict):
        raise ConfigError("%s: expected a mapping such as {type: ..., ...}, got %s" % (where, type(spec).__name__))
    for key in spec:
        if key not in allowed:
            raise ConfigError("%s.%s: unknown key; allowed keys: %s%s"
                              % (where, key, ", ".join(allowed), _hint(str(key), allowed)))
    missing = [k for k in required if k not in spec]
    if missing:
        raise ConfigError("%s: missing required key(s) %s; allowed keys: %s"
                          % (where, ", ".join(missing), ", ".join(allowed)))


# A name the pipeline makes a file or folder name and a command argument of (run.name: runs/<name> and
# the compiled network's default name; compile.net_name: vai_c_xir -n <name>, deploy/<name>/<name>.xmodel).
NAME_RULE = ("1 to 128 of the characters A-Z a-z 0-9 . _ -, the first a letter or digit (so neither '.' nor '..', "
             "nor a name a command reads as an option, such as '-x')")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def is_plain_name(value: Any) -> bool:
    """True for a name that keeps ``NAME_RULE``: safe as a file or folder name (never ``.``/``..``, no
    separator) and as a command argument (never an option)."""
    return isinstance(value, str) and _NAME.match(value) is not None

