"""The memory ledger: per stage, how many batches came out as views and how many as copies, with the
bytes they needed, and the run-level rows (the compile boundary): the proof of "views only, one
owned copy per batch" that the report shows.
"""
import json
from typing import Any, Dict, List, Optional, Tuple

import torch

from .tensors import ArrayLike, data_ptr, shares_memory, storage_nbytes


class Ledger:
    """Memory ledger: per stage, counters over the batches; run-level rows (the compile boundary) in full.

    A stage's counters (``stages()``, also in ``summary()["stages"]``): stage (str), stage_index
    (int or None), batches (batches counted), views (of those, outputs on their input's storage),
    copies (outputs on new storage), bytes_allocated (total bytes of owned memory the outputs
    needed, 0 for views), bytes_fresh (of those, bytes newly taken from the allocator; a recycled
    boundary buffer gives 0), recycled (outputs written into a recycled owned buffer), deferred
    (bool: carried out inside the quantizer boundary's pass), first_batch / last_batch, note (str).

    Run-level row keys (``run_level``): batch (None), stage_index, stage, shares_storage, bytes_allocated,
    bytes_fresh, data_ptr_in / data_ptr_out (int addresses of the first elements), deferred, note.
    """

    def __init__(self) -> None:
        self._stages = {}  # type: Dict[Tuple[Optional[int], str], Dict[str, Any]]
        # batch -> copies, batch -> bytes allocated: dicts of ints only, which the garbage collector does
        # not track (a list per batch made every add cost ~4 us of collections in a process holding torch)
        self._batch_copies = {}  # type: Dict[int, int]
        self._batch_bytes = {}  # type: Dict[int, int]
        self.run_level = []  # type: List[Dict[str, Any]]

    def record(self, stage: str, inp: ArrayLike, out: ArrayLike, batch: Optional[int] = None,
               stage_index: Optional[int] = None, bytes_allocated: Optional[int] = None,
               bytes_fresh: Optional[int] = None, deferred: bool = False, note: str = "") -> None:
        """Count ``inp -> out``. ``bytes_allocated`` defaults to 0 when ``out`` shares ``inp``'s
        memory, else to the size of ``out``'s storage; ``bytes_fresh`` defaults to ``bytes_allocated``."""
        shared = shares_memory(out, inp)
        if bytes_allocated is None:
            bytes_allocated = 0 if shared else (
                storage_nbytes(out) if isinstance(out, torch.Tensor) else int(out.nbytes))
        self.add(stage, shared, bytes_allocated, data_ptr(inp), data_ptr(out), batch=batch, stage_index=stage_index,
                 bytes_fresh=bytes_fresh, deferred=deferred, note=note)

    def add(self, stage: str, shares_storage: bool, bytes_allocated: int, data_ptr_in: Optional[int],
            data_ptr_out: Optional[int], batch: Optional[int] = None, stage_index: Optional[int] = None,
            bytes_fresh: Optional[int] = None, deferred: bool = False, note: str = "") -> None:
        """Count one output given its facts (``batch`` None: a run-level row, kept in full)."""
        fresh = bytes_allocated if bytes_fresh is None else bytes_fresh
        if batch is None:
            self.run_level.append({
                "batch": None, "stage_index": stage_index, "stage": stage, "shares_storage": bool(shares_storage),
                "bytes_allocated": int(bytes_allocated), "bytes_fresh": int(fresh), "data_ptr_in": data_ptr_in,
                "data_ptr_out": data_ptr_out, "deferred": bool(deferred), "note": note})
            return
        key = (stage_index, stage)
        c = self._stages.get(key)
        if c is None:
            c = self._stages[key] = {"stage": stage, "stage_index": stage_index, "batches": 0, "views": 0,
                                     "copies": 0, "bytes_allocated": 0, "bytes_fresh": 0, "recycled": 0,
                                     "deferred": bool(deferred), "first_batch": batch, "last_batch": batch,
                                     "note": note}
        c["batches"] += 1
        c["last_batch"] = batch
        c["bytes_allocated"] += bytes_allocated
        c["bytes_fresh"] += fresh
        self._batch_bytes[batch] = self._batch_bytes.get(batch, 0) + bytes_allocated
        copies = self._batch_copies.setdefault(batch, 0)
        if shares_storage:
            c["views"] += 1
        else:
            c["copies"] += 1
            self._batch_copies[batch] = copies + 1
            if bytes_allocated and not fresh:
                c["recycled"] += 1

    def stages(self) -> List[Dict[str, Any]]:
        """Per-stage counters in the order the stages were first seen (copies of the internal dicts)."""
        return [dict(c) for c in self._stages.values()]

    def summary(self) -> Dict[str, Any]:
        """Per-run totals (plain JSON).

        Keys: ``batches`` (distinct batch indices), ``copies_per_batch`` (int: the most outputs on new
        storage any one batch needed; 1 means only the quantizer boundary copied), ``bytes_allocated_per_batch``
        (the most bytes any batch needed), ``bytes_allocated_total``, ``bytes_fresh_total``,
        ``buffers_recycled`` (boundary outputs written into a recycled owned buffer), ``copies_by_stage``
        (stage -> outputs on new storage), ``stages`` (the per-stage counters), ``run_level`` (rows
        with batch None, e.g. the compile boundary).
        """
        stages = self.stages()
        by_stage = {}  # type: Dict[str, int]
        for c in stages:
            if c["copies"]:
                by_stage[c["stage"]] = by_stage.get(c["stage"], 0) + c["copies"]
        for row in self.run_level:
            if not row["shares_storage"]:
                by_stage[row["stage"]] = by_stage.get(row["stage"], 0) + 1
        return {
            "batches": len(self._batch_bytes),
            "copies_per_batch": max(self._batch_copies.values(), default=0),
            "bytes_allocated_per_batch": max(self._batch_bytes.values(), default=0),
            "bytes_allocated_total": sum(c["bytes_allocated"] for c in stages)
            + sum(r["bytes_allocated"] for r in self.run_level),
            "bytes_fresh_total": sum(c["bytes_fresh"] for c in stages) + sum(r["bytes_fresh"] for r in self.run_level),
            "buffers_recycled": sum(c["recycled"] for c in stages),
            "copies_by_stage": by_stage,
            "stages": stages,
            "run_level": [dict(r) for r in self.run_level],
        }

    def to_json(self) -> str:
        """``summary()`` as a JSON string."""
        return json.dumps(self.summary(), sort_keys=True)
