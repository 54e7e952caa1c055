"""The process group of a distributed run: started from torchrun's environment, the current
:class:`~pipeline.distributed.comm.Comm`, the drop-in API's bounded Comm, and the shutdown."""
import datetime
import os
import socket
from typing import Any, Optional

from ..errors import DistributedError
from .comm import COLLECTIVE_TIMEOUT_ENV, STORE_KEY, Comm, install_sigterm, post, remove_sigterm, torch_dist

DEFAULT_TIMEOUT_S = 1800  # torch's own default for gloo; train runs on rank 0 while the others wait
DEFAULT_COLLECTIVE_TIMEOUT_S = 300.0


def env_world_size() -> int:
    """``WORLD_SIZE`` from the environment (torchrun sets it), 1 when unset."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise DistributedError("WORLD_SIZE=%r is not an integer; launch with torchrun" % os.environ["WORLD_SIZE"])


_current = None  # type: Optional[Comm]
_owned = False
_dropins = 0  # drop-in Comms made in this process (their store keys' prefix)


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
    dist = torch_dist()
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
            post(comm.store, STORE_KEY % ("pid", comm.rank), "%s %d" % (socket.gethostname(), os.getpid()))
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
    dist = torch_dist()
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
        install_sigterm(comm)
    return comm


def shutdown() -> None:
    """Destroy the process group if :func:`init_from_env` started it."""
    global _current, _owned
    if _owned:
        torch_dist().destroy_process_group()
        _owned = False
    remove_sigterm()
    _current = None
