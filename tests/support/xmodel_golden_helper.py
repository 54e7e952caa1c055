"""Drives the drop-in API on the golden models as tests/data/golden_xmodel/README.md says the real
files were made, one process per mode (run as a script):

    python tests/support/xmodel_golden_helper.py calib OUT_ROOT
    python tests/support/xmodel_golden_helper.py test OUT_ROOT

``calib``: per case, ``torch_quantizer('calib', model, (first 4 calibration samples of each input,))``,
8 forwards of 4, ``export_quant_config()`` into ``OUT_ROOT/<set>/<model>/<config>``. ``test``: in a
fresh process, ``torch_quantizer('test', ...)`` with the same example, ONE forward of the first eval
sample alone (batch 1, the xmodel's shapes), ``export_xmodel(<folder>/xmodel)``; the forward's output
is saved as ``batch1_output_<i>.npy`` for the interpreter tests. Two threads, as the golden data.
"""
import importlib.util
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
NOCLE = {"include_cle": False, "include_bias_corr": False, "target_device": "DPU"}
CONFIGS = ("default", "nocle")


def _load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GM = _load_module("golden_models", os.path.join(DATA, "golden", "golden_models.py"))
GW = _load_module("golden_wide_models", os.path.join(DATA, "golden_wide", "golden_wide_models.py"))
WIDE_INDEX = json.load(open(os.path.join(DATA, "golden_wide", "index.json")))
CASES = [("golden", m, c) for m in GM.MODELS for c in CONFIGS] + \
        [("golden_wide", m, c) for m in GW.SETS["golden_wide"]["models"] for c in CONFIGS]


def model_and_data(set_name, name):
    """``(float model, [calib inputs], [eval inputs])`` of a golden case (one tensor per model input)."""
    if set_name == "golden":
        return GM.load_model(name), [GM.load_array(name, "calib_inputs.npy")], [GM.load_array(name, "eval_inputs.npy")]
    n = WIDE_INDEX[name]["default"]["n_inputs"]
    sfx = [""] if n == 1 else ["_%d" % i for i in range(n)]
    load = lambda base: [torch.from_numpy(np.load(os.path.join(DATA, set_name, name, base + s + ".npy"))) for s in sfx]
    model = GW.build(name, GW.SETS[set_name][name])
    model.load_state_dict(torch.load(os.path.join(DATA, set_name, name, "float_state_dict.pt"), weights_only=True))
    return model.eval(), load("calib_inputs"), load("eval_inputs")


def folder(root, set_name, name, config):
    return os.path.join(root, set_name, name, config)


def golden_file(set_name, name, config):
    base = os.path.join(DATA, "golden_xmodel", set_name, name, config, "xmodel")
    return os.path.join(base, [f for f in os.listdir(base) if f.endswith(".xmodel")][0])


def _quantizer(mode, set_name, name, config, out):
    from pipeline.apis import torch_quantizer
    model, calib, evals = model_and_data(set_name, name)
    cfg = None
    if config == "nocle":
        cfg = os.path.join(out, "nocle.json")
        with open(cfg, "w") as f:
            json.dump(NOCLE, f)
    q = torch_quantizer(mode, model, tuple(c[0:4].clone() for c in calib), output_dir=out,
                        device=torch.device("cpu"), quant_config_file=cfg)
    return q, calib, evals


def run(mode, root, cases=None, where=None, deploy_check=False):
    """Run ``mode`` on ``cases`` (default every golden case), each in ``where(root, set, model, config)``
    (default ``folder``). In test mode the xmodel goes to ``<folder>/xmodel`` and the batch-1 outputs are
    saved, or, with ``deploy_check``, to ``<folder>/export`` with the deploy-check dumps."""
    torch.set_num_threads(2)
    for set_name, name, config in CASES if cases is None else cases:
        out = (where or folder)(root, set_name, name, config)
        os.makedirs(out, exist_ok=True)
        q, calib, evals = _quantizer(mode, set_name, name, config, out)
        with torch.no_grad():
            if mode == "calib":
                for i in range(8):
                    q.quant_model(*[c[4 * i:4 * i + 4].clone() for c in calib])
            else:
                outputs = q.quant_model(*[e[:1].clone() for e in evals])
                for i, o in enumerate(() if deploy_check else outputs if isinstance(outputs, tuple) else (outputs,)):
                    np.save(os.path.join(out, "batch1_output_%d.npy" % i), o.numpy())
        if mode == "calib":
            q.export_quant_config()
        else:
            q.export_xmodel(os.path.join(out, "export" if deploy_check else "xmodel"), deploy_check=deploy_check)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
