"""Decoding one image file the way torchvision's ``ImageFolder`` loader followed by ``Resize`` and
``CenterCrop`` does on a PIL image (see ``pipeline.data.image_folder`` for the rules), and the sizes
that follow from ``resize`` and ``crop``: shared by the decoded and the streamed image folder.

Bounded decoding: the decoder never holds an image of more than ``max_pixels`` pixels
(``data.source.max_pixels``, default ``MAX_PIXELS`` = 89,478,485, Pillow's own
``Image.MAX_IMAGE_PIXELS`` default, 256 MiB as RGB) at any step. For a file of (H, W) and a resize to
(h, w) the steps are: the image as decoded (H x W, in the file's mode, at most 4 bytes a pixel), the
first pass of Pillow's resize when both sides change (it resizes the width first, over every row:
H x w), and the resized image (h x w); the crop and the returned array are no larger than the
resized image. A file that would need more is refused from its header, before a pixel is decoded
(``ImageTooLarge``, naming the file, its size, the step, the limit and what to do); a header beyond
what Pillow itself opens (``DecompressionBombError``) is refused the same way. An image already
in ``mode`` is kept, not copied. So one decode holds a few images of at most ``max_pixels`` each;
measured above the imports at the default limit (Pillow 13, ru_maxrss): 344 MiB for an RGB PNG of
89.47 M pixels cropped to 224 (685 MiB when the image was copied into its own mode), 600 MiB for one
upscaled to that size, 856 MiB when the whole image is returned (the image, Pillow's ``tobytes``
chunks and their join). The size an int ``resize`` gives follows the aspect ratio (a 2,000,000 x 1
image with ``resize: 36`` would become 72,000,000 x 36, 7.2 GiB as RGB): the check is on that size,
not on the file's pixels.

Reduced decoding (Pillow's JPEG ``draft``) is not used: its DCT-scaled pixels differ from the full
decode torchvision resizes, and it exists for JPEG only.

Pillow is imported on use (``pil()``): importing this module does not load it.
"""
import re
import warnings
from typing import Any, List, Optional, Tuple

import numpy as np

from ..errors import DataError, PipelineError
from .readers import format_bytes

MODES = {"RGB": 3, "L": 1}  # Pillow mode -> channels
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")  # Pillow's 16-bit greyscale modes
SIXTEEN_BIT_RULE = ("16-bit images become 8-bit by their high byte, v >> 8 (floor(v / 256)), the rule Pillow "
                    "applies to 16-bit colour PNGs")

Size = Tuple[int, int]  # (height, width)

# The default of data.source.max_pixels: Pillow's Image.MAX_IMAGE_PIXELS default (int(1024**3 // 4 // 3),
# the size above which Pillow warns of a decompression bomb; it refuses twice that), 256 MiB as RGB.
# Owned here, not read from Pillow, which any code in the process may change.
MAX_PIXELS = 89478485


class ImageTooLarge(DataError):
    """An image file the decoder would have to hold, at some step, as an image of more than
    ``max_pixels`` pixels: refused from its header, before a pixel is decoded."""

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


def held_images(size: Size, resize: Any) -> List[Tuple[str, Size]]:
    """The images the decoder holds for a file of ``size`` (H, W), as ``(step, (height, width))``: the
    image "as decoded"; when both sides change, "in the resize's first pass" (H, w): Pillow's
    resample (``Resample.c``) resizes the width first over every row, then the height; "after the
    resize" (h, w). The crop and the returned array are never larger than the last."""
    new = resized_size(size, resize)
    held = [("as decoded", size)]
    if new[0] != size[0] and new[1] != size[1]:
        held.append(("in the resize's first pass (Pillow resizes the width first, over every row)", (size[0], new[1])))
    if new != size:
        held.append(("after the resize", new))
    return held


def check_held(path: str, size: Size, resize: Any, mode: str, max_pixels: int) -> None:
    """Refuse a file of ``size`` (H, W, from its header) when an image the decoder would hold for it
    (``held_images``) has more than ``max_pixels`` pixels.

    Raises:
        ImageTooLarge: naming the file, its size, the step, that image's size in pixels and bytes
            (in ``mode``), the limit and what to do.
    """
    for step, (h, w) in held_images(size, resize):
        if h * w <= max_pixels:
            continue
        how = "" if resize is None else " with resize=%s" % (list(resize) if isinstance(resize, tuple) else resize,)
        fix = ", set resize: [height, width] (one fixed size, whatever the aspect ratio)"
        raise ImageTooLarge("image file %s is %dx%d (HxW); decoding it%s would hold a %dx%d image (%s pixels: %s as "
                            "%s) %s, more than data.source.max_pixels = %s, the most pixels the decoder holds at any "
                            "step. Remove or shrink the file%s, or raise data.source.max_pixels where the memory is there"
                            % (path, size[0], size[1], how, h, w, count(h * w), format_bytes(h * w * MODES[mode]), mode,
                               step, count(max_pixels), "" if step == "as decoded" else fix))


