"""The board-side preprocessing spec (``preprocess.json``): what was done to an image before the model
saw it, in the board's terms: the resize and crop, the channel order, mean and scale, the layout and
the input fix_pos, and the class names.

Board-side input arithmetic (docs/deploy.md#input-arithmetic): int8 = (pixel - mean) * scale *
2^fix_pos, with mean and std in source pixel units, so ``scale = 1 / std``.
"""
from typing import Any, Dict, List, Optional

from ..errors import ConfigError
from .library import library_section

WORDS = "words.txt"  # the class names, one per line: line i names output i (docs/deploy.md#class-names)
PILLOW_BILINEAR = "bilinear, Pillow's Image.resize (antialiased when it shrinks)"
ROUND_OFFSETS = "top = round((H - h) / 2), left = round((W - w) / 2), Python's round (halves to even)"


def model_color(source_color: Optional[str], indices: Optional[List[int]], channels: int) -> Optional[str]:
    """The channel order the model sees, in letters: ``"RGB"``, ``"BGR"``, ``"L"`` (gray, also when
    repeated to several channels), or another letter string for a selection (``"G"``); None when the
    source's own order (``source_color``: RGB, BGR, L or None) is unknown.

    ``indices``: source channel per model channel (the boundary's channel order), or None for the
    source's order; ``channels``: the model's input channels.
    """
    if source_color is None:
        return None
    letters = list(source_color)
    if indices is None:
        indices = list(range(channels)) if channels == len(letters) else [0] * channels
    seen = "".join(letters[i] for i in indices)
    return "L" if set(seen) == {"L"} else seen


PIXEL_UNITS = "source pixel units (0..255 for uint8 images)"


def units_warning(dtype: Optional[str], source_range: Optional[List[float]], mean: List[float],
                  std: List[float]) -> Optional[str]:
    """Why the prototxt's mean and scale do not fit the 0..255 pixels the Vitis AI Library feeds, or None.

    ``dtype``: the source's element type (``"float32"``, ``"uint8"``, ...; None: unknown); ``source_range``:
    ``[min, max]`` of the source values over every channel (the calib split's, ``steps/calib.json``), or None.
    Fires for a floating-point source whose values lie within -1..1 (ToTensor's 0..1, or -1..1): the
    mean and scale, in the source's units, would make every 0..255 pixel saturate on the board.
    """
    if not dtype or not str(dtype).startswith(("float", "bfloat")) or not source_range:
        return None
    low, high = float(source_range[0]), float(source_range[1])
    if max(abs(low), abs(high)) > 1.0:
        return None
    return ("the source is %s with values in %.4g .. %.4g (the calib split's), and preprocess.mean %s and std %s "
            "are in those units, but the Vitis AI Library feeds the model 0..255 pixels: with this prototxt's mean "
            "and scale every input code saturates on the board. If the source's values are pixels / 255 (as "
            "torchvision's ToTensor makes them), the library needs mean x 255 and scale / 255 "
            "(preprocess.json: vitis_ai_library.kernel_mean_for_0_255_pixels, kernel_scale_for_0_255_pixels); "
            "better, save the source as 0..255 pixels with preprocess.mean and std in pixel units and run again; "
            "or feed the DPU the source's units yourself (VART)"
            % (dtype, round(low, 4) + 0.0, round(high, 4) + 0.0, [float("%.6g" % m) for m in mean], [float("%.6g" % s) for s in std]))


