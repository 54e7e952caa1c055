"""Decoding one image file the way torchvision's ``ImageFolder`` loader followed by ``Resize`` and
``CenterCrop`` does on a PIL image (see ``pipeline.data.image_folder`` for the rules), and the sizes
that follow from ``resize`` and ``crop``: shared by the decoded and the streamed image folder.

Pillow is imported on use (``pil()``): importing this module does not load it.
"""
from typing import Any, Optional, Tuple

import numpy as np

from ..errors import DataError, PipelineError

MODES = {"RGB": 3, "L": 1}  # Pillow mode -> channels
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")  # Pillow's 16-bit greyscale modes
SIXTEEN_BIT_RULE = ("16-bit images become 8-bit by their high byte, v >> 8 (floor(v / 256)), the rule Pillow "
                    "applies to 16-bit colour PNGs")

Size = Tuple[int, int]  # (height, width)

# ----------------------------------------------------------------------------- geometry

def resized_size(size: Size, resize: Any) -> Size:
    """(height, width) after ``resize``: None keeps ``size``; (h, w) is taken as is; an int sets the
    shorter side to it and the longer to ``int(resize * long / short)`` (torchvision's ``Resize(int)``,
    ``_compute_resized_output_size``)."""
    if resize is None:
        return size
    if not isinstance(resize, int):
        return (int(resize[0]), int(resize[1]))
    h, w = size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(resize * long / short)
    return (new_long, resize) if w <= h else (resize, new_long)


def center_box(size: Size, crop: Size) -> Tuple[int, int]:
    """(top, left) of a ``crop`` (h, w) box centered in ``size`` (H, W), torchvision's ``CenterCrop``
    offsets: ``int(round((H - h) / 2.0))`` (Python's round, half to even)."""
    return int(round((size[0] - crop[0]) / 2.0)), int(round((size[1] - crop[1]) / 2.0))


def output_size(size: Size, resize: Any, crop: Optional[Size]) -> Size:
    """The (height, width) an image of ``size`` (H, W) has after ``resize`` and ``crop``."""
    return crop if crop is not None else resized_size(size, resize)


# ----------------------------------------------------------------------------- decoding

def pil() -> Any:
    """Pillow's ``Image`` module. Raises PipelineError when Pillow is not installed."""
    try:
        from PIL import Image
    except ImportError:
        raise PipelineError("the image_folder source decodes with Pillow, which is not installed; "
                            "pip install pillow")
    return Image


def decode_errors(Image: Any) -> Tuple[type, ...]:
    """What Pillow raises for an unreadable, truncated or malformed file (UnidentifiedImageError is an
    OSError; some plugins raise SyntaxError, ValueError, EOFError or struct.error)."""
    import struct
    return (OSError, SyntaxError, ValueError, EOFError, struct.error, Image.DecompressionBombError)


def read_size(path: str) -> Size:
    """(height, width) from the image file's header only (no pixels decoded). Raises what Pillow raises."""
    Image = pil()
    with Image.open(path) as im:
        return (int(im.size[1]), int(im.size[0]))


def _eight_bit(im: Any, path: str) -> Any:
    """``im``, or for a 16-bit greyscale image an ``L`` image of its high bytes (``SIXTEEN_BIT_RULE``).

    Raises:
        DataError: 32-bit integer or float pixels (no stated range to map to 0..255).
        What Pillow raises when the pixels cannot be decoded.
    """
    if im.mode in SIXTEEN_BIT_MODES or (im.mode == "I" and im.format == "PNG"):  # a PNG holds at most 16 bits
        values = np.clip(np.asarray(im).astype(np.int64), 0, 65535)  # decodes all pixels (any byte order)
        return pil().fromarray((values >> 8).astype(np.uint8))
    if im.mode in ("I", "F") or im.mode.startswith(("I;", "F;")):
        raise DataError("image file %s has %s pixels (Pillow mode %s), which have no stated range to map to 0..255; "
                        "expected an 8- or 16-bit image. Convert it to an 8-bit PNG or JPEG"
                        % (path, "float" if im.mode.startswith("F") else "32-bit integer", im.mode))
    return im


def decode_image(path: str, mode: str = "RGB", resize: Any = None, crop: Optional[Size] = None) -> np.ndarray:
    """Decode one image file as torchvision's loader + ``Resize`` + ``CenterCrop`` would on a PIL image,
    a 16-bit image reduced to 8 bits by its high byte first (``SIXTEEN_BIT_RULE``).

    Returns:
        A new uint8 array (H, W, C), C = 3 for ``RGB`` and 1 for ``L``.

    Raises:
        What Pillow raises for an unreadable file (see ``decode_errors``); DataError when the image
        after ``resize`` is smaller than ``crop``, or its pixels are 32-bit integers or floats.
    """
    Image = pil()
    bilinear = getattr(Image, "Resampling", Image).BILINEAR  # Pillow >= 9.1 has the enum; older only the constant
    with Image.open(path) as f:
        im = _eight_bit(f, path).convert(mode)  # decodes all pixels: a truncated file fails here
    size = (im.size[1], im.size[0])
    new = resized_size(size, resize)
    if new != size:
        im = im.resize((new[1], new[0]), resample=bilinear)
    if crop is not None:
        if crop[0] > new[0] or crop[1] > new[1]:
            raise DataError("image %s is %dx%d (HxW) after resize=%s, smaller than crop %dx%d; set "
                            "data.source.resize to at least the crop size" % (path, new[0], new[1], resize,
                                                                               crop[0], crop[1]))
        top, left = center_box(new, crop)
        if (top, left, crop[0], crop[1]) != (0, 0, new[0], new[1]):
            im = im.crop((left, top, left + crop[1], top + crop[0]))
    out = np.asarray(im, dtype=np.uint8)
    return out[..., None] if out.ndim == 2 else out
