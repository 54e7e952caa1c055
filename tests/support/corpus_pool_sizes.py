"""Adaptive average pools whose example input (``input_args``) has another size than every forward
(tests/fidelity/test_pool_sizes.py against tests/data/pool_sizes_real/): nndct decides the pool's DPU
factor, and whether its output size divides its input's, on every forward
(docs/arithmetic.md#adaptive-average-pool-that-does-not-divide), so the example's size changes nothing.

The recipe (``phase``): the seeded model (``corpus_models.seeded_model``), the example a batch of 1 of
the example size (seed 9); calibration: forwards of seeds 1 and 2 (4 samples each, the data size),
``export_quant_config``; then, in a new process, test mode: a batch-1 forward of seed 3's first sample,
the 4 samples of seed 3, whose output is ``y_0.npy``. The 2x2 pools' references also hold a test phase on
data of the other case's size (``y_<hw>x<hw>.npy``: the same, on seed 3's 4 samples of that size).

``python tests/support/corpus_pool_sizes.py calib|test OUT_DIR [NAMES|all] [real]`` runs one phase with
the drop-in's ``torch_quantizer`` (``real``: pytorch_nndct's, where it is installed).
"""
import hashlib
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository, when run by path
from tests.support import corpus_models  # noqa: E402
from tests.support.corpus_calib_forms import PoolHead  # noqa: E402

# name -> (maker, example shape, data shape; without the batch dimension)
CORPUS = {
    # global pool: 48x48 forwards (factor 1.001953125), a 32x32 example (factor 1.0)
    "gap_48_example_32": (lambda: PoolHead((1, 1), "fc", functional=True), (3, 32, 32), (3, 48, 48)),
    # the copy-paste of a 224x224 example for 32x32 data, through nn.AdaptiveAvgPool2d
    "gap_32_example_224": (lambda: PoolHead((1, 1), "fc"), (3, 224, 224), (3, 32, 32)),
    # 2x2 of 33x33 forwards (uneven: unscaled, unquantized), a 32x32 example (it divides)
    "pool_2x2_33_example_32": (lambda: PoolHead((2, 2), "fc"), (3, 32, 32), (3, 33, 33)),
    # 2x2 of 32x32 forwards (kernel 16x16), a 33x33 example (uneven)
    "pool_2x2_32_example_33": (lambda: PoolHead((2, 2), "fc"), (3, 33, 33), (3, 32, 32)),
}


def make_model(name):
    """The seeded model (``corpus_models.seeded_model``)."""
    return corpus_models.seeded_model(CORPUS[name][0])


def make_inputs(name, n, seed):
    """A float32 batch of ``n`` of the data size (one input)."""
    return corpus_models.seeded_inputs([CORPUS[name][2]], n, seed)[0]


def make_example(name):
    """The example: a batch of 1 of the example size (seed 9)."""
    return corpus_models.seeded_inputs([CORPUS[name][1]], 1, 9)[0]


def seeded_sha256(name):
    """sha256 of the seeded weights (state_dict order, float32 bytes), the example and seeds 1-3's batches."""
    h = hashlib.sha256()
    for key, value in make_model(name).state_dict().items():
        h.update(key.encode())
        h.update(value.detach().float().contiguous().numpy().tobytes())
    for x in [make_example(name)] + [make_inputs(name, 4, seed) for seed in (1, 2, 3)]:
        h.update(x.numpy().tobytes())
    return h.hexdigest()


def phase(which, out_root, names=None, torch_quantizer=None):
    """Run the ``calib`` or ``test`` phase of the recipe (module docstring) for ``names`` (all by
    default); each model's files go to ``<out_root>/<name>``."""
    if torch_quantizer is None:
        from pipeline.apis import torch_quantizer
    for name in names or CORPUS:
        out = os.path.join(out_root, name)
        q = torch_quantizer(which, make_model(name), (make_example(name),), output_dir=out,
                            device=torch.device("cpu"))
        with torch.no_grad():
            if which == "calib":
                for seed in (1, 2):
                    q.quant_model(make_inputs(name, 4, seed))
                q.export_quant_config()
                continue
            x = make_inputs(name, 4, 3)
            q.quant_model(x[:1])
            np.save(os.path.join(out, "y_0.npy"), q.quant_model(x).numpy())


if __name__ == "__main__":
    torch.set_num_threads(1)
    argv = sys.argv[1:]
    quantizer = None
    if len(argv) > 3 and argv[3] == "real":
        from pytorch_nndct.apis import torch_quantizer as quantizer
    phase(argv[0], argv[1], argv[2].split(",") if len(argv) > 2 and argv[2] != "all" else None, quantizer)
