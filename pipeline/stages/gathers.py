"""Channel gathers deferred to the quantizer boundary, followed through the stages.

A channel reorder that a torch view cannot express (BGR<->RGB, any order, a non-progression
selection; a source whose channel axis has a negative stride) is not carried out by its stage:
``track_gathers`` composes the channel indices of every such gather, follows the axis that carries
them through later stages (permute, layout, transpose, squeeze, ...), and returns the order the
quantizer boundary applies inside its single pass (``pipeline.boundary.QuantizerBoundary(channel_order=...)``).
So a reorder may come before the NHWC->NCHW move; a later stage that slices or merges that axis is
a ConfigError.
"""
from typing import Optional, Sequence, Tuple

from ..errors import ConfigError, StageError
from .base import Stage


class Pending:
    """A channel gather deferred to the boundary: ``index`` on ``axis``, first declared by ``origin`` (stage
    ``at``, which read its batch as ``layout``)."""

    def __init__(self, axis: int, index: Tuple[int, ...], origin: str, layout: Optional[str] = None,
                 at: int = -1) -> None:
        self.axis, self.index, self.origin, self.layout, self.at = axis, index, origin, layout, at


def track_gathers(stages: Sequence[Stage], source: Optional[Pending]) -> Tuple[Tuple[bool, ...], Optional[Pending]]:
    """Follow deferred channel gathers through ``stages``: which stages run at the boundary, and the
    composed gather with the axis it ends on. ``source``: a gather the source defers (axis of a 4-D
    batch). The number of dimensions is known from the source or from the first gather (4-D) on.

    Raises:
        ConfigError: naming the stage whose axes do not fit, or that slices/merges the gathered axis.
    """
    pending, ndim = source, (4 if source is not None else None)
    deferred = []
    for i, st in enumerate(stages):
        where = "stage %d %r" % (i, st.name)
        if st.gathers_channels:
            if ndim is not None and ndim != 4:
                raise ConfigError("%s: expects a 4-D %s batch, but the stages before it make it %d-D"
                                  % (where, st.layout, ndim))
            ndim, axis = 4, st.channel_axis()
            if pending is None and st.is_view():
                deferred.append(False)
                continue
            if pending is None:
                pending = Pending(axis, st.gather_index(None), where, st.layout, i)
            elif axis != pending.axis:
                raise ConfigError("%s: gathers channels on axis %d, but the channel order deferred to the boundary "
                                  "from %s lies on axis %d; check the stage's layout"
                                  % (where, axis, pending.origin, pending.axis))
            else:
                try:
                    index = st.gather_index(len(pending.index))
                except StageError as exc:
                    raise ConfigError("%s: %s (after the channel order deferred from %s)"
                                      % (where, exc, pending.origin))
                pending = Pending(axis, tuple(pending.index[j] for j in index), pending.origin)
            deferred.append(True)
            continue
        deferred.append(False)
        if ndim is None:
            continue
        if pending is not None:
            try:
                moved = st.axis_map(ndim)[pending.axis]
            except StageError as exc:
                raise ConfigError("%s: %s" % (where, exc))
            if moved is None:
                raise ConfigError("%s: changes axis %d, which carries the channel order deferred to the quantizer "
                                  "boundary from %s; put the channel reorder after this stage"
                                  % (where, pending.axis, pending.origin))
            pending.axis = moved
        ndim = st.out_ndim(ndim)
    if pending is not None and (ndim != 4 or pending.axis != 1):
        fix = "add a {type: layout, src: NHWC, dst: NCHW} stage"
        if pending.layout == "NCHW" and any(st.name == "layout" for st in stages[pending.at + 1:]):
            # the reorder read the batch as NCHW where it still is NHWC: before the layout stage
            fix = ("%s reads its batch as NCHW (channels on axis 1), but it stands before the layout stage, where "
                   "the batch is still NHWC: give it layout: NHWC, or move it after the layout stage"
                   % pending.origin)
        raise ConfigError("the channel order deferred to the boundary from %s ends on axis %d of a %d-D view, but the "
                          "boundary reads channels from axis 1 of a 4-D NCHW view; %s"
                          % (pending.origin, pending.axis, ndim, fix))
    return tuple(deferred), pending
