"""``shoal.finalize()`` ends every group: sub-groups the program still holds
raise a clear error, the process's fds, threads and shared-memory mappings go
back to what they were before init, and init on the same address (the
launcher's MASTER_ADDR/MASTER_PORT) works again. Launched by
tests/test_api.py through `shoal run`; prints `OK finalize`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

import shoal

Usage = tuple[int, int, int]


def usage() -> Usage:
    """Open fds, threads and mappings of shared memory of this process."""
    with open("/proc/self/maps") as maps:
        shm = sum("/dev/shm/" in line for line in maps)
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), shm


def settled_usage(limit: Usage, timeout: float = 10.0) -> Usage:
    """The usage once it is within `limit`, or after `timeout` seconds (a
    thread ends a moment after finalize closes what it waits on)."""
    deadline = time.monotonic() + timeout
    now = usage()
    while any(n > lim for n, lim in zip(now, limit)) and time.monotonic() < deadline:
        time.sleep(0.05)
        now = usage()
    return now


def assert_released(before: Usage, when: str) -> Usage:
    """The usage, once back within `before` (raises if it does not get there)."""
    after = settled_usage(before)
    assert all(a <= b for a, b in zip(after, before)), (
        f"(fds, threads, shm mappings) {after} {when}, {before} before init"
    )
    return after


def expect_finalized(what: str, call: Callable[[], object]) -> None:
    try:
        call()
    except RuntimeError as e:
        assert "shoal is finalized" in str(e) and "belongs to a world that was finalized" in str(e), e
        return
    raise AssertionError(f"{what} worked after shoal.finalize()")


def groups_in_use() -> list[shoal.Group]:
    """The world and sub-groups of it (nested, keyed), each used once (async: the worker thread starts)."""
    world = shoal.init()
    p = world.size
    groups = [world]
    for g in (
        shoal.new_group(list(range(p - 1, -1, -1))),
        shoal.new_group([0, p - 1]),
        world.new_group(list(range(p)), key="all"),
    ):
        if g is not None:
            groups.append(g)
    nested = groups[1].new_group([0, 1])
    if nested is not None:
        groups.append(nested)
    for g in groups:
        x = np.full(1000, g.rank + 1, dtype=np.float32)
        work = g.allreduce(x, async_op=True)
        assert isinstance(work, shoal.Work)
        work.wait()
        assert np.all(x == g.size * (g.size + 1) / 2), x[:3]
    return groups


def check_reinit(r: int, p: int) -> None:
    """A job on the same address after finalize, its results against numpy."""
    world = shoal.init()
    assert world.rank == r and world.size == p
    rng = np.random.default_rng(7)
    data = rng.standard_normal((p, 4099)).astype(np.float64)
    x = data[r].copy()
    shoal.allreduce(x)
    np.testing.assert_allclose(x, data.sum(axis=0), rtol=1e-12)
    g = shoal.new_group(list(range(p - 1, -1, -1)))
    assert g is not None
    y = np.array([r], dtype=np.int64)
    g.allreduce(y, op="max")
    assert y[0] == p - 1
    shoal.finalize()


def main() -> None:
    before = usage()
    groups = groups_in_use()
    r, p = groups[0].rank, groups[0].size
    shoal.finalize()
    assert not shoal.is_initialized()
    assert_released(before, "after finalize")
    for g in groups:
        expect_finalized(f"{g!r}.allreduce", lambda g=g: g.allreduce(np.zeros(4)))
        expect_finalized(f"{g!r}.new_group", lambda g=g: g.new_group([0]))
        expect_finalized(f"{g!r}.barrier", lambda g=g: g.barrier())
        g.close()  # nothing left to close

    check_reinit(r, p)
    for g in groups:  # the old world's groups stay finalized beside the new world
        expect_finalized(f"{g!r}.allreduce", lambda g=g: g.allreduce(np.zeros(4)))
    after = assert_released(before, "after the second finalize")
    print(f"OK finalize rank {r}: (fds, threads, shm mappings) {before} before init, {after} at the end")


if __name__ == "__main__":
    main()