def image_steps(image_size: Optional[List[int]], decode: Optional[Dict[str, Any]],
                box: Optional[List[int]], input_size: Optional[List[int]]) -> List[Dict[str, Any]]:
    """The geometric steps from an image to the model input, in order (each a dict with ``op``).

    Args:
        image_size: (H, W) of one image as the source gave it to the stages (after an image folder's
            resize and crop), or None when unknown.
        decode: an image folder's decode settings (``resize``: int for the shorter side or [h, w];
            ``crop``: [h, w] or None; ``mode``), or None for images read as stored.
        box: [top, left, height, width] of that image the stages keep (``stages.geometry.source_box``),
            or None when the stages do not keep one box (then the last step says so).
        input_size: (h, w) of the model input.
    """
    steps = []  # type: List[Dict[str, Any]]
    if decode is None:
        if image_size is not None:
            steps.append({"op": "as_stored", "size": list(image_size),
                          "note": "the source's images as stored: the pipeline did not resize them; bring board "
                                  "images to this size the way the data set's images were made"})
    else:
        steps.append({"op": "decode", "mode": decode.get("mode"), "library": "Pillow"})
        resize = decode.get("resize")
        if isinstance(resize, int):
            steps.append({"op": "resize", "shorter_side": resize, "interpolation": PILLOW_BILINEAR,
                          "rule": "the shorter side to %d, the longer to int(%d * long / short)" % (resize, resize)})
        elif resize is not None:
            steps.append({"op": "resize", "size": [int(v) for v in resize], "interpolation": PILLOW_BILINEAR,
                          "rule": "both sides to exactly this [height, width], whatever the aspect ratio"})
        if decode.get("crop") is not None:
            steps.append({"op": "center_crop", "size": [int(v) for v in decode["crop"]], "rule": ROUND_OFFSETS})
    if box is None:
        if image_size is not None and input_size is not None:
            steps.append({"op": "stages", "note": "the preprocessing stages do not keep one box of the image (they "
                                                  "reorder or fold rows and columns): repeat preprocess.stages"})
    elif image_size is not None and list(box) != [0, 0] + list(image_size):
        steps.append({"op": "crop", "top": int(box[0]), "left": int(box[1]), "size": [int(box[2]), int(box[3])],
                      "of": list(image_size), "rule": "rows top..top+h-1, columns left..left+w-1 (the stages' crop)"})
    return steps


def _classes(preprocess: Dict[str, Any]) -> Dict[str, Any]:
    names = preprocess.get("class_names")
    if names is None:
        return {"class_names": None, "class_names_file": None,
                "class_names_from": preprocess.get("class_names_from") or
                "none: the source names no classes; set data.source.class_names to a list or to a text file with "
                "one name per line (line i names output i)"}
    return {"class_names": list(names), "class_names_file": WORDS,
            "class_names_from": preprocess.get("class_names_from") or "the source"}


