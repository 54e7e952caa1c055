"""Which box of a source image the stages hand to the model: the crop a board application repeats.

The stages are views, so each output pixel of the model's input is one pixel of the source image.
``source_box`` runs the stages on two index images (each pixel holding its own row, or its own
column, of the source image) and reads back which rows and columns of the source the model's
``NCHW`` input holds. When those are one contiguous box, in order (a crop, a center crop, a narrow
of H or W, or no geometric stage at all), that box is what the board must cut out of an image of
the source's size; anything else (rows and columns swapped by a transpose, a reshape that folds one
into the other, a stride) is not a crop and gets None: the deploy bundle then says so.
"""
from typing import Any, Optional, Sequence, Tuple

Box = Tuple[int, int, int, int]  # top, left, height, width


def source_box(compose: Any, image_shape: Sequence[int], layout: str) -> Optional[Box]:
    """``(top, left, height, width)`` of the source image that ``compose``'s output covers, or None.

    Args:
        compose: the stages (``pipeline.stages.Compose``); the ones carried out at the quantizer
            boundary (channel gathers) move no pixel and are skipped.
        image_shape: one source image's shape without the batch axis, in ``layout`` (e.g. (H, W, C)).
        layout: ``NHWC`` or ``NCHW``: the source's axis order.

    Returns None when the output is not a 4-D NCHW view whose rows and columns are one box of the
    image, in order, or when the stages refuse the index images (they are int64).
    """
    import torch

    from ..errors import PipelineError
    if layout not in ("NHWC", "NCHW") or len(image_shape) != 3:
        return None
    shape = (1,) + tuple(int(d) for d in image_shape)
    h_axis, w_axis = layout.index("H"), layout.index("W")
    height, width = shape[h_axis], shape[w_axis]

    def index_image(axis: int, size: int) -> Any:
        view = [1, 1, 1, 1]
        view[axis] = size
        return torch.arange(size, dtype=torch.int64).view(view).expand(shape).contiguous()

    outs = []
    for x in (index_image(h_axis, height), index_image(w_axis, width)):
        try:
            for stage, deferred in zip(compose.stages, compose.runs_at_boundary):
                if not deferred:
                    x = stage.apply(x)
        except (PipelineError, RuntimeError, ValueError, IndexError):
            return None
        if x.dim() != 4 or x.shape[0] != 1:
            return None
        outs.append(x[0])
    rows, cols = outs
    h, w = int(rows.shape[1]), int(rows.shape[2])
    if h == 0 or w == 0:
        return None
    top, left = int(rows[0, 0, 0]), int(cols[0, 0, 0])
    want_rows = torch.arange(top, top + h).view(1, h, 1).expand(rows.shape)
    want_cols = torch.arange(left, left + w).view(1, 1, w).expand(cols.shape)
    if not (torch.equal(rows, want_rows) and torch.equal(cols, want_cols)):
        return None
    return top, left, h, w
