"""A drop-in API script for tests/distributed/test_distributed.py: calibrate the seeded digits CNN on 5 generated
batches, each rank its round-robin shard when a process group is up (torchrun), one process otherwise."""
import sys

import torch

from pipeline import distributed
from pipeline.apis import torch_quantizer
from pipeline.models.loading import build_model


def main(out_dir: str) -> None:
    torch.manual_seed(0)
    model = build_model("digits_cnn", None, {}).eval()
    g = torch.Generator().manual_seed(3)
    batches = [torch.randn(8, 1, 8, 8, generator=g) for _ in range(5)]
    comm = distributed.init_from_env(30)
    mine = batches if comm is None else batches[comm.rank::comm.world]
    q = torch_quantizer("calib", model, (batches[0],), output_dir=out_dir, device=torch.device("cpu"))
    for b in mine:
        q.quant_model(b)
    sys.stdout.write("wrote %s\n" % q.export_quant_config())  # one write: the ranks print at the same moment
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
