"""ImageNet-style class folders: ``root/<class>/<image>``, decoded once with Pillow into one owned array.

Layout on disk (the layout of ImageNet's ``train/`` and ``val/`` folders and of torchvision's
``ImageFolder``)::

    root/cat/0001.jpg
    root/cat/0002.png
    root/dog/a.jpeg
    ...

- Classes are the sub-folders of ``root`` sorted by name; class ``i`` of that sorted list is label
  ``i`` (so a folder of ImageNet's 1,000 ``n0...`` wnid folders gives the usual 0..999 indices).
  Folders and files whose name starts with ``.`` are ignored (``.ipynb_checkpoints``, macOS
  ``._x.jpg`` resource forks); image files directly in ``root`` are ignored.
- Images are the files under a class folder (recursively) whose extension is one of
  ``extensions`` (case-insensitive), sorted by their path relative to the class folder
  (``pipeline.data.listing``).
- Run folders are never read (``pipeline.data.listing``): a folder holding the pipeline's mark is
  left out with everything under it, a class folder holding only run folders is no class, and each
  one left out is listed in ``describe()`` (``excluded_run_folders``) and the report. A ``root``
  inside a run folder is refused.
- Each image is decoded (``pipeline.data.decode.decode_image``) like torchvision's ``ImageFolder``
  loader followed by ``Resize`` and ``CenterCrop`` on a PIL image: ``Image.open(path).convert(mode)``;
  ``resize`` (int: the shorter side becomes ``resize`` and the longer ``int(resize * long / short)``;
  [h, w]: exactly that size) with Pillow's bilinear filter (which widens its support when shrinking,
  i.e. antialiases, as torchvision does for PIL images); then a center crop of ``crop`` with the
  offsets ``top = int(round((H - h) / 2.0))``, ``left = int(round((W - w) / 2.0))``. EXIF orientation
  is not applied (torchvision does not either).
- Bounded decoding (``pipeline.data.decode``): no image the decoder holds, as decoded, in the
  resize's first pass or after the resize, may have more than ``max_pixels`` pixels (default
  89,478,485, Pillow's ``Image.MAX_IMAGE_PIXELS``): the size an int ``resize`` gives follows the
  aspect ratio, so a 2,000,000 x 1 image with ``resize: 36`` (72,000,000 x 36) is refused, from its
  header, in the first pass, before any pixel of the folder is decoded (with ``skip_corrupt: true``
  it is left out and listed, like an unreadable file). A ``resize: [h, w]`` or ``crop`` over the
  limit, or an int ``resize`` whose square is, is refused when the source is built.
- 16-bit images become 8-bit by their high byte, ``v >> 8`` (``floor(v / 256)``), before the
  conversion to ``mode``: the rule Pillow itself applies to 16-bit colour PNGs (it reads them as
  RGB of the high bytes, as libpng's ``png_set_strip_16`` and OpenCV's ``imread`` do), so a 16-bit
  greyscale file (Pillow mode ``I;16``, or ``I`` for a PNG in older Pillow) and a 16-bit colour file
  convert alike. Pillow's own ``convert`` would clip greyscale values above 255 to 255 (a mostly
  white image, without a word). Images with 32-bit integer or float pixels (mode ``I`` from a
  TIFF, ``F``) have no stated range and are refused.
- The result is ONE uint8 NHWC array ``(N, H, W, C)`` (C = 3 for ``mode: RGB``, 1 for ``mode: L``),
  allocated once and owned by the source, read-only afterwards. Decoding is the one place an image
  source necessarily allocates: compressed files cannot be viewed as pixels. Everything after it
  is unchanged: batches are slices (views) of this array, the stages are views, and the quantizer
  boundary makes the one copy per batch. Pillow allocates temporaries per image while decoding,
  none of more than ``max_pixels`` pixels.
- The images are stored in a seeded random order (``shuffle: true``, ``seed: 0``, like the digits
  source), so that the runner's contiguous train/calib/eval splits are random samples of every
  class rather than whole classes. ``source.files`` lists the file behind every row.

Two passes: the first reads only each file's header (size) so that a folder of mixed sizes, or a
file over ``max_pixels``, fails before any pixel is decoded; the second decodes, converts, resizes,
crops and writes each image into its row of the array (a ``tqdm`` progress bar on stderr when it is
a terminal). A truncated
file fails in the second pass, when Pillow runs out of data ("image file is truncated"), unless
something in the process has set ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES = True``: then Pillow fills
the missing part silently, and this source cannot tell.
"""
import logging
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import ConfigError, DataError
from .base import check_source_keys
from .decode import (MAX_PIXELS, MODES, SIXTEEN_BIT_RULE, ImageTooLarge, Size, check_held, count, decode_errors,
                     decode_image, output_size, pil, read_size)
