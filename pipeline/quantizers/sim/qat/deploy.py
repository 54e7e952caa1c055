"""``to_deployable``'s files from a trained QAT model (docs/qat.md#to_deployable).

As the real ``QatProcessor.to_deployable`` (vai_q_pytorch 3.5 ``quantization/quant_aware_training.py``)
writes them:

- ``<out>/test/quant_info.json``: every fix position as the thresholds give it
  (``b - 1 - ceil(log_threshold)``), no adjustment;
- ``<out>/quant_info.json``: the same after the DPU constraint pass (``plan.adjust_fix_pos``: shift_cut
  and shift_bias ranges, hard-sigmoid/swish limits, the optional concat/pool alignment): what ships;
- ``<out>/deployable.pth``: the float model's state_dict with the trained weights, biases and BN
  state (the BN stays unfolded: the test-mode capture folds it, as the real one does);
- here also ``<out>/deployable_manifest.json``: the sha256 of the three, so that ``deployable_model``
  refuses a folder whose files come from different runs (the real one has no such check).

Written as one batch of atomic files (``pipeline.fileio.write_files``): a run that fails leaves the
folder as it was. Here, unlike the real one, a threshold or weight that is NaN or infinite is
refused (named) before anything is written.
"""
import hashlib
import io
import json
import os
from typing import Any, Dict, List, Tuple

import torch

from ....errors import QuantizationError
from ....fileio import sha256_file, write_files
from ...quant_info import make_quant_info, quant_info_bytes
from .trainable import QatModel

DEPLOYABLE_FILE = "deployable.pth"
MANIFEST_FILE = "deployable_manifest.json"
RAW_DIR = "test"


def check_finite(model: QatModel) -> None:
    """Raise QuantizationError naming the first parameter or buffer of ``model`` that holds NaN or Inf."""
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_floating_point() and not bool(torch.isfinite(t.detach()).all()):
            bad = int((~torch.isfinite(t.detach())).sum())
            raise QuantizationError(
                "QAT: %s holds %d NaN/Inf value(s) of %d; the training diverged (lower the learning rate, check the "
                "loss); nothing was written" % (name, bad, t.numel()))


def deployable_files(model: QatModel, float_model: torch.nn.Module,
                     output_dir: str) -> Tuple[Dict[str, Any], Dict[str, Any], List[Tuple[str, bytes]]]:
    """``(raw quant_info, adjusted quant_info, [(path, bytes)])`` of ``to_deployable`` (module docstring).

    Raises:
        QuantizationError: ``model`` after ``fuse_conv_bn()``, or holding NaN/Inf.
    """
    if model.conv_bn_fused:
        raise QuantizationError("to_deployable: the model went through fuse_conv_bn(), which the deployable model "
                                "cannot be made from (the real quantizer refuses it too); call to_deployable on the "
                                "trained model before fuse_conv_bn()")
    check_finite(model)
    session = model._shared.session
    md5 = session.graph.graph_md5()
    infos = []
    for adjusted in (False, True):
        param, output = model.fix_positions(adjusted)
        infos.append(make_quant_info(param, output, session.bitwidth, False, md5))
    buf = io.BytesIO()
    torch.save(model.float_state_dict(float_model), buf)
    items = [(os.path.join(output_dir, RAW_DIR, "quant_info.json"), quant_info_bytes(infos[0])),
             (os.path.join(output_dir, "quant_info.json"), quant_info_bytes(infos[1])),
             (os.path.join(output_dir, DEPLOYABLE_FILE), buf.getvalue())]
    manifest = {os.path.relpath(path, output_dir).replace(os.sep, "/"): hashlib.sha256(data).hexdigest()
                for path, data in items}
    items.append((os.path.join(output_dir, MANIFEST_FILE), (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()))
    return infos[0], infos[1], items


def check_manifest(folder: str) -> None:
    """Raise QuantizationError when ``folder/deployable_manifest.json`` exists and a file it lists is missing or
    holds other bytes (files of different ``to_deployable`` runs mixed in one folder). A folder without it (the
    real quantizer's) passes."""
    path = os.path.join(folder, MANIFEST_FILE)
    if not os.path.isfile(path):
        return
    with open(path, "r", encoding="utf-8") as f:
        manifest = json.load(f)
    for name, digest in sorted(manifest.items()):
        target = os.path.join(folder, *name.split("/"))
        if not os.path.isfile(target) or sha256_file(target) != digest:
            raise QuantizationError(
                "%s: %s is not the file to_deployable wrote with the others (%s lists another sha256, or it is "
                "missing): the folder mixes the results of different runs; run to_deployable into it again"
                % (folder, name, MANIFEST_FILE))


def write_deployable(model: QatModel, float_model: torch.nn.Module, output_dir: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Write ``to_deployable``'s files (module docstring) into ``output_dir`` (``write_files`` makes the
    folders); returns the raw and the adjusted quant_info.

    Raises:
        QuantizationError: see ``deployable_files``; StorageError: the folder cannot take the files.
    """
    raw, adjusted, items = deployable_files(model, float_model, output_dir)
    write_files(items)
    return raw, adjusted


def moved_positions(raw: Dict[str, Any], adjusted: Dict[str, Any]) -> List[str]:
    """``"key: raw -> shipped"`` for every fix position the constraint pass moved."""
    out = []
    for group in ("param", "output"):
        for key, entry in raw[group].items():
            a, b = entry[0][1], adjusted[group][key][0][1]
            if a != b:
                out.append("%s: %s -> %s" % (key, a, b))
    return out

