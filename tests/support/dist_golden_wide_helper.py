"""A drop-in API script for tests/sim/test_sim_golden_wide.py: calibrate golden_wide models (8 batches
of 4, one tensor per input), each rank its round-robin shard when a process group is up (torchrun),
one process otherwise; writes OUT/<model>/quant_info.json (+ bias_corr.pth)."""
import os
import sys

import torch

from pipeline import distributed
from pipeline.apis import torch_quantizer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # run by path
from tests.sim import test_sim_golden_wide as gw  # noqa: E402


def main(out_root: str, names) -> None:
    torch.set_num_threads(2)
    comm = distributed.init_from_env(60)
    for name in names:
        k = gw.INDEX[name]["default"]["n_inputs"]
        calib = gw._load(name, "calib_inputs", k)
        batches = [[t[i:i + 4].clone() for t in calib] for i in range(0, 32, 4)]
        mine = batches if comm is None else batches[comm.rank::comm.world]
        q = torch_quantizer("calib", gw._model(name), tuple(t[:4].clone() for t in calib),
                            output_dir=os.path.join(out_root, name), device=torch.device("cpu"))
        for b in mine:
            q.quant_model(*b)
        q.export_quant_config()
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
