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
"""
import datetime
import os
import signal
import socket
import time
from typing import Any, Callable, List, Optional, Sequence

import torch

from .errors import DistributedError

DEFAULT_TIMEOUT_S = 1800  # torch's own default for gloo; train runs on rank 0 while the others wait
COLLECTIVE_TIMEOUT_ENV = "PIPELINE_COLLECTIVE_TIMEOUT_S"  # the drop-in API's bounded wait (see dropin_comm)
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0
NONE_INT = -(2 ** 62)  # stands for None in gather_ints
_KEY = "pipeline/%s/%d"  # store keys: pid/<rank>, failed/<rank>


def _dist() -> Any:
    import torch.distributed as dist
    return dist


def env_world_size() -> int:
    """``WORLD_SIZE`` from the environment (torchrun sets it), 1 when unset."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise DistributedError("WORLD_SIZE=%r is not an integer; launch with torchrun" % os.environ["WORLD_SIZE"])


class Comm:
    """The collectives a distributed calibration or evaluation needs, on the default process group.

    Attributes:
        rank, world: this process's rank and the number of ranks.
        context: what the caller is doing (``"calib round 3"``); error messages carry it.

    Every method is a collective: every rank calls it, in the same order. Raises DistributedError
    (naming the failed rank when it can) when a peer fails, exits or times out.
    """

    def __init__(self, rank: int, world: int, store: Any = None, bounded_s: Optional[float] = None,
                 prefix: str = "") -> None:
        self.rank, self.world, self.store = rank, world, store
        self.context = "start"
        # bounded entry (the drop-in API, dropin_comm): before each collective every rank posts its
        # arrival in the store and waits at most bounded_s for the others'; `call` and `hint` say what
        # the user called and what every rank must do, for the error
        self.bounded_s = bounded_s if store is not None else None
        self.prefix = prefix
        self.call = ""
        self.hint = ""
        self._seq = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ---------------------------------------------------------------- collectives
    def _call(self, fn: Callable[[], Any]) -> Any:
        if self.bounded_s is not None:
            self._enter()
        try:
            return fn()
        except DistributedError:
            raise
        except Exception as exc:  # gloo raises RuntimeError (and DistBackendError, a RuntimeError, in torch 2)
            _ignore_sigterm()  # this rank is failing already: let its cleanup (status, report) finish
            raise DistributedError(self.lost_message(exc))

    def gather_ints(self, value: Optional[int]) -> List[Optional[int]]:
        """One int (or None) per rank, in rank order (one tensor all_gather)."""
        dist = _dist()
        t = torch.tensor([NONE_INT if value is None else int(value)], dtype=torch.int64)
        out = [torch.zeros_like(t) for _ in range(self.world)]
        self._call(lambda: dist.all_gather(out, t))
        return [None if int(v) == NONE_INT else int(v) for v in out]

    def gather(self, obj: Any) -> List[Any]:
        """``obj`` of every rank (picklable; tensors keep their exact bits), in rank order."""
        dist = _dist()
        out = [None] * self.world  # type: List[Any]
        self._call(lambda: dist.all_gather_object(out, obj))
        return out

    def broadcast(self, obj: Any, src: int) -> Any:
        """``obj`` of rank ``src`` on every rank (the others pass anything)."""
        dist = _dist()
        box = [obj]
        self._call(lambda: dist.broadcast_object_list(box, src=src))
        return box[0]

    def barrier(self) -> None:
        self._call(lambda: _dist().barrier())

    def gather_ordered(self, local: Sequence[Any]) -> List[Any]:
        """This rank's per-batch items (its shard, in order) from every rank, in global batch order."""
        return self.interleave(self.gather(list(local)))

    @staticmethod
    def interleave(by_rank: Sequence[Sequence[Any]]) -> List[Any]:
        """Per-rank lists in shard order -> one list in global batch order (rank r's k-th item is
        global item ``k * world + r``)."""
        out = []  # type: List[Any]
        longest = max([len(items) for items in by_rank] or [0])
        for k in range(longest):
            out.extend(items[k] for items in by_rank if k < len(items))
        return out

    def _enter(self) -> None:
        """Wait, at most ``bounded_s``, until every rank has reached this collective (the ``_seq``-th of
        this Comm); then the collective itself cannot wait on a rank that never comes.

        Raises:
            DistributedError: a rank failed or exited meanwhile (named), or a rank did not arrive in
                time: the message says which, where it last was, and ``hint`` (what every rank must call).
        """
        self._seq += 1
        seq, where = self._seq, "%s (%s)" % (self.call or self.context, self.context)
        key = "pipeline/entry/%s/%%d/%%d" % self.prefix
        try:
            self.store.set(key % (seq, self.rank), where)
            self.store.set("pipeline/entry/%s/at/%d" % (self.prefix, self.rank), "%d %s" % (seq, where))
        except Exception as exc:
            raise DistributedError(self.lost_message(exc))
        others = [key % (seq, r) for r in range(self.world) if r != self.rank]
        start = time.monotonic()
        deadline, next_check, pause = start + float(self.bounded_s or 0), start + 1.0, 0.0005
        while True:
            try:
                if self.store.check(others):
                    break
            except Exception as exc:
                raise DistributedError(self.lost_message(exc))
            now = time.monotonic()
            if now >= next_check:  # a rank that failed or exited will never arrive: say so now
                next_check = now + 1.0
                who = self.failed_ranks()
                if who:
                    raise DistributedError(self._entry_message("; ".join(who)))
            if now >= deadline:
                missing = [r for r in range(self.world) if r != self.rank and not self._store_has(key % (seq, r))]
                raise DistributedError(self._entry_message(self._absent(missing, seq)))
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        if seq > 1:  # every rank has left the previous entry: its key is not read again
            try:
                self.store.delete_key(key % (seq - 1, self.rank))
            except Exception:
                pass

    def _absent(self, missing: List[int], seq: int) -> str:
        parts = []
        for r in missing:
            at = self._store_get("pipeline/entry/%s/at/%d" % (self.prefix, r))
            if at is None:
                parts.append("rank %d has not joined any of them" % r)
            else:
                done, what = at.split(" ", 1)
                parts.append("rank %d last joined collective %s, in %s" % (r, done, what))
        return ("waited %.0f s (%s=%s) for %s to reach collective %d; %s"
                % (float(self.bounded_s or 0), COLLECTIVE_TIMEOUT_ENV, _format_s(self.bounded_s),
                   " and ".join("rank %d" % r for r in missing), seq, "; ".join(parts)))

    def _entry_message(self, what: str) -> str:
        return ("rank %d of %d: %s: %s. %s" % (self.rank, self.world, self.call or self.context, what, self.hint)).strip()

    def _store_has(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except Exception:
            return False

    # ---------------------------------------------------------------- failures
    def post_failure(self, exc: BaseException) -> None:
        """Leave this rank's error in the store, for the ranks whose collectives it breaks."""
        if self.store is None:
            return
        try:
            self.store.set(_KEY % ("failed", self.rank), "%s: %s" % (type(exc).__name__, exc))
        except Exception:  # the store itself is gone: the others fall back to the process check
            pass

    def failed_ranks(self) -> List[str]:
        """Descriptions of the peers known to have failed: their posted errors, else processes gone."""
        found = []
        for r in range(self.world):
            if r == self.rank:
                continue
            posted = self._store_get(_KEY % ("failed", r))
            if posted is not None:
                found.append("rank %d failed: %s" % (r, posted))
                continue
            where = self._store_get(_KEY % ("pid", r))
            if where is not None:
                host, pid = where.rsplit(" ", 1)
                if host == socket.gethostname() and not _alive(int(pid)):
                    found.append("rank %d (pid %s) exited or was killed without reporting an error" % (r, pid))
        return found

    def lost_message(self, exc: BaseException, grace_s: float = 3.0) -> str:
        """The error of a collective that ``exc`` broke, naming the failed rank(s). Waits up to
        ``grace_s`` for the culprit to be known: a killed peer's socket closes a moment before its
        process is gone."""
        deadline = time.monotonic() + grace_s
        who = self.failed_ranks()
        while not who and time.monotonic() < deadline:
            time.sleep(0.1)
            who = self.failed_ranks()
        named = "; ".join(who) if who else ("no rank reported an error (a rank on another machine may have died, "
                                           "or one is stuck past run.distributed_timeout_s)")
        return ("rank %d of %d: %s stopped because another rank failed: %s. (torch.distributed: %s: %s) Nothing "
                "partial of this step was written: fix the failing rank and run the same command again"
                % (self.rank, self.world, self.context, named, type(exc).__name__, str(exc).strip()[:300]))

    def _store_get(self, key: str) -> Optional[str]:
        if self.store is None:
            return None
        try:
            if not self.store.check([key]):
                return None
            return self.store.get(key).decode("utf-8", "replace")
        except Exception:
            return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (a zombie counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return not os.path.isdir("/proc")


_current = None  # type: Optional[Comm]
_owned = False
_dropins = 0  # drop-in Comms made in this process (their store keys' prefix)


def _format_s(value: Optional[float]) -> str:
    return ("%g" % value) if value is not None else "unset"


def collective_timeout_s() -> float:
    """The drop-in API's bounded wait, seconds: ``PIPELINE_COLLECTIVE_TIMEOUT_S`` (default 300).

    Raises:
        DistributedError: the variable is not a positive number.
    """
    raw = os.environ.get(COLLECTIVE_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_COLLECTIVE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise DistributedError("%s=%r: expected a positive number of seconds (how long a rank waits for the others "
                               "at each collective of the drop-in API, default %g); set it to e.g. 600 or unset it"
                               % (COLLECTIVE_TIMEOUT_ENV, raw, DEFAULT_COLLECTIVE_TIMEOUT_S))
    return value


def dropin_comm() -> Optional[Comm]:
    """A Comm for the drop-in API (``pipeline.apis``) when the caller's script runs a process group of
    more than one rank, else None.

    The script, not the pipeline, started the group, often with gloo's 30-minute default timeout, and
    a script can skip a collective on some ranks (``if rank == 0: quantizer.export_quant_config()``).
    So every collective of this Comm first waits at most ``collective_timeout_s()`` for every rank to
    arrive (through the rendezvous store) and then fails with a DistributedError saying which rank is
    missing, where it last was and what every rank must call (``Comm.hint``). Each call makes a new
    Comm: every rank must make them in the same order (every rank creates the calib-mode quantizer).
    Without a store (a group the store of which cannot be reached) the waits are gloo's own.
    """
    global _dropins
    base = current()
    if base is None:
        return None
    _dropins += 1
    return Comm(base.rank, base.world, base.store, bounded_s=collective_timeout_s(), prefix="dropin%d" % _dropins)


def current() -> Optional[Comm]:
    """The Comm of the initialised default process group when it has more than one rank, else None."""
    global _current
    dist = _dist()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        _current = None
        return None
    if _current is None or (_current.rank, _current.world) != (dist.get_rank(), dist.get_world_size()):
        _current = Comm(dist.get_rank(), dist.get_world_size(), _default_store())
        _register(_current)
    return _current


def _default_store() -> Any:
    try:
        from torch.distributed import distributed_c10d
        return distributed_c10d._get_default_store()  # torch 1.13 and 2.x; naming failed ranks needs it
    except Exception:
        return None


def _register(comm: Comm) -> None:
    if comm.store is not None:
        try:
            comm.store.set(_KEY % ("pid", comm.rank), "%s %d" % (socket.gethostname(), os.getpid()))
        except Exception:
            pass


def init_from_env(timeout_s: int = DEFAULT_TIMEOUT_S) -> Optional[Comm]:
    """Start the default process group from torchrun's environment when ``WORLD_SIZE`` > 1.

    Returns the Comm, or None for a one-process run. A group the caller already initialised is
    used as it is. Installs a SIGTERM handler that raises DistributedError (torchrun stops the
    surviving ranks with SIGTERM when one fails).

    Raises:
        DistributedError: the rendezvous fails or times out (the message says what torchrun set).
    """
    global _owned
    if env_world_size() < 2:
        return current()
    dist = _dist()
    if not dist.is_available():
        raise DistributedError("WORLD_SIZE=%s but this torch build has no torch.distributed" % os.environ["WORLD_SIZE"])
    if not dist.is_initialized():
        try:
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
        except Exception as exc:
            raise DistributedError("rank %s: joining the process group (MASTER_ADDR=%s MASTER_PORT=%s WORLD_SIZE=%s) "
                                   "failed: %s; launch with torchrun --standalone --nproc_per_node N -m pipeline ..."
                                   % (os.environ.get("RANK"), os.environ.get("MASTER_ADDR"),
                                      os.environ.get("MASTER_PORT"), os.environ.get("WORLD_SIZE"), exc))
        _owned = True
    comm = current()
    if comm is not None and _owned:
        _install_sigterm(comm)
    return comm


_sigterm_installed = False


def _ignore_sigterm() -> None:
    if _sigterm_installed:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except ValueError:
            pass


def _install_sigterm(comm: Comm) -> None:
    global _sigterm_installed
    def on_term(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one error; the cleanup then runs to its end
        who = comm.failed_ranks()
        raise DistributedError("rank %d of %d: stopped by the launcher (SIGTERM) during %s; torchrun stops every "
                               "rank when one fails: %s" % (comm.rank, comm.world, comm.context,
                                                            "; ".join(who) or "the failed rank is in torchrun's summary"))
    try:
        signal.signal(signal.SIGTERM, on_term)
        _sigterm_installed = True
    except ValueError:  # not the main thread: leave the signal alone
        pass


def shutdown() -> None:
    """Destroy the process group if :func:`init_from_env` started it."""
    global _current, _owned, _sigterm_installed
    if _owned:
        _dist().destroy_process_group()
        _owned = False
    if _sigterm_installed:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _sigterm_installed = False
    _current = None
