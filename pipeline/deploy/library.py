"""What the Vitis AI Library does with the bundle, and the model prototxt written for it.

Facts from the library's source, 3.0 and 3.5 alike (docs/deploy.md, each with its file):

- ``ClassificationImp::run`` (``classification_imp.cpp``) hands an image of the model's input size to
  the DPU as it is; another size goes through ``classification_param.preprocess_type``:
  ``UNKNOWN_TYPE``/``CAFFE``/``RGB_PREPROCESS`` resize the whole image to the input size
  (``cv::resize``), ``VGG_PREPROCESS``/``RESNET50_TF2`` resize the shorter side to 256 and cut the
  center (offset ``(H - h) / 2`` rounded down), ``INCEPTION_PT`` the same with 299 (sides rounded up).
  The types VGG_PREPROCESS, INCEPTION_*, RGB_PREPROCESS, ... feed the image with ``setInputImageRGB``,
  the others with ``setInputImageBGR``.
- ``NormalizeInputDataRGB`` (``image_util.cpp``) takes ``mean[c]`` and ``scale[c]`` for channel ``c`` of
  the image it is given (BGR, as ``cv::imread`` reads it) and writes that channel to model channel
  ``2 - c``: for an RGB model the kernel lists mean and scale in B, G, R order (the VEK280 quickstart's
  resnet18_pt: mean 103.53, 116.28, 123.675).
- The int8 conversion truncates toward zero unless ``XLNX_ENABLE_ROUND_SETINPUT=1`` (then rounds half
  away from zero and clamps); the quantizer rounds its input half up.
- ``ClassificationResult::lookup`` names an index from tables built into the library (ImageNet's 1000
  classes unless ``label_type`` picks CIFAR10, FMNIST, ...): a model of its own classes names them
  with the bundle's ``words.txt`` (line i names output i), as the library's Python samples read theirs.
"""
from typing import Any, Dict, List, Optional

# name -> (enum value in dpu_model_param.proto, channel order the library feeds, what it does to an image)
PREPROCESS_TYPES = {
    "CAFFE": (1, "BGR", "resizes the whole image to the input size (cv::resize)"),
    "RGB_PREPROCESS": (9, "RGB", "resizes the whole image to the input size (cv::resize)"),
    "VGG_PREPROCESS": (2, "RGB", "resizes the shorter side to 256 (cv::resize) and cuts the input size out of the "
                                 "center, offset (H - h) / 2 rounded down"),
    "RESNET50_TF2": (5, "BGR", "resizes the shorter side to 256 (cv::resize) and cuts the input size out of the "
                               "center, offset (H - h) / 2 rounded down"),
    "INCEPTION_PT": (4, "RGB", "resizes the shorter side to 299, sides rounded up (cv::resize), and cuts the input "
                               "size out of the center, offset (H - h) / 2 rounded down"),
}
WHOLE = {"RGB": "RGB_PREPROCESS", "BGR": "CAFFE"}
SHORTER = {("RGB", 256): "VGG_PREPROCESS", ("BGR", 256): "RESNET50_TF2", ("RGB", 299): "INCEPTION_PT"}
ROUNDING = ("the library converts (pixel - mean) * scale * 2^fix_pos to int8 by truncating toward zero, without "
            "clamping, unless the board sets XLNX_ENABLE_ROUND_SETINPUT=1, which rounds half away from zero and clamps "
            "to [-128, 127]; the quantizer rounded this model's input half up (the two differ only at negative ties)")
INTERPOLATION = ("the pipeline resized with Pillow's bilinear filter (antialiased when it shrinks), the library "
                 "resizes with OpenCV's cv::resize (INTER_LINEAR): the pixels differ slightly")
OFFSETS = ("the library's crop offset (H - h) / 2 rounds down, the pipeline's rounds halves to even: one pixel "
           "apart where H - h is odd")


def _full(box: Optional[List[int]], size: Optional[List[int]]) -> bool:
    return box is not None and size is not None and list(box) == [0, 0] + list(size)


def geometry(spec: Dict[str, Any], decode: Optional[Dict[str, Any]], box: Optional[List[int]]) -> Any:
    """How the model's input was cut from an image, in the library's terms: ``"whole"`` (the image at
    the input size, as stored or resized to it whole), ``("shorter", S)`` (the shorter side resized to
    S, the center cut out), or None (anything else, or not known)."""
    size, want = spec.get("image_size"), spec.get("input_size")
    if size is None or want is None or box is None:
        return None
    resize = (decode or {}).get("resize")
    crop = (decode or {}).get("crop")
    if crop is None and _full(box, size) and list(size) == list(want) and (resize is None or not isinstance(resize, int)):
        return "whole"
    if isinstance(resize, int):
        h, w = int(box[2]), int(box[3])
        centered = [int(box[0]), int(box[1])] == [int(round((size[0] - h) / 2.0)), int(round((size[1] - w) / 2.0))]
        if [h, w] == list(want) and ((crop is not None and _full(box, size)) or (crop is None and centered)):
            return ("shorter", resize)
    return None


