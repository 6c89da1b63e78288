"""What differs between the torch releases the backend supports (2.4 to 2.15).

Everything here is detected from the torch that is imported, never assumed
from its version number:

- **Options.** torch passes an options object to most calls, but not to all
  of them on every release (2.4's ``dist.all_gather`` calls
  ``group.allgather(outs, ins)``; the coalescing manager of 2.4 to 2.11 at
  least ``allgather_into_tensor_coalesced(outs, ins)``), and the options classes
  are not exported under the same names everywhere (``AllgatherOptions``
  exists only in ``torch._C._distributed_c10d``). So the backend never builds
  an options object: it reads the fields it needs, with torch's defaults.
- **Works handed to C++.** When torch's C++ code (DDP's constructor, the
  functional collectives, ``_broadcast_coalesced``) calls a Python process
  group, it keeps the returned work as a C++ object. Newer releases keep the
  Python object alive with it; older ones (2.4) let it be collected, after
  which the C++ ``wait()`` no longer reaches the Python one and waits
  forever for a completion that nothing signals. `PYTHON_WORKS_OUTLIVE_CALL`
  says which kind this torch is (by trying it); on the older kind the
  backend keeps its works alive itself (see ``_work.py``).
- **Registration.** ``Backend.register_backend`` takes ``devices`` only on
  newer releases; ``extended_api`` is required (the creator needs the
  group's global ranks). A creator that returns a process group (as shoal's
  does) has no backend registered per device type by torch; the group
  registers one itself (``register_devices``) where torch lets Python
  subclass ``Backend`` (not 2.4). Where ``dist.monitored_barrier`` takes
  Gloo groups only (2.4), it is wrapped to let shoal groups through
  (``let_monitored_barrier_take``).
"""

from __future__ import annotations

import datetime
import gc
import inspect
import weakref
from typing import Any, Callable

import torch
import torch.distributed as dist

# ---------------------------------------------------------------------------
# Options: the fields the backend reads, with torch's defaults when absent


def reduce_op(opts: Any) -> Any:
    """The call's ReduceOp (SUM when torch passed no options)."""
    return getattr(opts, "reduceOp", dist.ReduceOp.SUM)


def root_rank(opts: Any) -> int:
    """The call's root (0 when torch passed no options)."""
    return int(getattr(opts, "rootRank", 0))


def is_async(opts: Any) -> bool:
    """Whether torch waits for the work later (True) or right away (``asyncOp`` False).

    Releases without ``asyncOp`` (and calls without options) may keep the work
    and wait later, so they get the asynchronous path, which is correct either way."""
    return bool(getattr(opts, "asyncOp", True))


# ---------------------------------------------------------------------------
# Works returned to torch's C++ code


def _python_works_outlive_call() -> bool:
    """Whether torch keeps a Python work object alive after a Python process
    group returned it to C++ code: calls a probe group's ``barrier`` through
    the C++ binding, as torch's own C++ callers do, and checks whether the
    probe's work survived while the C++ side still holds it."""
    made: list[weakref.ref[dist.Work]] = []

    class ProbeWork(dist.Work):
        pass

    class ProbeGroup(dist.ProcessGroup):
        def barrier(self, opts: Any = None) -> dist.Work:
            work = ProbeWork()
            made.append(weakref.ref(work))
            return work

    try:
        held = dist.ProcessGroup.barrier(ProbeGroup(0, 1))
        gc.collect()
        alive = bool(made) and made[0]() is not None
        del held
        return alive
    except Exception:  # noqa: BLE001 - an unknown torch: keep works alive ourselves, which is always safe
        return False


PYTHON_WORKS_OUTLIVE_CALL = _python_works_outlive_call()


# ---------------------------------------------------------------------------
# Registration


def register_backend(name: str, creator: Callable[..., Any], devices: list[str]) -> None:
    """Registers ``creator`` for ``name`` (once per process) with the arguments this torch accepts."""
    if hasattr(dist.Backend, name.upper()):
        return  # registered already (shoal.torch imported under two names, or reloaded)
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "extended_api" not in params:
        raise RuntimeError(
            f"torch {torch.__version__}'s Backend.register_backend has no extended_api argument; "
            "the shoal backend needs torch 2.4 or newer"
        )
    kwargs: dict[str, Any] = {"extended_api": True}
    if "devices" in params:
        kwargs["devices"] = devices
    dist.Backend.register_backend(name, creator, **kwargs)


def default_timeout() -> Any:
    """torch's default group timeout (what it passes when the caller gave none)."""
    return getattr(dist.distributed_c10d, "default_pg_timeout", None)


# ---------------------------------------------------------------------------
# Device types: a Python process group has no C++ backend per device type,
# which torch's device dispatch looks up (``_device_types``, ``monitored_barrier``,
# ``_get_backend(device)`` from C++). Releases whose ``Backend`` Python can
# subclass (newer than 2.4) take one registered per device type; older ones
# do not, and their ``dist.monitored_barrier`` takes Gloo groups only.

_C10D: Any = getattr(torch._C, "_distributed_c10d", None)
BACKEND_BASE: type = getattr(_C10D, "Backend", object)


def _backends_from_python() -> bool:
    """Whether this torch can register a Python backend for a device type."""
    if BACKEND_BASE is object:
        return False

    class Probe(BACKEND_BASE):
        pass

    try:
        probe = Probe(0, 1)
        dist.ProcessGroup(0, 1)._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, probe)
        return True
    except Exception:  # noqa: BLE001 - "No constructor defined" on 2.4; any failure: do without
        return False


BACKENDS_FROM_PYTHON = _backends_from_python()


def register_devices(pg: Any, devices: list[str], make: Callable[[Any], Any]) -> None:
    """Registers ``make(pg)`` as ``pg``'s backend for each device type, where
    this torch can (the group keeps the backend alive)."""
    if not BACKENDS_FROM_PYTHON:
        return
    backend = make(pg)
    for device in devices:
        pg._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, backend)
    pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
    pg._shoal_device_backend = backend


def _monitored_barrier_takes_only_gloo() -> bool:
    """Whether ``dist.monitored_barrier`` refuses groups by backend name (2.4 and
    other releases before it looked at the group's device types)."""
    try:
        source = inspect.getsource(dist.distributed_c10d.monitored_barrier)
    except (OSError, TypeError):
        return not BACKENDS_FROM_PYTHON
    return "_device_types" not in source or not BACKENDS_FROM_PYTHON


def let_monitored_barrier_take(backend: str) -> None:
    """On releases whose ``dist.monitored_barrier`` takes Gloo groups only,
    wraps it (once) so that a group of ``backend`` runs its own
    ``monitored_barrier``, with torch's checks and arguments; every other
    group still goes to torch's."""
    c10d = dist.distributed_c10d
    original = c10d.monitored_barrier
    if getattr(original, "_shoal", False) or not _monitored_barrier_takes_only_gloo():
        return

    def monitored_barrier(group: Any = None, timeout: Any = None, wait_all_ranks: bool = False) -> Any:
        if c10d._rank_not_in_group(group):
            return None
        target = group or c10d._get_default_group()
        if c10d.get_backend(target) != backend:
            return original(group, timeout, wait_all_ranks)
        if timeout is None:
            timeout = c10d._get_default_timeout(backend)
        elif isinstance(timeout, (int, float)):
            timeout = datetime.timedelta(seconds=timeout)
        return target.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier.__doc__ = original.__doc__
    monitored_barrier._shoal = True  # type: ignore[attr-defined]
    c10d.monitored_barrier = monitored_barrier
    dist.monitored_barrier = monitored_barrier
