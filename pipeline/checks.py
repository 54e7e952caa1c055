"""Checks on the data that run before any work (layout, channels) or during calibration (statistics).

Each check says what was expected, what came in and what to do.
"""
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .errors import ConfigError, DataError

CHANNEL_COUNTS = (1, 3, 4)  # grayscale, RGB/BGR, RGBA: what an image channel axis usually holds
# fewer calibration samples than this warns: the lower end of "100 to 1000 calibration images" (UG1414, Vitis AI
# Quantizer Flow)
FEW_SAMPLES = 100


def check_declared_layout(shape: Sequence[int], layout: str, where: str = "data.source.layout") -> None:
    """Refuse a 4-D image shape that contradicts its declared layout.

    Args:
        shape: the source's array shape ``(N, A, B, C)``.
        layout: the declared ``NHWC`` or ``NCHW``.

    Raises:
        DataError: the declared channel axis does not hold 1, 3 or 4 values while the other
            layout's channel axis does, e.g. NHWC declared for an array of shape (N, 3, 32, 32).
    """
    if len(shape) != 4:
        return
    here, there, other = (shape[3], shape[1], "NCHW") if layout == "NHWC" else (shape[1], shape[3], "NHWC")
    if here not in CHANNEL_COUNTS and there in CHANNEL_COUNTS:
        raise DataError("%s is %s, but the images have shape %s: its channel axis would hold %d values, while "
                        "the %s channel axis holds %d. Set %s: %s if the data is stored that way."
                        % (where, layout, tuple(shape), here, other, there, where, other))


def check_channels(boundary_shape: Sequence[int], mean: Sequence[float], stages: Any) -> None:
    """Refuse a config whose per-channel mean/std do not match the channels the boundary produces.

    Args:
        boundary_shape: ``Compose.output_shape`` of a source batch, NCHW ``(N, C, H, W)``.
        mean: ``preprocess.mean`` (one value per channel).

    Raises:
        ConfigError: ``len(mean) != C`` or the result is not 4-D NCHW.
    """
    if len(boundary_shape) != 4:
        raise ConfigError("preprocess.stages: the quantizer boundary needs a 4-D NCHW batch, but the stages %s "
                          "produce shape %s; add a reshape/layout stage" % (stages, tuple(boundary_shape)))
    if len(mean) != boundary_shape[1]:
        raise ConfigError("preprocess.mean/std have %d values but the batch after the stages has %d channels "
                          "(NCHW shape %s); give one value per channel, or check data.source.layout and the "
                          "layout stage" % (len(mean), boundary_shape[1], tuple(boundary_shape)))


