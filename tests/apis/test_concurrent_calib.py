"""Two drop-in calibrations exported into one ``output_dir`` at the same time leave the folder wholly one
or wholly the other, never a "complete" manifest over a mix of both (issue 25, "commit what you wrote").

Two processes (multiprocessing, spawn) each calibrate SmallNet with other weights, then export into the
shared folder again and again, released together by a barrier each round; after each round the parent
checks the folder against each process's own export into a private folder.
"""
import multiprocessing
import os
import threading
import warnings

import pytest
import torch

from tests.support import sha
from tests.support.small_net import small_batches, small_net

from pipeline.apis import torch_quantizer
from pipeline.errors import QuantizationError
from pipeline.fileio import read_json
from pipeline.quantizers import calib_commit
from pipeline.quantizers.calib_commit import MANIFEST_FILE, check_committed

ROUNDS = 25


def _exporter(seed, shared, private, barrier, rounds):
    """Calibrate SmallNet(seed) once; export into ``private`` (the reference), then ``rounds`` times into
    ``shared``, each round between two barrier waits (start together; let the parent check)."""
    torch.set_num_threads(1)
    batches = small_batches()
    q = torch_quantizer("calib", small_net(seed), (batches[0],), output_dir=private, device="cpu")
    for b in batches:
        q.quant_model(b)
    q.export_quant_config()
    q.output_dir = shared
    barrier.wait()
    try:
        for _ in range(rounds):
            barrier.wait()
            q.export_quant_config()
            barrier.wait()
    except threading.BrokenBarrierError:  # the parent stopped checking
        pass


def _digests(folder):
    return {name: sha(os.path.join(folder, name)) for name in sorted(os.listdir(folder))
            if not name.startswith(".") and name != MANIFEST_FILE}


@pytest.mark.slow
def test_two_processes_exporting_into_one_folder_never_leave_a_mix(tmp_path):
    shared = str(tmp_path / "shared")
    refs = [str(tmp_path / "a"), str(tmp_path / "b")]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3, timeout=120)
    procs = [ctx.Process(target=_exporter, args=(seed, shared, ref, barrier, ROUNDS))
             for seed, ref in zip((0, 5), refs)]
    for p in procs:
        p.start()
    mixes = []
    try:
        barrier.wait()  # both references written
        wanted = [_digests(ref) for ref in refs]
        assert wanted[0] != wanted[1] and set(wanted[0]) == set(wanted[1])
        for r in range(ROUNDS):
            barrier.wait()  # go
            barrier.wait()  # both exports returned
            try:
                check_committed(shared)  # complete, every listed file as committed
            except QuantizationError as exc:
                mixes.append((r, str(exc)))
                continue
            manifest = read_json(os.path.join(shared, MANIFEST_FILE))
            on_disk = _digests(shared)
            if on_disk not in wanted or manifest["files"] != on_disk:
                mixes.append((r, sorted(k for k in on_disk if on_disk[k] != wanted[0][k]),
                              sorted(k for k in on_disk if on_disk[k] != wanted[1][k])))
    finally:
        barrier.abort()  # a failed check must not leave the exporters waiting
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.terminate()
    assert not mixes, "rounds whose folder mixed both calibrations (round, files not A's, files not B's): %s" % mixes
    assert [p.exitcode for p in procs] == [0, 0]
    # and test mode takes the folder's calibration for the model it was made for, without a weights warning
    owner = 0 if _digests(shared) == wanted[0] else 1
    x = small_batches()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = torch_quantizer("test", small_net((0, 5)[owner]), (x,), output_dir=shared, device="cpu")
    with torch.no_grad():
        q.quant_model(x)


def test_the_manifest_records_the_bytes_written_not_what_is_on_disk(tmp_path, monkeypatch):
    """A file replaced between the write and the commit (another process's export, without the lock) is
    caught: the manifest holds the written bytes' sha256, so the folder is refused as mixed."""
    batches = small_batches()
    q = torch_quantizer("calib", small_net(), (batches[0],), output_dir=str(tmp_path), device="cpu")
    for b in batches:
        q.quant_model(b)
    original = calib_commit.commit

    def commit_after_a_foreign_write(out_dir, paths, *args, **kwargs):
        with open(os.path.join(out_dir, "quant_info.json"), "a") as f:
            f.write(" ")  # the other process's quant_info, as far as the bytes go
        return original(out_dir, paths, *args, **kwargs)

    monkeypatch.setattr(calib_commit, "commit", commit_after_a_foreign_write)
    q.export_quant_config()
    with pytest.raises(QuantizationError, match="quant_info.json is not the file the calibration wrote"):
        check_committed(str(tmp_path))
