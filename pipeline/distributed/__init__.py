"""Calibration and evaluation over ``torch.distributed``: the process group, the shard rule and
collectives that fail with an error naming the rank.

Launch: ``torchrun --standalone --nproc_per_node N -m pipeline run CONFIG --steps calib,test``
(``--nnodes``/``--rdzv-endpoint`` across machines). ``torchrun`` sets ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``/``MASTER_PORT``; :func:`init_from_env` starts the default process group on them
(gloo on the CPU; the sim runs on the CPU, so gloo is used on GPU machines too).

The shard rule (every user of this module relies on it): batch ``i`` of a split (the batches one
process would see, in its order) belongs to rank ``i % world``; rank ``r``'s ``k``-th batch is
global batch ``k * world + r``. :meth:`Comm.interleave` puts per-rank lists back into global order,
so anything a step accumulates is reduced in batch order, as one process does, never in rank
order or by a floating-point all-reduce.

Failures: every collective runs under the process group's timeout (``run.distributed_timeout_s``).
A rank that raises posts its error in the rendezvous store before it exits; a rank whose
collective then fails raises :class:`DistributedError` naming that rank and its error, or, when a
rank died without a word (killed), naming the rank whose process is gone (same machine) or saying
that none could be named. ``torchrun`` itself stops the other ranks with SIGTERM when one exits
non-zero: :func:`init_from_env` turns that signal into a DistributedError, so the run's cleanup
(status, report, lock) still happens on rank 0.

Modules: ``group`` (the process group: :func:`init_from_env`, :func:`current`, :func:`dropin_comm`,
:func:`shutdown`) and ``comm`` (:class:`Comm`, the collectives and the naming of a failed rank).
"""
from .comm import COLLECTIVE_TIMEOUT_ENV, NONE_INT, Comm
from .group import (DEFAULT_COLLECTIVE_TIMEOUT_S, DEFAULT_TIMEOUT_S, collective_timeout_s, current, dropin_comm,
                    env_world_size, init_from_env, shutdown)

__all__ = ["COLLECTIVE_TIMEOUT_ENV", "DEFAULT_COLLECTIVE_TIMEOUT_S", "DEFAULT_TIMEOUT_S", "NONE_INT", "Comm",
           "collective_timeout_s", "current", "dropin_comm", "env_world_size", "init_from_env", "shutdown"]