from .listing import scan_folder
from .memory import ArraySource
from .readers import refuse_run_folder

log = logging.getLogger("pipeline")

DEFAULT_EXTENSIONS = (".bmp", ".jpeg", ".jpg", ".png")  # sorted, like the ones a config gives


class ImageFolderSource(ArraySource):
    """An ``ArraySource`` of kind ``image_folder``: the decoded images plus what the folder held.

    Attributes (besides ``ArraySource``'s; ``images`` is the owned read-only uint8 NHWC array):
        root: absolute path of the folder.
        classes: class names, label ``i`` is ``classes[i]``.
        files: path (relative to ``root``) of the file behind each row of ``images``.
        skipped: ``[(relative path, Pillow's message)]`` of the unreadable files (and those over
            ``max_pixels``) left out, sorted by path (only with ``skip_corrupt: true``).
        excluded: the run folders under ``root`` left out (relative paths, sorted).
        settings: the resolved options (resize, crop, mode, extensions, ...).
        decode_seconds: wall time of both passes.
    """

    def __init__(self, images: np.ndarray, labels: np.ndarray, root: str, classes: List[str], files: List[str],
                 skipped: List[Tuple[str, str]], settings: Dict[str, Any], decode_seconds: float,
                 excluded: List[str]) -> None:
        note = "decoded with Pillow into one owned uint8 NHWC array"
        if skipped:
            note += "; %d unreadable file(s) skipped (skip_corrupt)" % len(skipped)
        super().__init__("image_folder", images, labels, "NHWC", path=root, note=note, color=settings["mode"])
        self.root, self.classes, self.files, self.skipped = root, classes, files, sorted(skipped)
        self.settings, self.decode_seconds, self.excluded = settings, decode_seconds, list(excluded)

    def describe(self) -> Dict[str, Any]:
        """``ArraySource.describe()`` plus ``classes``, ``class_counts`` (images per class after
        skipping), ``settings``, ``decode_seconds``, ``skipped`` (count), ``skipped_files``
        (``[{"file": relative path, "error": message}]``), ``bit_depth`` (how 16-bit images
        become 8-bit, ``SIXTEEN_BIT_RULE``) and ``excluded_run_folders`` for the report."""
        out = super().describe()
        counts = np.bincount(self.labels, minlength=len(self.classes))
        out.update({
            "classes": list(self.classes),
            "class_counts": {c: int(n) for c, n in zip(self.classes, counts)},
            "settings": dict(self.settings),
            "decode_seconds": round(self.decode_seconds, 3),
            "skipped": len(self.skipped),
            "skipped_files": [{"file": f, "error": e} for f, e in self.skipped],
            "bit_depth": SIXTEEN_BIT_RULE,
            "excluded_run_folders": list(self.excluded),
        })
        return out


# ----------------------------------------------------------------------------- options

