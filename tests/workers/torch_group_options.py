"""What a shoal process group takes from torch beyond its calls: its timeout
(``init_process_group(timeout=)``, ``new_group(timeout=)``), its device types,
and ``monitored_barrier``. Started by tests/test_torch_backend.py through
``spawn_ranks`` (so that every rank runs to its own end when others fail);
``python torch_group_options.py MODE``; each rank prints what it saw and "OK".
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import shoal.torch
from shoal.torch import _compat


def raises(fragment: str, fn: object) -> float:
    """Runs fn, which must raise with ``fragment`` in its message; returns the seconds it took."""
    start = time.monotonic()
    try:
        fn()  # type: ignore[operator]
    except Exception as e:  # noqa: BLE001
        took = time.monotonic() - start
        assert fragment in str(e), f"{type(e).__name__}: {e} does not mention {fragment!r}"
        print(f"RAISED after {took:.2f} s: {type(e).__name__}: {str(e)[:300]}", flush=True)
        return took
    raise AssertionError(f"no error (wanted {fragment!r})")


def timeout_new_group(r: int, n: int) -> None:
    # init_process_group without timeout=: SHOAL_TIMEOUT (the test sets 30 s), not torch's 30 minutes
    dist.init_process_group("shoal")
    world = dist.group.WORLD
    assert world.shoal_group.timeout == 30.0, world.shoal_group.timeout
    short = dist.new_group(list(range(n)), timeout=timedelta(seconds=1))
    assert short.shoal_group.timeout == 1.0, short.shoal_group.timeout
    assert world.shoal_group.timeout == 30.0  # the others keep theirs
    if r == 0:
        took = raises(" timeout ", lambda: dist.barrier(group=short))
        assert 0.9 <= took <= 8, took
    store_barrier(r, n, "after")
    print(f"rank {r}: OK timeouts", flush=True)


def timeout_init(r: int, n: int) -> None:
    dist.init_process_group("shoal", timeout=timedelta(seconds=2))
    assert dist.group.WORLD.shoal_group.timeout == 2.0
    if r == 0:
        took = raises(" timeout ", lambda: dist.barrier())
        assert 1.9 <= took <= 10, took
    store_barrier(r, n, "after")
    print(f"rank {r}: OK timeouts", flush=True)


def store_barrier(r: int, n: int, name: str) -> None:
    """A barrier through torch's default store (not the group: its calls may have failed)."""
    store = dist.distributed_c10d._get_default_store()
    store.add(f"test/{name}", 1)
    while int(store.add(f"test/{name}", 0)) < n:
        time.sleep(0.05)


def monitored(r: int, n: int) -> None:
    dist.init_process_group("shoal")
    world = dist.group.WORLD
    if _compat.BACKENDS_FROM_PYTHON:
        # torch's device dispatch finds the group's backend for CPU and CUDA
        assert torch.device("cpu") in world._device_types, world._device_types
        assert torch.device("cuda") in world._device_types, world._device_types
        assert dist.distributed_c10d._get_pg_default_device(world) == torch.device("cpu")
        assert world._get_backend(torch.device("cpu")) is not None
    two_s = timedelta(seconds=2)
    # everyone arrives
    dist.monitored_barrier(timeout=two_s)
    dist.monitored_barrier(timeout=two_s, wait_all_ranks=True)
    world.monitored_barrier(two_s)
    # rank 1 stays away: rank 0 names it, the others hear that rank 0 failed
    if r == 0:
        took = raises("Rank 1 failed to pass monitoredBarrier", lambda: dist.monitored_barrier(timeout=two_s))
        assert 1.9 <= took <= 6, took
    elif r != 1:
        raises("successfully reached monitoredBarrier", lambda: dist.monitored_barrier(timeout=two_s))
    store_barrier(r, n, "one-away")
    # every rank but 0 stays away: wait_all_ranks names them all
    if r == 0:
        ranks = ", ".join(str(q) for q in range(1, n))
        raises(
            f"Ranks {ranks} failed to pass monitoredBarrier",
            lambda: dist.monitored_barrier(timeout=timedelta(seconds=0.5), wait_all_ranks=True),
        )
        raises("Rank 0 timed out in monitoredBarrier", lambda: world.monitored_barrier(timedelta(seconds=0)))
    store_barrier(r, n, "all-away")
    # a sub-group (others call it too: they are not members, it returns at once)
    sub = dist.new_group([0, 1])
    if r == 1:
        store_barrier(r, n, "sub")
    else:
        if r == 0:
            raises("Rank 1 failed to pass monitoredBarrier", lambda: dist.monitored_barrier(sub, 0.5))
        else:
            dist.monitored_barrier(sub, 0.5)
        store_barrier(r, n, "sub")
    # the group still works
    x = torch.ones(3)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((3,), float(n)))
    print(f"rank {r}: OK monitored", flush=True)


if __name__ == "__main__":
    assert shoal.torch.BACKEND == "shoal"
    modes = {"timeout_new_group": timeout_new_group, "timeout_init": timeout_init, "monitored": monitored}
    modes[sys.argv[1]](int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