def count(n: int) -> str:
    """``n`` with thousands separators: 89478485 -> "89,478,485"."""
    return "{:,}".format(n)


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
    OSError; some plugins raise SyntaxError, ValueError, EOFError or struct.error). Its
    ``DecompressionBombError`` is not among them: ``read_size`` and ``decode_image`` raise it as
    ``ImageTooLarge``."""
    import struct
    return (OSError, SyntaxError, ValueError, EOFError, struct.error)


class _Guarded:
    """``with _Guarded(path, max_pixels) as Image:`` Pillow's ``Image`` module, its
    ``DecompressionBombWarning`` silenced (``check_held`` does that job) and its
    ``DecompressionBombError`` (a header beyond what Pillow opens, at open or while a frame loads)
    raised as ``ImageTooLarge``."""

    def __init__(self, path: str, max_pixels: int) -> None:
        self.path, self.max_pixels = path, max_pixels
        self.Image = pil()
        self.warnings = warnings.catch_warnings()

    def __enter__(self) -> Any:
        self.warnings.__enter__()
        warnings.simplefilter("ignore", self.Image.DecompressionBombWarning)
        return self.Image

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        self.warnings.__exit__(kind, exc, tb)
        if kind is not None and issubclass(kind, self.Image.DecompressionBombError):
            found = re.search(r"\((\d+) pixels\)", str(exc))
            pixels = int(found.group(1)) if found else None
            beyond = ("more than data.source.max_pixels = %s" % count(self.max_pixels)
                      if pixels is None or pixels > self.max_pixels else
                      "more than Pillow opens in this process (PIL.Image.MAX_IMAGE_PIXELS x 2)")
            raise ImageTooLarge("image file %s declares %s in its header, %s; Pillow refused it before decoding "
                                "(%s). Remove or shrink the file"
                                % (self.path, "an image of %s pixels" % count(pixels) if pixels else "an image",
                                   beyond, exc))
        return False


def read_size(path: str, max_pixels: int = MAX_PIXELS) -> Size:
    """(height, width) from the image file's header only (no pixels decoded).

    Raises:
        ImageTooLarge: a header Pillow refuses to open (``DecompressionBombError``).
        What Pillow raises for an unreadable file (``decode_errors``).
    """
    with _Guarded(path, max_pixels) as Image, Image.open(path) as im:
        return (int(im.size[1]), int(im.size[0]))


def _eight_bit(im: Any, path: str) -> Any:
    """``im``, or for a 16-bit greyscale image an ``L`` image of its high bytes (``SIXTEEN_BIT_RULE``).

    Raises:
        DataError: 32-bit integer or float pixels (no stated range to map to 0..255).
        What Pillow raises when the pixels cannot be decoded.
    """
    if im.mode in SIXTEEN_BIT_MODES or (im.mode == "I" and im.format == "PNG"):  # a PNG holds at most 16 bits
        values = np.asarray(im)  # decodes all pixels: uint16 in the file's byte order, or int32 for mode I
        if values.dtype.kind == "i":
            values = np.clip(values, 0, 65535)
        return pil().fromarray((values >> 8).astype(np.uint8))
    if im.mode in ("I", "F") or im.mode.startswith(("I;", "F;")):
        raise DataError("image file %s has %s pixels (Pillow mode %s), which have no stated range to map to 0..255; "
                        "expected an 8- or 16-bit image. Convert it to an 8-bit PNG or JPEG"
                        % (path, "float" if im.mode.startswith("F") else "32-bit integer", im.mode))
    return im


def decode_image(path: str, mode: str = "RGB", resize: Any = None, crop: Optional[Size] = None,
                 max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """Decode one image file as torchvision's loader + ``Resize`` + ``CenterCrop`` would on a PIL image,
    a 16-bit image reduced to 8 bits by its high byte first (``SIXTEEN_BIT_RULE``), holding no image
    of more than ``max_pixels`` pixels at any step (the module docstring): checked on the header,
    before a pixel is decoded.

    Returns:
        A new uint8 array (H, W, C), C = 3 for ``RGB`` and 1 for ``L``.

    Raises:
        ImageTooLarge: an image the decoder would hold has more than ``max_pixels`` pixels, or Pillow
            refuses the header.
        What Pillow raises for an unreadable file (see ``decode_errors``); DataError when the image
            after ``resize`` is smaller than ``crop``, or its pixels are 32-bit integers or floats.
    """
    with _Guarded(path, max_pixels) as Image, open(path, "rb") as fp:
        bilinear = getattr(Image, "Resampling", Image).BILINEAR  # Pillow >= 9.1 has the enum; older only the constant
        im = Image.open(fp)  # the header only
        size = (int(im.size[1]), int(im.size[0]))
        check_held(path, size, resize, mode, max_pixels)
        im = _eight_bit(im, path)
        # decodes all pixels (a truncated file fails here); an image already in ``mode`` is kept, not copied
        if im.mode != mode:
            im = im.convert(mode)
        else:
            im.load()
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
