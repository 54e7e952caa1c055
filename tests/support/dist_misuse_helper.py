"""torchrun entry points for tests/distributed/test_dist_misuse.py: distributed runs started wrongly.

``config CONFIG WORK_DIR KEY=VALUE``: the runner's calib step on every rank, rank 1 with ``--set KEY=VALUE``
as well (ranks started with different configs); prints ``error (rank R): ...`` and exits 2 on an error.

``rank0-export OUT_DIR``: the drop-in API with the common mistake ``if rank == 0:
quantizer.export_quant_config()``; the script starts its process group itself, as users do (gloo's
default timeout: 30 minutes); rank 1 then waits in a sleep, as if busy elsewhere.
"""
import os
import sys
import time

import torch


def run_config(config, work_dir, override):
    import pipeline
    from pipeline.errors import PipelineError
    rank = int(os.environ["RANK"])
    overrides = ["run.work_dir=" + work_dir] + ([override] if rank == 1 else [])
    try:
        pipeline.run(config, steps=["calib"], overrides=overrides)
    except PipelineError as exc:
        print("error (rank %d): %s" % (rank, exc), file=sys.stderr, flush=True)
        sys.exit(2)
    print("rank %d done" % rank, flush=True)


def rank0_export(out_dir):
    import torch.distributed as dist

    from pipeline.apis import torch_quantizer
    from pipeline.models.loading import build_model
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = build_model("digits_cnn", None, {}).eval()
    g = torch.Generator().manual_seed(3)
    batches = [torch.randn(8, 1, 8, 8, generator=g) for _ in range(4)]
    q = torch_quantizer("calib", model, (batches[0],), output_dir=out_dir, device=torch.device("cpu"))
    for b in batches[rank::world]:
        q.quant_model(b)
    if rank == 0:
        start = time.monotonic()
        try:
            q.export_quant_config()
        except Exception as exc:
            print("error after %.1f s: %s: %s" % (time.monotonic() - start, type(exc).__name__, exc),
                  file=sys.stderr, flush=True)
            sys.exit(3)
        print("rank 0 exported", flush=True)
    else:
        time.sleep(90)  # busy elsewhere; never calls export_quant_config
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "config":
        run_config(*sys.argv[2:5])
    else:
        rank0_export(sys.argv[2])
