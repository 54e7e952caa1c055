"""The deploy bundle: what goes to the board, with a manifest that lets a user check every file.

- ``spec``: ``preprocess.json``, the board-side preprocessing (resize and crop, mean, scale, channel
  order, layout, input fix_pos) and the class names;
- ``library``: what the Vitis AI Library does with it (preprocess_type, the kernel's mean and scale
  order, its int8 rounding, its label tables) and the model ``.prototxt``;
- ``xmodel_check``: the quantized xmodel read back and checked before the bundle carries it;
- ``bundle``: ``build_bundle``, every file read once, checked, and written as one unit.

A bundle made without the Vitis AI image never contains a compiled xmodel: it carries the compile
plan and the quantized ``<Model>_int.xmodel`` (its sha256 in SHA256SUMS and the manifest), and says
so in the manifest. docs/deploy.md describes the bundle on the board, with the library's sources.
"""
from .bundle import BOARD_MODELS, MANIFEST, PLAN_FILES, PREPROCESS, SUMS, build_bundle
from .library import PREPROCESS_TYPES, model_prototxt, words_text
from .spec import WORDS, image_steps, model_color, preprocess_spec
from .xmodel_check import check_quantized_xmodel

__all__ = ["BOARD_MODELS", "MANIFEST", "PLAN_FILES", "PREPROCESS", "SUMS", "WORDS", "PREPROCESS_TYPES",
           "build_bundle", "check_quantized_xmodel", "image_steps", "model_color", "model_prototxt",
           "preprocess_spec", "words_text"]
