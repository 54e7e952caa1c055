"""Storage helpers, numpy views, fingerprints (pipeline/tensors.py) and the memory ledger (pipeline/ledger.py)."""
import json
import warnings

import numpy as np
import pytest
import torch

from pipeline import tensors
from pipeline.errors import DataError
from pipeline.ledger import Ledger
from pipeline.tensors import (as_torch_view, fingerprint_array, is_view_of, shares_memory, shares_storage,
                              storage_nbytes, storage_ptr)


def test_views_share_storage_and_copies_do_not():
    x = torch.arange(24, dtype=torch.float32).view(2, 3, 4)
    for v in (x.view(6, 4), x.permute(0, 2, 1), x.transpose(1, 2), x[:, 1:], x[1], x.narrow(2, 1, 2),
              x[:, :1].expand(2, 3, 4)):
        assert shares_storage(v, x) and is_view_of(v, x)
        assert storage_ptr(v) == storage_ptr(x)
    for c in (x.clone(), x.permute(0, 2, 1).contiguous(), x + 0):
        assert not shares_storage(c, x) and not is_view_of(c, x)
    assert x.contiguous() is x  # contiguous() copies only when the strides are not C-ordered
    assert storage_nbytes(x[1]) == 24 * 4  # a view's storage is its base's


def test_in_place_write_through_a_view_reaches_the_base_and_bumps_the_shared_version():
    x = torch.zeros(2, 3)
    v = x.t()
    before = x._version
    v[0, 0] = 5.0
    assert x[0, 0] == 5.0 and x._version == before + 1


def test_zero_size_tensors_share_only_their_own_storage():
    a = torch.zeros(0)
    assert shares_storage(a.view(0), a)
    assert not shares_storage(torch.zeros(0), a)


def test_as_torch_view_folds_negative_strides_and_reports_the_flipped_axes():
    a = np.arange(2 * 3 * 4 * 3, dtype=np.uint8).reshape(2, 3, 4, 3)
    t, flips = as_torch_view(a[..., ::-1])
    assert flips == (3,)
    assert np.shares_memory(t.numpy(), a)
    assert np.array_equal(t.numpy()[..., ::-1], a[..., ::-1])
    t2, flips2 = as_torch_view(a[:, ::-1, :, ::-1])
    assert flips2 == (1, 3)
    assert np.array_equal(t2.numpy()[:, ::-1, :, ::-1], a[:, ::-1, :, ::-1])
    t3, flips3 = as_torch_view(a[:1, :, :, ::-1][::-1])  # a flipped axis of length 1 is no flip
    assert flips3 == (3,)


def test_as_torch_view_accepts_read_only_and_memmap_arrays_without_a_warning(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    a.flags.writeable = False
    np.save(str(tmp_path / "a.npy"), a)
    mm = np.load(str(tmp_path / "a.npy"), mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for arr in (a, mm):
            t, flips = as_torch_view(arr)
            assert flips == () and np.shares_memory(t.numpy(), arr)
            assert torch.equal(t, torch.arange(12, dtype=torch.float32).view(3, 4))


def test_as_torch_view_rejects_dtypes_torch_cannot_view():
    with pytest.raises(DataError, match="dtype"):
        as_torch_view(np.zeros(3, dtype=">f4"))
    with pytest.raises(DataError, match="numpy array or a torch tensor"):
        as_torch_view([1, 2, 3])


def test_fingerprint_is_the_sha256_of_the_logical_bytes_whatever_the_strides(monkeypatch):
    import hashlib
    a = np.random.default_rng(0).integers(0, 256, size=(5, 4, 3, 2), dtype=np.uint8)
    flipped = a[..., ::-1]
    expected = hashlib.sha256(np.ascontiguousarray(flipped).tobytes()).hexdigest()
    assert fingerprint_array(flipped) == expected
    assert fingerprint_array(flipped.copy()) == expected
    assert fingerprint_array(torch.from_numpy(flipped.copy())) == expected
    monkeypatch.setattr(tensors, "_HASH_CHUNK_BYTES", 7)  # chunked along axis 0: same digest
    assert fingerprint_array(flipped) == expected
    b = a.copy()
    b[4, 3, 2, 1] ^= 1
    assert fingerprint_array(b) != fingerprint_array(a)
    assert fingerprint_array(torch.ones(3, dtype=torch.bfloat16)) == hashlib.sha256(
        torch.ones(3, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()).hexdigest()


def test_ledger_counters_and_summary():
    ledger = Ledger()
    x = torch.zeros(2, 4, 4, 3, dtype=torch.uint8)
    for b in range(3):
        v = x.permute(0, 3, 1, 2)
        ledger.record("layout", x, v, batch=b, stage_index=0)
        out = torch.empty(2, 3, 4, 4)
        ledger.record("quantizer_boundary", v, out, batch=b, bytes_fresh=0 if b else None, note="NCHW float32")
    example = out[:1].clone()
    ledger.record("compile_boundary", out, example)
    layout, boundary = ledger.stages()
    assert layout == {"stage": "layout", "stage_index": 0, "batches": 3, "views": 3, "copies": 0,
                      "bytes_allocated": 0, "bytes_fresh": 0, "recycled": 0, "deferred": False, "first_batch": 0,
                      "last_batch": 2, "note": ""}
    assert boundary["copies"] == 3 and boundary["views"] == 0 and boundary["bytes_allocated"] == 3 * 384
    assert boundary["bytes_fresh"] == 384 and boundary["recycled"] == 2 and boundary["note"] == "NCHW float32"
    assert ledger.run_level == [{"batch": None, "stage_index": None, "stage": "compile_boundary",
                                 "shares_storage": False, "bytes_allocated": 3 * 4 * 4 * 4,
                                 "bytes_fresh": 3 * 4 * 4 * 4, "data_ptr_in": out.data_ptr(),
                                 "data_ptr_out": example.data_ptr(), "deferred": False, "note": ""}]
    s = ledger.summary()
    assert s["batches"] == 3 and s["copies_per_batch"] == 1
    assert s["bytes_allocated_per_batch"] == 384
    assert s["bytes_allocated_total"] == 3 * 384 + 3 * 4 * 4 * 4
    assert s["bytes_fresh_total"] == 384 + 3 * 4 * 4 * 4
    assert s["buffers_recycled"] == 2
    assert s["copies_by_stage"] == {"quantizer_boundary": 3, "compile_boundary": 1}
    assert [r["stage"] for r in s["run_level"]] == ["compile_boundary"]
    assert s["stages"] == [layout, boundary]
    assert json.loads(ledger.to_json()) == s


def test_ledger_copies_per_batch_counts_every_copy_of_the_worst_batch():
    ledger = Ledger()
    x = torch.zeros(2, 3)
    ledger.record("a", x, x[:1], batch=0, stage_index=0)
    ledger.record("quantizer_boundary", x, torch.empty(2, 3), batch=0)
    ledger.record("a", x, x.clone(), batch=1, stage_index=0)  # a copy where a view belongs
    ledger.record("quantizer_boundary", x, torch.empty(2, 3), batch=1)
    s = ledger.summary()
    assert s["copies_per_batch"] == 2 and s["copies_by_stage"] == {"a": 1, "quantizer_boundary": 2}
    assert s["stages"][0]["views"] == 1 and s["stages"][0]["copies"] == 1 and s["bytes_allocated_per_batch"] == 48


def test_shares_memory_between_numpy_and_torch():
    a = np.zeros((3, 4), dtype=np.float32)
    assert shares_memory(torch.from_numpy(a)[1:], a)
    assert not shares_memory(torch.zeros(3, 4), a)