def library_section(spec: Dict[str, Any], decode: Optional[Dict[str, Any]], box: Optional[List[int]]) -> Dict[str, Any]:
    """preprocess.json's ``vitis_ai_library``: the prototxt's ``preprocess_type`` (None when no type fits
    this model's channels), whether the library then cuts the input as the calibration did, the kernel's
    mean and scale in the order the library reads them, and the notes a board application needs."""
    color = spec["channel_order"] if spec["channel_order"] in ("RGB", "BGR") else None
    geo = geometry(spec, decode, box)
    notes = [ROUNDING]
    if color is None:
        chosen, same = None, False
        notes.insert(0, "the library's image input (setInputImageBGR/setInputImageRGB) takes 3-channel BGR images; "
                        "this model takes %d channel(s) (%s): fill its int8 input tensor as preprocess.json's formula "
                        "says, e.g. with setInputDataArray" % (len(spec["mean"]), spec["channel_order"]))
    else:
        shorter = SHORTER.get((color, geo[1])) if isinstance(geo, tuple) else None
        chosen = WHOLE[color] if geo == "whole" else shorter or WHOLE[color]
        same = geo == "whole" or shorter is not None
        steps = [s["op"] for s in spec.get("image_steps", [])]
        if not same:
            size = spec.get("input_size") or ["H", "W"]
            how = ("this model's input was cut from its images as image_steps says, which no preprocess_type does: "
                   "resize and crop each image that way" if spec.get("image_size") is not None else
                   "how this model's input was cut from the calibration images is not known here: cut each image "
                   "the same way")
            notes.insert(0, "the library %s; %s and give Classification::run an image of exactly %sx%s (height x "
                            "width), which the library uses as it is" % (PREPROCESS_TYPES[chosen][2], how, size[0],
                                                                         size[1]))
        elif "resize" in steps:
            notes.insert(0, INTERPOLATION)
        if same and isinstance(geo, tuple):
            notes.insert(1, OFFSETS)
            if chosen == "INCEPTION_PT":
                notes.insert(2, "the library rounds the resized sides up, the pipeline rounded them down")
    rgb_path = chosen is not None and PREPROCESS_TYPES[chosen][1] == "RGB"
    mean, scale = list(spec["mean"]), list(spec["scale"])
    if rgb_path:  # NormalizeInputDataRGB: mean[c] belongs to channel c of the BGR image, written to model channel 2 - c
        mean, scale = mean[::-1], scale[::-1]
    if spec.get("class_names"):
        notes.append("the library's ClassificationResult::lookup() names an index from its own tables (ImageNet's 1000 "
                     "classes by default): name result indices with words.txt (line i names output i)")
    return {
        "preprocess_type": chosen,
        "same_geometry": same,
        "what_it_does": None if chosen is None else PREPROCESS_TYPES[chosen][2],
        "kernel_mean": mean,
        "kernel_scale": scale,
        "kernel_channel_order": "BGR (the image's order; the library hands the model RGB)" if rgb_path else
        (color or spec["channel_order"]),
        "notes": notes,
    }


def _num(x: float) -> str:
    return "%.9g" % float(x)


def model_prototxt(net_name: str, spec: Dict[str, Any], classification: Optional[Dict[str, Any]] = None) -> str:
    """Vitis AI Library model config text (docs/deploy.md#model-prototxt): ``model { name kernel { name
    mean... scale... } model_type classification_param { top_k test_accuracy preprocess_type } }``.

    ``mean`` and ``scale`` are in pixel units (see the module docstring), listed in the order the
    library reads them (``spec["vitis_ai_library"]``: the image's BGR order for an RGB model, else the
    model's input order); the library multiplies by ``2^input_fix_pos`` itself. ``classification``: None
    (no ``model_type``), or ``top_k`` (int >= 1) and optional ``accuracy`` (the measured quantized top-1,
    written as a comment); ``test_accuracy`` is the library's accuracy-test switch and stays false.
    """
    lib = spec.get("vitis_ai_library") or {"kernel_mean": spec["mean"], "kernel_scale": spec["scale"],
                                           "kernel_channel_order": spec["channel_order"], "preprocess_type": None}
    lines = [
        "# Vitis AI Library model config written by the pipeline (DpuModelParamList text format).",
        "# mean/scale: %s, model input channel order %s, listed in the order the library reads them: %s; "
        "int8 = (pixel - mean) * scale * 2^%s." % ("the source's units" if spec.get("units_warning") else "pixel units",
                                                   spec["channel_order"], lib["kernel_channel_order"],
                                                   spec["input_fix_pos"] if spec["input_fix_pos"] is not None
                                                   else "fix_pos"),
    ]
    if spec.get("units_warning"):
        lines.append("# WARNING: mean/scale below are in the source's units, not pixels: %s." % spec["units_warning"])
    if lib.get("preprocess_type") and not lib.get("same_geometry"):
        lines.append("# preprocess_type %s does not cut the input as the calibration did: see preprocess.json "
                     "(image_steps, vitis_ai_library)." % lib["preprocess_type"])
    elif lib.get("preprocess_type") is None and lib.get("notes"):
        lines.append("# no preprocess_type fits this model's input: see preprocess.json (vitis_ai_library).")
    if spec.get("class_names"):
        lines.append("# class names: words.txt, line i names output i.")
    if classification is not None and classification.get("accuracy") is not None:
        lines.append("# quantized top-1 accuracy measured by the test step: %.4f" % classification["accuracy"])
    lines += [
        "model {",
        "  name: \"%s\"" % net_name,
        "  kernel {",
        "    name: \"%s_0\"" % net_name,
    ]
    lines += ["    mean: %s" % _num(m) for m in lib["kernel_mean"]]
    lines += ["    scale: %s" % _num(s) for s in lib["kernel_scale"]]
    lines.append("  }")
    if classification is not None:
        lines += ["  model_type: CLASSIFICATION", "  classification_param {",
                  "    top_k: %d" % int(classification["top_k"]), "    test_accuracy: false"]
        if lib.get("preprocess_type"):
            lines.append("    preprocess_type: %s" % lib["preprocess_type"])
        lines.append("  }")
    lines += ["}", ""]
    return "\n".join(lines)


def words_text(names: List[str]) -> str:
    """``words.txt``: one class name per line, line i names output i."""
    return "".join(name + "\n" for name in names)