def preprocess_spec(preprocess: Dict[str, Any]) -> Dict[str, Any]:
    """The board-side preprocessing spec: what the quantizer boundary and the steps before it did, in
    the board's terms.

    Args:
        preprocess: the quantizer boundary's ``spec()`` (``pipeline.boundary.QuantizerBoundary``):
            ``mean`` and ``std`` (one float per model input channel, in source pixel units,
            normalization ``(x - mean) / std``; already checked where the boundary was made, so not
            again here), ``channel_order`` (list of source channel indices per model channel, or None
            for the source's order), ``layout`` (memory layout of the boundary's output,
            ``NCHW``/``channels_last``), optional ``dtype`` (not part of the spec: the board feeds
            int8); plus ``input_fix_pos`` (int from ``quant_info.json``'s ``nndct_input_0``, or
            None), ``input_shape`` (the batch-1 export input, NCHW, or None), and what the source
            says of itself: optional ``source_layout`` and ``source_color`` (RGB, BGR, L); optional
            geometry (``image_size``, ``decode``, ``box``: see ``image_steps``; ``stages``: the
            configured stages, listed as they are) and ``class_names`` (a list, or None) with
            ``class_names_from`` (where they came from, or why there are none); optional
            ``source_dtype`` and ``source_range`` (see :func:`units_warning`).

    Returns a JSON-serialisable dict with those values plus ``scale`` (``1/std``), ``channel_order``
    in letters (:func:`model_color`, or a sentence saying how to make it known), ``channel_indices``,
    ``dpu_layout`` ("NHWC": XIR tensors are NHWC, docs/targets.md#xir-is-nhwc), the int8 formula,
    ``rounding`` and the int8 range; ``input_size``, ``image_steps`` (the resize and crop, in order);
    the class names and their file; ``vitis_ai_library``: the prototxt's preprocess_type, its kernel
    mean and scale, and how the library's own preprocessing differs (``library.library_section``);
    for a float source in -1..1, ``units_warning`` and the kernel mean and scale for 0..255 pixels.

    Raises:
        ConfigError: missing key, a channel count of ``input_shape`` other than the number of mean
            values, or a non-integer fix_pos.
    """
    for key in ("mean", "std", "channel_order", "layout", "input_fix_pos", "input_shape"):
        if key not in preprocess:
            raise ConfigError("deploy: the preprocessing spec needs %r; got keys %s" % (key, sorted(preprocess)))
    mean, std = [float(v) for v in preprocess["mean"]], [float(v) for v in preprocess["std"]]
    shape = preprocess["input_shape"]
    if shape is not None and (len(shape) != 4 or int(shape[1]) != len(mean)):
        raise ConfigError("deploy: input_shape %s should be NCHW with %d channels (one per mean value)"
                          % (shape, len(mean)))
    fix_pos = preprocess["input_fix_pos"]
    if fix_pos is not None and int(fix_pos) != fix_pos:
        raise ConfigError("deploy: input_fix_pos must be an integer, got %r" % (fix_pos,))
    indices = preprocess["channel_order"]
    source_color = preprocess.get("source_color")
    color = model_color(source_color, indices, len(mean))
    input_size = None if shape is None else [int(shape[2]), int(shape[3])]
    image_size = preprocess.get("image_size")
    steps = image_steps(image_size, preprocess.get("decode"), preprocess.get("box"), input_size)
    spec = {
        "mean": mean,
        "std": std,
        "scale": [1.0 / s for s in std],
        "units": PIXEL_UNITS,
        "channel_order": color or "not known: the source does not say; set data.source.color to RGB or BGR",
        "source_channel_order": source_color,
        "channel_indices": list(range(len(mean))) if indices is None else [int(i) for i in indices],
        "layout": preprocess["layout"],
        "source_layout": preprocess.get("source_layout"),
        "input_shape": None if shape is None else [int(d) for d in shape],
        "dpu_layout": "NHWC",
        "input_fix_pos": None if fix_pos is None else int(fix_pos),
        "formula": "int8[c] = clamp(round((pixel[c] - mean[c]) * scale[c] * 2^input_fix_pos), -128, 127)",
        "rounding": "half_up (round to nearest, ties toward +inf, as the quantizer rounds its input)",
        "int8_range": [-128, 127],
        "input_size": input_size,
        "image_size": None if image_size is None else [int(v) for v in image_size],
        "image_steps": steps,
        "stages": list(preprocess.get("stages") or []),
    }
    spec.update(_classes(preprocess))
    spec["vitis_ai_library"] = library_section(spec, preprocess.get("decode"), preprocess.get("box"))
    warning = units_warning(preprocess.get("source_dtype"), preprocess.get("source_range"), mean, std)
    if warning is not None:  # said in preprocess.json and the prototxt, with the values for 0..255 pixels
        spec["units"] = "the source's own units (%s), NOT the 0..255 pixels the Vitis AI Library feeds: see " \
                        "units_warning" % preprocess.get("source_dtype")
        spec["units_warning"] = warning
        lib = spec["vitis_ai_library"]
        lib["kernel_mean_for_0_255_pixels"] = [float("%.9g" % (255.0 * m)) for m in lib["kernel_mean"]]
        lib["kernel_scale_for_0_255_pixels"] = [float("%.9g" % (s / 255.0)) for s in lib["kernel_scale"]]
    return spec