def _size_option(value: Any, key: str) -> Optional[Any]:
    """None, an int >= 1, or [h, w] of ints >= 1 (returned as a tuple)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
        return (int(value[0]), int(value[1]))
    raise ConfigError("data.source.%s: expected an int >= 1 or [height, width] of ints >= 1, got %r" % (key, value))


def _bool_option(spec: Dict[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError("data.source.%s: expected true or false, got %r" % (key, value))
    return value


def _extensions(value: Any) -> Tuple[str, ...]:
    if value is None:
        return DEFAULT_EXTENSIONS
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) and v.strip(".") for v in value):
        raise ConfigError("data.source.extensions: expected a list of file extensions such as [.jpg, .png], got %r"
                          % (value,))
    return tuple(sorted(set("." + v.lower().lstrip(".") for v in value)))


def _max_pixels(spec: Dict[str, Any], resize: Any, crop: Any) -> int:
    """``max_pixels`` (default ``MAX_PIXELS``) checked, with the sizes the config fixes against it."""
    limit = spec.get("max_pixels", MAX_PIXELS)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError("data.source.max_pixels: expected an int >= 1 (the most pixels an image may have at any "
                          "step of decoding; default %s), got %r" % (count(MAX_PIXELS), limit))
    pillow = pil().MAX_IMAGE_PIXELS
    if pillow is not None and limit > 2 * pillow:
        raise ConfigError("data.source.max_pixels: %s is more than Pillow opens in this process (it refuses images "
                          "over PIL.Image.MAX_IMAGE_PIXELS x 2 = %s as decompression bombs); set at most %s, or raise "
                          "PIL.Image.MAX_IMAGE_PIXELS from Python first" % (count(limit), count(2 * pillow),
                                                                           count(2 * pillow)))
    for key, value in (("resize", resize), ("crop", crop)):
        if isinstance(value, tuple) and value[0] * value[1] > limit:
            raise ConfigError("data.source.%s: %s is %s pixels, more than data.source.max_pixels = %s: every image "
                              "would be refused; choose a smaller size or raise max_pixels"
                              % (key, list(value), count(value[0] * value[1]), count(limit)))
    if isinstance(resize, int) and resize * resize > limit:
        raise ConfigError("data.source.resize: %d makes even a square image %s pixels, more than "
                          "data.source.max_pixels = %s: every image would be refused; choose a smaller resize or raise "
                          "max_pixels" % (resize, count(resize * resize), count(limit)))
    return limit


def parse_options(spec: Dict[str, Any], base_dir: str) -> Dict[str, Any]:
    """Check ``spec`` and return the resolved options: ``root`` (absolute), ``resize`` (None, int or
    (h, w)), ``crop`` (None or (h, w)), ``mode``, ``extensions`` (lower-case, with the dot),
    ``skip_corrupt``, ``limit_per_class`` (None or int >= 1), ``shuffle``, ``seed``, ``max_pixels``.

    Raises:
        ConfigError: an unknown or missing key, a bad value, a ``root`` that is not a folder or lies
            inside a run folder, a ``resize``/``crop`` over ``max_pixels``.
    """
    check_source_keys(spec, "image_folder")
    root = spec["root"]
    if not isinstance(root, str) or not root:
        raise ConfigError("data.source.root: expected a folder path, got %r" % (root,))
    root = root if os.path.isabs(root) else os.path.normpath(os.path.join(base_dir, root))
    if not os.path.isdir(root):
        what = "is a file, not a folder" if os.path.exists(root) else "does not exist"
        raise ConfigError("data.source.root: %s %s; expected a folder of class folders (root/<class>/<image>). "
                          "Relative paths resolve against the config file's folder; scripts/make_sample_images.py "
                          "--out DIR writes a sample folder" % (root, what))
    refuse_run_folder(root, "data.source.root")
    crop = _size_option(spec.get("crop"), "crop")
    if isinstance(crop, int):
        crop = (crop, crop)
    mode = spec.get("mode", "RGB")
    if mode not in MODES:
        raise ConfigError("data.source.mode: expected one of %s, got %r" % (", ".join(sorted(MODES)), mode))
    limit = spec.get("limit_per_class")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError("data.source.limit_per_class: expected null or an int >= 1, got %r" % (limit,))
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("data.source.seed: expected an int, got %r" % (seed,))
    resize = _size_option(spec.get("resize"), "resize")
    return {"root": root, "resize": resize, "crop": crop, "mode": mode,
            "extensions": _extensions(spec.get("extensions")), "skip_corrupt": _bool_option(spec, "skip_corrupt", False), "limit_per_class": limit,
            "shuffle": _bool_option(spec, "shuffle", True), "seed": seed,
            "max_pixels": _max_pixels(spec, resize, crop)}


def _progress(iterable: Any, total: int) -> Any:
    from tqdm import tqdm
    disable = not log.isEnabledFor(logging.INFO) or not sys.stderr.isatty()
    return tqdm(iterable, desc="decode", total=total, unit="image", leave=False, disable=disable)


def _mixed_sizes_error(root: str, sizes: Dict[Size, List[str]], resize: Any, crop: Any) -> DataError:
    common = sorted(sizes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    listed = ", ".join("%dx%d (%d file(s), e.g. %s)" % (s[0], s[1], len(fs), fs[0]) for s, fs in common[:6])
    more = "" if len(common) <= 6 else " and %d more sizes" % (len(common) - 6)
    now = ("with resize=%s and no crop" % (resize,)) if resize is not None else "with no resize and no crop"
    return DataError("image folder %s: the images have %d different sizes (HxW) %s: %s%s. One array needs one "
                     "size: set data.source.crop (e.g. crop: 224 with resize: 256) or resize: [height, width]"
                     % (root, len(common), now, listed, more))


def open_image_folder(spec: Dict[str, Any], base_dir: str) -> ImageFolderSource:
    """An ImageNet-style class folder decoded into one owned, read-only uint8 NHWC array (see the
    module docstring for the folder layout, the decoding and the order).

    Spec keys: ``root`` (required; relative to ``base_dir``, the config file's folder), ``resize``
    (int: shorter side, or [h, w]), ``crop`` (int or [h, w]), ``mode`` (RGB | L), ``extensions``
    (default .jpg .jpeg .png .bmp), ``skip_corrupt`` (false), ``limit_per_class`` (null: all),
    ``shuffle`` (true), ``seed`` (0), ``max_pixels`` (89,478,485: the most pixels of any image the
    decoder holds, ``pipeline.data.decode``).

    Returns:
        An ``ImageFolderSource``: ``images`` uint8 (N, H, W, C) NHWC, values 0..255, owned by the
        source; ``labels`` np.int64 (N,), class indices into ``classes``.

    Raises:
        ConfigError: bad options, ``root`` missing, not a folder or inside a run folder; a ``resize``
            or ``crop`` over ``max_pixels``.
        DataError: no class folders; a class folder without images; an unreadable, truncated or
            corrupt file (naming it; with ``skip_corrupt: true`` it is skipped, logged and listed in
            ``describe()`` instead); ``ImageTooLarge``: a file the decoder would hold beyond
            ``max_pixels``, found in the first pass from its header (skipped like an unreadable file
            with ``skip_corrupt: true``); a 32-bit integer or float image (never skipped); images of
            different sizes with no resize/crop that makes them equal (listing the sizes); an image
            smaller than ``crop``; nothing left to decode.
        PipelineError: Pillow is not installed.
    """
    opts = parse_options(spec, base_dir)
    root, resize, crop, mode, max_pixels = opts["root"], opts["resize"], opts["crop"], opts["mode"], opts["max_pixels"]
    errors = decode_errors(pil()) + (ImageTooLarge,)
    start = time.perf_counter()
    classes, files, excluded = scan_folder(root, opts["extensions"], opts["limit_per_class"])
    if opts["shuffle"]:
        files = [files[i] for i in np.random.default_rng(opts["seed"]).permutation(len(files))]
    skipped = []  # type: List[Tuple[str, str]]

    def unreadable(rel: str, exc: BaseException) -> None:
        message = "%s: %s" % (type(exc).__name__, exc)
        if not opts["skip_corrupt"] and isinstance(exc, ImageTooLarge):
            raise ImageTooLarge("%s. With data.source.skip_corrupt: true such files are left out and listed" % exc)
        if not opts["skip_corrupt"]:
            raise DataError("image file %s cannot be decoded (%s); expected a readable %s image. Remove or replace "
                            "the file, or set data.source.skip_corrupt: true to leave unreadable files out"
                            % (os.path.join(root, rel), message, "/".join(opts["extensions"])))
        log.warning("image_folder: skipping %s (%s)", os.path.join(root, rel), message)
        skipped.append((rel, message))

    readable = []  # type: List[Tuple[str, int]]
    sizes = {}  # type: Dict[Size, List[str]]
    for rel, label in files:  # pass 1: headers only, each checked against max_pixels
        try:
            size = read_size(os.path.join(root, rel), max_pixels)
            check_held(os.path.join(root, rel), size, resize, mode, max_pixels)
        except errors as exc:
            unreadable(rel, exc)
            continue
        readable.append((rel, label))
        sizes.setdefault(output_size(size, resize, crop), []).append(rel)
    if len(sizes) > 1:
        raise _mixed_sizes_error(root, sizes, resize, crop)
    if not readable:
        raise DataError("image folder %s: none of its %d image files could be read (all skipped); check the files"
                        % (root, len(files)))
    (h, w), = sizes
    images = np.empty((len(readable), h, w, MODES[mode]), dtype=np.uint8)  # the one allocation
    labels = np.empty(len(readable), dtype=np.int64)
    kept = []  # type: List[str]
    for rel, label in _progress(readable, len(readable)):  # pass 2: decode into the rows
        try:
            pixels = decode_image(os.path.join(root, rel), mode, resize, crop, max_pixels)
        except errors as exc:
            unreadable(rel, exc)
            continue
        images[len(kept)] = pixels
        labels[len(kept)] = label
        kept.append(rel)
    if not kept:
        raise DataError("image folder %s: none of its %d image files could be decoded (all skipped); check the "
                        "files" % (root, len(files)))
    if len(kept) < len(readable):
        images, labels = images[:len(kept)], labels[:len(kept)]  # views: the rows of truncated files stay unused
    images.flags.writeable = False
    settings = {"resize": list(resize) if isinstance(resize, tuple) else resize,
                "crop": None if crop is None else list(crop), "mode": mode, "extensions": list(opts["extensions"]),
                "skip_corrupt": opts["skip_corrupt"], "limit_per_class": opts["limit_per_class"],
                "shuffle": opts["shuffle"], "seed": opts["seed"], "max_pixels": max_pixels}
    source = ImageFolderSource(images, labels, root, classes, kept, skipped, settings, time.perf_counter() - start,
                               excluded)
    log.info("image_folder: %d images of %d classes from %s, %dx%dx%d in %.1f s%s", len(kept), len(classes), root,
             h, w, MODES[mode], source.decode_seconds,
             ", %d unreadable skipped" % len(skipped) if skipped else "")
    return source