class InputStats:
    """Running per-channel statistics of the calibration inputs after the boundary (float32 NCHW,
    normalized), turned into a plausibility verdict for the configured normalization (public case
    P05: pixels scaled twice). Each channel is judged on its own: a pooled std would hide a
    collapsed channel behind the spread between channel means."""

    def __init__(self) -> None:
        self.n = 0  # elements per channel
        self.samples = 0  # images
        self.total = None  # type: Optional[torch.Tensor]
        self.total_sq = None  # type: Optional[torch.Tensor]
        self.cmin = None  # type: Optional[torch.Tensor]
        self.cmax = None  # type: Optional[torch.Tensor]
        self._deferred = None  # type: Optional[List[Tuple[Any, ...]]]

    def add(self, x: torch.Tensor) -> torch.Tensor:
        """Account for one boundary batch ``x`` (N, C, H, W) and return it unchanged (with
        ``defer()`` called: keep its statistics for ``merge_ordered``)."""
        xd = x.double()
        batch = (xd.sum(dim=(0, 2, 3)), (xd * xd).sum(dim=(0, 2, 3)), x.amin(dim=(0, 2, 3)), x.amax(dim=(0, 2, 3)),
                 x.numel() // x.shape[1], int(x.shape[0]))
        if self._deferred is not None:
            self._deferred.append(batch)
        else:
            self._merge(*batch)
        return x

    def defer(self) -> "InputStats":
        """Keep each batch's statistics instead of adding them (a torch.distributed rank's shard)."""
        self._deferred = []
        return self

    def merge_ordered(self, comm: Any) -> None:
        """Add every rank's deferred batches in global batch order (``pipeline.distributed``), so
        the float64 sums are one process's, bit for bit. A collective."""
        for batch in comm.gather_ordered(self._deferred or []):
            self._merge(*batch)
        self._deferred = None

    def _merge(self, s: torch.Tensor, sq: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, n: int,
               samples: int) -> None:
        self.n += n
        self.samples += samples
        if self.total is None:
            self.total, self.total_sq, self.cmin, self.cmax = s, sq, lo, hi
        else:
            self.total, self.total_sq = self.total + s, self.total_sq + sq
            self.cmin, self.cmax = torch.minimum(self.cmin, lo), torch.maximum(self.cmax, hi)

    def result(self, mean: Sequence[float], std: Sequence[float]) -> Dict[str, Any]:
        """Statistics and warnings.

        Args:
            mean, std: ``preprocess.mean/std`` in source units, to report the raw pixel range.

        Returns:
            ``{"elements" (per channel), "mean", "std" (per channel, after normalization),
            "source_min", "source_max" (per channel, in source units), "plausible" (bool),
            "warnings" (list of str)}``. A calibration on a single sample warns too, and one on fewer than
            ``FEW_SAMPLES`` (100, the lower end of UG1414's "100 to 1000 calibration images"). After
            ``(x - mean) / std`` a sensible configuration gives
            every channel a std between 0.05 and 20 and a mean within +-10; outside that, the
            normalization does not fit the data (values scaled twice, wrong units, wrong mean/std),
            and the fix positions chosen from such data waste most of the int8 range.
        """
        if not self.n or self.total is None:
            return {"elements": 0, "plausible": True, "warnings": []}
        assert self.total_sq is not None and self.cmin is not None and self.cmax is not None
        m = self.total / self.n
        sd = (self.total_sq / self.n - m * m).clamp(min=0).sqrt()
        src_min = [_round(float(v) * s + mu) for v, s, mu in zip(self.cmin.tolist(), std, mean)]
        src_max = [_round(float(v) * s + mu) for v, s, mu in zip(self.cmax.tolist(), std, mean)]
        bad = [c for c in range(len(m)) if not (0.05 <= float(sd[c]) <= 20 and abs(float(m[c])) <= 10)]
        warnings = []  # type: List[str]
        if self.samples == 1:
            warnings.append("the calibration saw a single sample: every fix_pos (and bias correction) comes from one "
                            "image, so the quantized accuracy on other images can be far from float; give the calib "
                            "split (data.split, data.calib_batches) a few hundred representative samples")
        elif self.samples < FEW_SAMPLES:
            warnings.append("the calibration saw %d samples: the Vitis AI user guide (UG1414, \"Vitis AI Quantizer "
                            "Flow\") says the quantizer generally works well with 100 to 1000 calibration images; "
                            "give the calib split (data.split, data.calib_batches) at least 100 representative samples"
                            % self.samples)
        if bad:
            warnings.append(
                "implausible calibration inputs for the configured normalization: channel(s) %s span %s .. %s in "
                "source units, while preprocess.mean is %s and preprocess.std is %s, so after normalization their "
                "mean is %s and their std %s (expected about 0 and 1). Were the pixels scaled twice (e.g. divided "
                "by 255 when already in 0..1), or are mean/std in other units than the data?"
                % (bad, _fmt([src_min[c] for c in bad]), _fmt([src_max[c] for c in bad]), list(mean), list(std),
                   _fmt([float(m[c]) for c in bad]), _fmt([float(sd[c]) for c in bad])))
        return {"elements": self.n, "mean": [float(v) for v in m], "std": [float(v) for v in sd],
                "source_min": src_min, "source_max": src_max, "plausible": not bad, "warnings": warnings}


def _round(v: float) -> float:
    """Drop float32 noise from values mapped back to source units (6 significant digits)."""
    return float("%.6g" % v)


def _fmt(values: List[float]) -> str:
    return "[" + ", ".join("%.4g" % v for v in values) + "]"


NONE_RIGHT = 10  # a float model that gets none of at least this many eval images right is refused, whatever chance is


def check_above_chance(correct: int, n: int, class_counts: Dict[int, int], calib_warnings: Sequence[str]) -> None:
    """Refuse a float model whose eval accuracy is at chance: it does not work on this data.

    Chance is the share of the commonest eval class (what always answering that class scores);
    "above chance" means more than 3 standard errors above it (``p + 3 * sqrt(p (1 - p) / n)``), so a
    real model clears it by far and a useless one does not by luck. With so few images that even
    a perfect score would not clear it, nothing is decided (the test step warns about small eval sets),
    except a float model that got none of at least ``NONE_RIGHT`` images right: refused whatever chance
    is (an eval split of a single class, where chance is 1.0, included).

    Args:
        correct, n: float top-1 hits and eval images.
        class_counts: eval images per label.
        calib_warnings: the calib step's warnings, to name the likely cause.

    Raises:
        DataError: at chance; the message gives the numbers and the likely cause.
    """
    if n == 0 or not class_counts:
        return
    p = max(class_counts.values()) / float(n)
    bound = p + 3.0 * math.sqrt(p * (1.0 - p) / n)
    if correct == 0 and n >= NONE_RIGHT:  # below any chance, also where the bound cannot decide (one eval class)
        raise DataError("test: the float model got none of the %d eval images right (float accuracy 0.0000%s): it "
                        "does not work on this data, so its quantized model and deploy bundle would be useless. Likely "
                        "cause: the weights do not fit this data or its preprocessing, or they never saw the eval "
                        "split's %s (a train split without %s: see the split warnings). (For a smoke test with an "
                        "untrained model set quantizer.require_float_above_chance: false.)"
                        % ((n, "; the eval split holds the single label %s" % next(iter(class_counts)), "class", "it")
                           if len(class_counts) == 1 else (n, "", "classes", "them")))
    if correct / float(n) > bound or bound >= 1.0:  # above chance, or too few images to tell
        return
    if any("implausible calibration inputs" in w for w in calib_warnings):
        cause = ("the calibration inputs were implausible for preprocess.mean/std (see the calib warning): mean and "
                 "std in other units than the data (0..1 values for 0..255 pixels or the other way round), or pixels "
                 "scaled twice")
    else:
        cause = ("the weights do not fit this data or its preprocessing: weights trained with another normalization, "
                 "channel order or layout, labels numbered in another order, or a model that was never trained")
    raise DataError("test: the float model's accuracy %.4f on %d eval images is at chance (always answering the "
                    "commonest class scores %.4f; above chance starts at %.4f): it does not work on this data, so "
                    "its quantized model and deploy bundle would be useless. Likely cause: %s. (For a smoke test "
                    "with an untrained model set quantizer.require_float_above_chance: false.)"
                    % (correct / float(n), n, p, bound, cause))


def chance_warnings(correct: int, n: int, class_counts: Dict[int, int]) -> List[str]:
    """What the above-chance check (:func:`check_above_chance`) cannot decide but a user must hear: an eval
    split of a single class (chance is then 1.0, so no accuracy is above it, and the accuracy says nothing
    of the other classes) and a float model that got no eval image right. Empty when neither holds.

    Args:
        correct, n: float top-1 hits and eval images.
        class_counts: eval images per label.
    """
    out = []  # type: List[str]
    if n and len(class_counts) == 1:
        label = next(iter(class_counts))
        out.append("the eval split holds a single class (label %s, %d images): the accuracy says nothing of the other "
                   "classes, and the check that the float model is above chance cannot decide (always answering that "
                   "class scores 1.0); give the eval split images of every class (data.split_order: shuffled "
                   "stratifies the splits by label)" % (label, n))
    if n and correct == 0:
        out.append("the float model got none of the %d eval images right (float accuracy 0): it does not work on this "
                   "data, so its quantized model and deploy bundle are useless; check that the weights fit this "
                   "data, its preprocessing and its labels, and that the train split holds every class" % n)
    return out
