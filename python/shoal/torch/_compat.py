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
  group's global ranks).
"""

from __future__ import annotations

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
