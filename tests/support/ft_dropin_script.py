"""A Vitis AI fast-finetune quantize script, as the official examples write it
(``example/mobilenetv2_fast_finetune.py`` of Vitis AI 3.5), with one line changed: the import.

    python tests/support/ft_dropin_script.py calib|test default|nocle small|big OUT_DIR

calib: ``fast_finetune(evaluate, (quant_model, ft_loader, loss_fn))``, the re-calibration forward on the
calibration loader, ``export_quant_config()``. test (a new process): ``load_ft_param()`` before the first
forward, then the eval and calibration inputs; their outputs are saved as ``OUT_DIR/test_outputs.npy``
and ``OUT_DIR/test_calib_outputs.npy``. Data: tests/data/golden_ft (the golden2 ``mobile`` model).
"""
import json
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from pipeline.apis import torch_quantizer  # was: from pytorch_nndct.apis import torch_quantizer

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "golden_ft")
sys.path.insert(0, HERE)
import golden2_models as gm  # noqa: E402


def evaluate(model, loader, loss_fn):
    model.eval()
    model = model.to(torch.device("cpu"))
    correct, total, losses = 0, 0, 0.0
    for images, labels in loader:
        out = model(images)
        losses += loss_fn(out, labels).item()
        correct += int((out.argmax(1) == labels).sum())
        total += int(labels.numel())
    return correct / total, losses


def main(phase, cfg, ftset, out):
    """Run one phase; returns the quantizer."""
    torch.set_num_threads(int(os.environ.get("PIPELINE_TEST_THREADS", 1)))  # tests.support.pinned_threads
    torch.manual_seed(0)
    model = gm.build("mobile", gm.SETS["golden2"]["mobile"])
    model.load_state_dict(torch.load(os.path.join(HERE, "model", "float_state_dict.pt")))
    model.eval()
    calib_x = torch.from_numpy(np.load(os.path.join(HERE, "model", "calib_inputs.npy")))
    eval_x = torch.from_numpy(np.load(os.path.join(HERE, "model", "eval_inputs.npy")))
    config = None
    if cfg == "nocle":
        config = os.path.join(out, "nocle.json")
        os.makedirs(out, exist_ok=True)
        with open(config, "w") as f:
            json.dump({"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}, f)
    quantizer = torch_quantizer(phase, model, (calib_x[:4].clone(),), output_dir=out, device=torch.device("cpu"),
                                quant_config_file=config)
    quant_model = quantizer.quant_model
    if phase == "calib":
        labels = torch.load(os.path.join(HERE, "mobile", "labels.pt"))
        if ftset == "big":
            ft_x = gm.make_images(256, (3, 32, 32), torch.Generator().manual_seed(4245), "smooth", "imagenet")
            ft_loader = DataLoader(TensorDataset(ft_x, labels["big"]), batch_size=4, shuffle=False)
        else:
            ft_loader = DataLoader(TensorDataset(calib_x, labels["calib"]), batch_size=4, shuffle=False)
        calib_loader = DataLoader(TensorDataset(calib_x, labels["calib"]), batch_size=4, shuffle=False)
        loss_fn = torch.nn.CrossEntropyLoss()
        quantizer.fast_finetune(evaluate, (quant_model, ft_loader, loss_fn))
        evaluate(quant_model, calib_loader, loss_fn)
        quantizer.export_quant_config()
    else:
        quantizer.load_ft_param()
        with torch.no_grad():
            np.save(os.path.join(out, "test_outputs.npy"), quant_model(eval_x.clone()).numpy())
            np.save(os.path.join(out, "test_calib_outputs.npy"), quant_model(calib_x.clone()).numpy())
    return quantizer


if __name__ == "__main__":
    main(*sys.argv[1:5])
