"""The literal table from YAML ``type:`` names to stage classes, and ``build_stages``.

Every stage is a view of its input; the channel gathers marked "boundary" are carried out inside
the quantizer boundary's single pass (see ``pipeline.stages.gathers``).

| type            | parameters                               | what it is                                   |
|-----------------|------------------------------------------|----------------------------------------------|
| reshape, view   | shape (per sample, one -1 allowed)       | ``x.view(N, *shape)``                        |
| permute         | dims (dims[0] == 0)                      | ``x.permute(*dims)``                         |
| layout          | src, dst (NHWC / NCHW)                   | named permute, e.g. NHWC -> NCHW             |
| transpose       | dim0, dim1                               | ``x.transpose(dim0, dim1)``                  |
| squeeze         | dim                                      | remove a size-1 axis                         |
| unsqueeze       | dim                                      | add a size-1 axis                            |
| crop            | top, left, height, width, layout         | box on H, W                                  |
| center_crop     | height, width, layout                    | central box (torchvision offsets)            |
| narrow          | dim, start, length                       | ``x.narrow(dim, start, length)``             |
| batch_slice     | start, stop, step                        | ``x[start:stop:step]``                       |
| select_channels | channels, layout                         | slice if a progression, else boundary        |
| expand_channels | channels, layout                         | 1 -> n channels, stride 0                    |
| channel_order   | order, layout                            | any permutation (boundary)                   |
| bgr_to_rgb      | layout                                   | ``[2, 1, 0]`` (boundary)                     |
| rgb_to_bgr      | layout                                   | ``[2, 1, 0]`` (boundary)                     |
"""
import dataclasses
from typing import Any, Dict, List, Optional

from ..errors import ConfigError, StageError
from ..specs import check_keys, lookup
from .base import Stage
from .channels import BgrToRgb, ChannelOrder, ExpandChannels, RgbToBgr, SelectChannels
from .compose import Compose
from .crop import BatchSlice, CenterCrop, Crop, Narrow
from .layout import Layout, Permute, Reshape, Squeeze, Transpose, Unsqueeze

STAGES = {
    "reshape": Reshape,
    "view": Reshape,
    "permute": Permute,
    "layout": Layout,
    "transpose": Transpose,
    "squeeze": Squeeze,
    "unsqueeze": Unsqueeze,
    "crop": Crop,
    "center_crop": CenterCrop,
    "narrow": Narrow,
    "batch_slice": BatchSlice,
    "select_channels": SelectChannels,
    "expand_channels": ExpandChannels,
    "channel_order": ChannelOrder,
    "bgr_to_rgb": BgrToRgb,
    "rgb_to_bgr": RgbToBgr,
}


def build_stage(spec: Dict[str, Any], where: str = "stage") -> Stage:
    """One stage from its spec ``{type: ..., <parameters>}``.

    Raises:
        ConfigError: unknown type or key, missing parameter, or a bad value; the message names
            ``where``, the bad name or parameter, the valid names and the closest match.
    """
    if not isinstance(spec, dict):
        raise ConfigError("%s: expected a mapping such as {type: crop, ...}, got %r" % (where, spec))
    cls = lookup(STAGES, spec.get("type"), where)
    fields = dataclasses.fields(cls)
    required = [f.name for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    check_keys(spec, [f.name for f in fields], required, where)
    try:
        return cls(**{k: v for k, v in spec.items() if k != "type"})
    except StageError as exc:
        raise ConfigError("%s: %s; valid parameters of %r: %s"
                          % (where, exc, spec["type"], ", ".join(f.name for f in fields)))


def build_stages(specs: List[Dict[str, Any]], source: Optional[Any] = None,
                 where: str = "preprocess.stages") -> Compose:
    """The ``Compose`` for a list of stage specs (from YAML).

    Args:
        specs: e.g. ``[{"type": "layout", "src": "NHWC", "dst": "NCHW"}, {"type": "bgr_to_rgb"}]``.
        source: the opened source (``pipeline.data.base.Source``) the batches come from. Needed when the
            source defers a channel order (a numpy array flipped with ``a[..., ::-1]``, public case
            P01), so that ``compose.boundary_channel_order`` includes it; harmless otherwise.
        where: the config path used in error messages (``where[i]`` names stage ``i``).

    Raises:
        ConfigError: a bad spec (see ``build_stage``), or a channel order that cannot reach the
            boundary's channel axis.
    """
    if not isinstance(specs, (list, tuple)):
        raise ConfigError("%s: expected a list of stages, got %s" % (where, type(specs).__name__))
    stages = [build_stage(spec, "%s[%d]" % (where, i)) for i, spec in enumerate(specs)]
    order = getattr(source, "channel_order", None)
    return Compose(stages, source_layout=getattr(source, "layout", None), source_channel_order=order)
