"""The collectives of a distributed run (:class:`Comm`) and how a rank's failure is named.

Every collective runs under the process group's timeout (``run.distributed_timeout_s``). A rank that
raises posts its error in the rendezvous store before it exits; a rank whose collective then fails
raises :class:`DistributedError` naming that rank and its error, or, when a rank died without a word
(killed), naming the rank whose process is gone (same machine) or saying that none could be named.
``torchrun`` itself stops the other ranks with SIGTERM when one exits non-zero:
:func:`install_sigterm` turns that signal into a DistributedError, so the run's cleanup (status,
report, lock) still happens on rank 0. The process group itself: ``pipeline.distributed.group``.
"""
import os
import signal
import socket
import time
from typing import Any, Callable, List, Optional, Sequence

import torch

from ..errors import DistributedError

COLLECTIVE_TIMEOUT_ENV = "PIPELINE_COLLECTIVE_TIMEOUT_S"  # the drop-in API's bounded wait (see group.dropin_comm)
NONE_INT = -(2 ** 62)  # stands for None in gather_ints
STORE_KEY = "pipeline/%s/%d"  # store keys: pid/<rank>, failed/<rank>
POSTED = "%s/posted"  # the counter beside a key set with post()


def post(store: Any, key: str, value: str) -> None:
    """Set ``key`` to ``value`` in the rendezvous store, then count it posted (``key/posted``).

    Whether a key exists is read from that counter (:func:`posted`): ``Store.check`` exists only from
    torch 2.x, ``Store.get`` of a missing key blocks for the store's whole timeout, and ``Store.add``
    is in every torch the project supports (1.13 included)."""
    store.set(key, value)
    store.add(POSTED % key, 1)


def posted(store: Any, key: str) -> bool:
    """Whether ``key`` was set with :func:`post` (one ``Store.add(key/posted, 0)``, which never waits)."""
    return int(store.add(POSTED % key, 0)) > 0


def torch_dist() -> Any:
    """``torch.distributed``, imported on first use."""
    import torch.distributed as dist
    return dist


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
        dist = torch_dist()
        t = torch.tensor([NONE_INT if value is None else int(value)], dtype=torch.int64)
        out = [torch.zeros_like(t) for _ in range(self.world)]
        self._call(lambda: dist.all_gather(out, t))
        return [None if int(v) == NONE_INT else int(v) for v in out]

    def gather(self, obj: Any) -> List[Any]:
        """``obj`` of every rank (picklable; tensors keep their exact bits), in rank order."""
        dist = torch_dist()
        out = [None] * self.world  # type: List[Any]
        self._call(lambda: dist.all_gather_object(out, obj))
        return out

    def broadcast(self, obj: Any, src: int) -> Any:
        """``obj`` of rank ``src`` on every rank (the others pass anything)."""
        dist = torch_dist()
        box = [obj]
        self._call(lambda: dist.broadcast_object_list(box, src=src))
        return box[0]

    def barrier(self) -> None:
        self._call(lambda: torch_dist().barrier())

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
        arrived = "pipeline/entry/%s/%%d/arrived" % self.prefix  # ranks that reached entry seq
        try:
            post(self.store, key % (seq, self.rank), where)
            post(self.store, "pipeline/entry/%s/at/%d" % (self.prefix, self.rank), "%d %s" % (seq, where))
            self.store.add(arrived % seq, 1)
        except Exception as exc:
            raise DistributedError(self.lost_message(exc))
        start = time.monotonic()
        deadline, next_check, pause = start + float(self.bounded_s or 0), start + 1.0, 0.0005
        while True:
            try:
                if int(self.store.add(arrived % seq, 0)) >= self.world:
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
        if seq > 1:  # every rank has left the previous entry: its keys are not read again
            done = [key % (seq - 1, self.rank)]
            old = done + [POSTED % done[0]] + ([arrived % (seq - 1)] if self.rank == 0 else [])
            for k in old:
                try:
                    self.store.delete_key(k)
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
            return posted(self.store, key)
        except Exception:
            return False

    # ---------------------------------------------------------------- failures
    def post_failure(self, exc: BaseException) -> None:
        """Leave this rank's error in the store, for the ranks whose collectives it breaks."""
        if self.store is None:
            return
        try:
            post(self.store, STORE_KEY % ("failed", self.rank), "%s: %s" % (type(exc).__name__, exc))
        except Exception:  # the store itself is gone: the others fall back to the process check
            pass

    def failed_ranks(self) -> List[str]:
        """Descriptions of the peers known to have failed: their posted errors, else processes gone."""
        found = []
        for r in range(self.world):
            if r == self.rank:
                continue
            posted = self._store_get(STORE_KEY % ("failed", r))
            if posted is not None:
                found.append("rank %d failed: %s" % (r, posted))
                continue
            where = self._store_get(STORE_KEY % ("pid", r))
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
            if not posted(self.store, key):
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


def _format_s(value: Optional[float]) -> str:
    return ("%g" % value) if value is not None else "unset"


_sigterm_installed = False


def _ignore_sigterm() -> None:
    if _sigterm_installed:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except ValueError:
            pass


def install_sigterm(comm: Comm) -> None:
    """Turn the launcher's SIGTERM into a DistributedError naming the failed rank (main thread only)."""
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


def remove_sigterm() -> None:
    """Give SIGTERM its default action back, when :func:`install_sigterm` took it."""
    global _sigterm_installed
    if _sigterm_installed:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _sigterm_installed = False
