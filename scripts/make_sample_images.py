#!/usr/bin/env python
"""Write a small ImageNet-style image folder from the photos that ship inside scikit-image.

``python scripts/make_sample_images.py --out DIR [--per-class 40] [--seed 0] [--force]``

For users without a data set at hand: five classes, one real photo each, bundled in the
scikit-image wheel (``skimage.data``; nothing is downloaded; all public domain or CC0, see
``CLASSES``). Each class gets ``--per-class`` images cut from its photo like torchvision's
``RandomResizedCrop``: a box of 30-100 % of the photo's area with an aspect ratio between 3/4 and
4/3 at a random place, flipped left-right with probability 1/2, then resized (Pillow bilinear) so
that its shorter side is a random length in 224..320 pixels. Every fifth image is saved as PNG, the
others as JPEG (quality 90), so the folder has mixed formats and mixed sizes, like real data::

    DIR/astronaut/astronaut_000.jpg ... DIR/tissue/tissue_039.jpg, DIR/SAMPLE_IMAGES.txt

The result is deterministic for a given ``--seed`` (same crops, same bytes with the same Pillow).
It is a smoke-test set, not a benchmark: the images of a class are views of ONE photo, so a model
tells the classes apart easily and eval accuracy near 1.0 only shows that the pipeline works.

The folder is built under a temporary name next to ``DIR`` and renamed into place when complete;
an existing ``DIR`` is replaced only with ``--force`` and only when it was written by this script.
Needs scikit-image and Pillow (``pip install -e '.[samples]'``).
"""
import argparse
import os
import shutil
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

# class name -> (skimage.data function, credit). All are files inside the scikit-image wheel.
CLASSES = {
    "astronaut": ("astronaut", "Eileen Collins, NASA; public domain"),
    "cat": ("chelsea", "Chelsea the cat, Stefan van der Walt; CC0"),
    "coffee": ("coffee", "coffee cup, Rachel Michetti (Pikolo Espresso Bar); CC0"),
    "rocket": ("rocket", "Falcon 9 launch of DSCOVR, SpaceX; public domain"),
    "tissue": ("immunohistochemistry", "IHC staining, CMMI; no known copyright restrictions"),
}
MARKER = "SAMPLE_IMAGES.txt"
AREA = (0.3, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)
SHORT_SIDE = (224, 320)
PNG_EVERY = 5


def load_photo(function: str) -> np.ndarray:
    """The bundled photo ``skimage.data.<function>()`` as uint8 RGB (H, W, 3)."""
    try:
        import skimage.data
    except ImportError:
        raise SystemExit("error: scikit-image is not installed; pip install scikit-image (or -e '.[samples]')")
    photo = getattr(skimage.data, function)()
    if photo.dtype != np.uint8 or photo.ndim != 3 or photo.shape[2] != 3:
        raise SystemExit("error: skimage.data.%s() gave %s %s, expected uint8 (H, W, 3)"
                         % (function, photo.dtype, photo.shape))
    return photo


def random_box(rng: np.random.Generator, height: int, width: int) -> Tuple[int, int, int, int]:
    """(left, top, right, bottom) of a box with ``AREA`` of the photo and aspect ratio in ``RATIO``
    (log-uniform), as torchvision's RandomResizedCrop draws it; the whole photo after 10 misses."""
    for _ in range(10):
        area = height * width * rng.uniform(*AREA)
        ratio = float(np.exp(rng.uniform(np.log(RATIO[0]), np.log(RATIO[1]))))
        w = int(round(np.sqrt(area * ratio)))
        h = int(round(np.sqrt(area / ratio)))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return left, top, left + w, top + h
    return 0, 0, width, height


def make_sample_images(out: str, per_class: int = 40, seed: int = 0, force: bool = False) -> Dict[str, List[str]]:
    """Write the sample folder to ``out``; returns {class: [relative file paths]}.

    Raises:
        SystemExit: scikit-image missing, ``per_class`` < 1, or ``out`` exists and is not this
            script's folder (or ``force`` is not set).
    """
    from PIL import Image
    from pipeline.fileio import write_text
    if per_class < 1:
        raise SystemExit("error: --per-class must be >= 1, got %d" % per_class)
    out = os.path.abspath(out)
    if os.path.exists(out) and not (force and os.path.isfile(os.path.join(out, MARKER))):
        raise SystemExit("error: %s already exists; choose another --out, or pass --force to replace a folder this "
                         "script wrote earlier (one holding %s)" % (out, MARKER))
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(out) + ".", suffix=".partial", dir=parent)
    bilinear = getattr(Image, "Resampling", Image).BILINEAR
    flip = getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT
    written = {}  # type: Dict[str, List[str]]
    try:
        rng = np.random.default_rng(seed)
        for name, (function, _) in CLASSES.items():
            photo = Image.fromarray(load_photo(function))
            os.makedirs(os.path.join(tmp, name))
            written[name] = []
            for i in range(per_class):
                im = photo.crop(random_box(rng, photo.height, photo.width))
                if rng.uniform() < 0.5:
                    im = im.transpose(flip)
                short = int(rng.integers(SHORT_SIDE[0], SHORT_SIDE[1] + 1))
                scale = short / min(im.width, im.height)
                im = im.resize((max(1, int(round(im.width * scale))), max(1, int(round(im.height * scale)))),
                               resample=bilinear)
                rel = os.path.join(name, "%s_%03d.%s" % (name, i, "png" if i % PNG_EVERY == PNG_EVERY - 1 else "jpg"))
                if rel.endswith(".png"):
                    im.save(os.path.join(tmp, rel), format="PNG")
                else:
                    im.save(os.path.join(tmp, rel), format="JPEG", quality=90)
                written[name].append(rel)
        lines = ["Sample image folder written by scripts/make_sample_images.py --per-class %d --seed %d"
                 % (per_class, seed),
                 "from photos bundled in scikit-image (skimage.data), one photo per class:", ""]
        lines += ["  %-10s skimage.data.%s(): %s" % (n, f, credit) for n, (f, credit) in CLASSES.items()]
        lines += ["", "Each image is a random crop (30-100 % of the area), maybe flipped, resized to a shorter side",
                  "of 224..320 px. A smoke-test set, not a benchmark: a class is views of one photo."]
        write_text(os.path.join(tmp, MARKER), "\n".join(lines) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; give the folder the usual permissions
        if os.path.exists(out):
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    return written


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Write an ImageNet-style sample folder (out/<class>/<image>) from "
                                                 "scikit-image's bundled photos; no download.")
    parser.add_argument("--out", required=True, help="folder to create, e.g. data/sample_images")
    parser.add_argument("--per-class", type=int, default=40, help="images per class (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the crops and flips (default 0)")
    parser.add_argument("--force", action="store_true", help="replace an existing folder written by this script")
    args = parser.parse_args(argv)
    written = make_sample_images(args.out, args.per_class, args.seed, args.force)
    total = sum(len(v) for v in written.values())
    print("wrote %d images in %d classes (%s) to %s"
          % (total, len(written), ", ".join(written), os.path.abspath(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
