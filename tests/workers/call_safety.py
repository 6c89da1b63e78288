"""What a careless caller does to calls in flight and to their buffers, on a
real job. Launched by tests/test_call_safety.py; the first argument picks the
check: ownership, aliasing, arguments or plan_cache."""

from __future__ import annotations

import gc
import resource
import sys
import time

import numpy as np

import shoal

CANARY = -7.0
# elements per array and rounds at that size: 1K .. 16M elements
SIZES = [(1 << 10, 40), (1 << 14, 20), (1 << 18, 6), (1 << 22, 2), (1 << 24, 1)]


def expect_error(exc: type[BaseException], fragments: tuple[str, ...], fn, *args, **kwargs) -> None:  # noqa: ANN001
    try:
        fn(*args, **kwargs)
    except exc as e:
        for f in fragments:
            assert f in str(e), f"error {e!r} does not mention {f!r}"
        return
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc.__name__} {fragments}")


# -- ownership: a call keeps its buffers alive until it completes ---------------


def canaries(n: int, p: int) -> list[np.ndarray]:
    """Fresh arrays of the sizes just freed: the allocator hands out the freed memory first."""
    return [np.full(n, CANARY, np.float32) for _ in range(3)] + [np.full((p, n), CANARY, np.float32)]


def check_ownership(r: int, p: int) -> None:
    for n, rounds in SIZES:
        for i in range(rounds):
            kept = np.full(n, r + i, np.float32)
            shoal.allreduce(kept, async_op=True)  # handle dropped at once
            shoal.allreduce(np.full(n, 1, np.float32), async_op=True)  # array and handle dropped
            shoal.allgather(np.full(n, r, np.float32), async_op=True)  # its output only the work held
            out = np.empty((p, n), np.float32)
            shoal.allgather(np.full(n, r + 1, np.float32), out=out, async_op=True)
            gc.collect()
            fresh = canaries(n, p)
            shoal.barrier()  # every earlier call has completed
            assert np.all(kept == sum(q + i for q in range(p))), f"allreduce result wrong at n={n}"
            assert np.array_equal(out, np.repeat(np.arange(1, p + 1, dtype=np.float32)[:, None], n, 1))
            for c in fresh:
                assert np.all(c == CANARY), f"an unrelated new array was overwritten (n={n}, round {i})"
            del kept, out, fresh


def check_wait_timeout_keeps_buffers(r: int, p: int) -> None:
    """wait(timeout) expiring leaves the buffers with the call."""
    n = 1 << 16
    x = np.full(n, r + 1, np.float32)
    if r == 0:
        w = shoal.allreduce(x, async_op=True)
        expect_error(shoal.ShoalTimeoutError, ("timed out",), w.wait, 0.001)
        del w, x
        gc.collect()
        fresh = canaries(n, p)
        shoal.barrier()
        for c in fresh:
            assert np.all(c == CANARY), "the result was written into a new array after wait(timeout) expired"
    else:
        time.sleep(0.3)  # rank 0's wait expires before the call can complete
        shoal.allreduce(x)
        assert np.all(x == p * (p + 1) / 2)
        shoal.barrier()


def check_exports_released() -> None:
    """While a call runs its buffer cannot be resized; once it is over
    (waited for, or followed by a blocking call) it can again."""
    waited, dropped = bytearray(1 << 20), bytearray(1 << 20)
    w = shoal.allreduce(waited, op="max", async_op=True)
    w.wait()
    waited.extend(b"more")
    shoal.allreduce(dropped, op="max", async_op=True)  # handle dropped
    shoal.barrier()
    dropped.extend(b"more")


def check_wait_arguments() -> None:
    w = shoal.barrier(async_op=True)
    for bad in (-1.0, float("nan")):
        expect_error(ValueError, ("timeout",), w.wait, bad)
    w.wait(float("inf"))
    w.wait(1e300)


# -- aliasing: in-place forms are correct, other overlaps are refused ------------


def unique(r: int, count: int) -> np.ndarray:
    """Values that name their rank and position."""
    return (r * 1_000_000 + np.arange(count)).astype(np.float64)


def check_in_place_forms(r: int, p: int) -> None:
    for n in (1000, 150_000):  # through the rings, and single-copy reads on shm
        check_in_place_forms_of(r, p, n)


def check_in_place_forms_of(r: int, p: int, n: int) -> None:
    # alltoall(x, out=x): block q of x goes to rank q, block q of the result came from q
    x = unique(r, p * n)
    want = np.concatenate([unique(q, p * n)[r * n : (r + 1) * n] for q in range(p)])
    assert shoal.alltoall(x, out=x) is x
    assert np.array_equal(x, want), f"alltoall(x, out=x) wrong in {np.sum(x != want)} of {x.size} elements"
    # allgather with x = block r of out (MPI_IN_PLACE; torch's all_gather_into_tensor)
    out = np.zeros((p, n))
    out[r] = unique(r, n)
    shoal.allgather(out[r], out=out)
    assert np.array_equal(out, np.stack([unique(q, n) for q in range(p)]))
    # reduce_scatter with out = block r of x
    x = np.concatenate([unique(r, n) + q for q in range(p)])
    shoal.reduce_scatter(x, out=x[r * n : (r + 1) * n])
    assert np.array_equal(x[r * n : (r + 1) * n], sum(unique(q, n) + r for q in range(p)))
    # gather at the root with x = block root of out; scatter at the root with out = block root of x
    root = p - 1
    g = np.zeros((p, n))
    g[r] = unique(r, n)
    shoal.gather(g[r], root=root, out=g if r == root else None)
    if r == root:
        assert np.array_equal(g, np.stack([unique(q, n) for q in range(p)]))
    s = np.stack([unique(q, n) for q in range(p)]) if r == root else np.zeros((p, n))
    shoal.scatter(s if r == root else None, out=s[r], root=root)
    assert np.array_equal(s[r], unique(r, n))
    # the same through async calls
    x = unique(r, p * n)
    w = shoal.alltoall(x, out=x, async_op=True)
    assert w.wait() is x and np.array_equal(x, want)


def check_overlaps_refused(r: int, p: int) -> None:
    n = 256
    buf = np.zeros(p * n + 8)
    expect_error(ValueError, ("alltoall", "overlaps", "bytes"), shoal.alltoall, buf[: p * n], out=buf[8:])
    big = np.zeros(p * n + 1)
    expect_error(ValueError, ("allgather", "overlaps"), shoal.allgather, big[1 : n + 1], out=big[: p * n])
    if p > 1:
        # a whole block, but not this rank's: not an in-place form
        other = (r + 1) % p
        out = np.zeros((p, n))
        expect_error(ValueError, ("allgather", "overlaps"), shoal.allgather, out[other], out=out)
        x = np.zeros(p * n)
        expect_error(
            ValueError, ("reduce_scatter", "overlaps"), shoal.reduce_scatter, x, out=x[other * n : (other + 1) * n]
        )
    # views of one base: out covers half of x
    x = np.zeros(p * n)
    if p > 1:
        expect_error(ValueError, ("reduce_scatter", "overlaps"), shoal.reduce_scatter, x, out=x[n // 2 : n // 2 + n])
    # checked before anything was sent: the job goes on
    y = np.full(4, r, np.int64)
    shoal.allreduce(y)
    assert np.all(y == p * (p - 1) // 2)


# -- arguments: ranks, roots and tags ------------------------------------------


def check_arguments(r: int, p: int) -> None:
    x = np.zeros(4, np.float32)
    expect_error(ValueError, ("send", "dst", "-1"), shoal.send, x, dst=-1)
    expect_error(ValueError, ("send", "dst", str(p)), shoal.send, x, dst=p)
    expect_error(ValueError, ("send", "dst", str(2**64)), shoal.send, x, dst=2**64)
    expect_error(ValueError, ("recv", "src", str(p)), shoal.recv, x, src=p)
    expect_error(ValueError, ("recv", "src", "-3"), shoal.recv, x, src=-3)
    expect_error(ValueError, ("send", "tag", "-1"), shoal.send, x, dst=(r + 1) % p, tag=-1)
    expect_error(ValueError, ("recv", "tag", str(2**31)), shoal.recv, x, src=(r + 1) % p, tag=2**31)
    expect_error(ValueError, ("send", "tag", str(2**40)), shoal.send, x, dst=(r + 1) % p, tag=2**40)
    expect_error(TypeError, ("dst", "int"), shoal.send, x, dst=1.5)
    for fn, args in (
        (shoal.broadcast, (x,)),
        (shoal.reduce, (x,)),
        (shoal.gather, (x,)),
        (shoal.scatter, (None, x)),
    ):
        expect_error(ValueError, ("root", "-1"), fn, *args, root=-1)
        expect_error(ValueError, ("root", str(2**70)), fn, *args, root=2**70)
    expect_error(ValueError, ("new_group", "-1"), shoal.new_group, [0, -1])
    expect_error(ValueError, ("new_group", str(2**65)), shoal.new_group, [2**65])
    # numpy integers are ranks too
    if p > 1:
        if r == 0:
            shoal.send(np.arange(4, dtype=np.float32), dst=np.int64(1), tag=np.uint16(3))
        elif r == 1:
            shoal.recv(x, src=np.int32(0), tag=3)
            assert np.array_equal(x, np.arange(4))
    y = np.full(3, r, np.int32)
    shoal.broadcast(y, root=np.int64(p - 1))
    assert np.all(y == p - 1)
    shoal.barrier()


# -- the plan cache stays bounded ------------------------------------------------


def rss_kib() -> int:
    """Private resident memory: resident minus shared pages. The shared-memory
    rings and windows are file-backed pages that a call of a larger size touches
    for the first time (up to about 2 MiB here), which is not growth of the caches."""
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    return (int(fields[1]) - int(fields[2])) * (resource.getpagesize() // 1024)


def check_plan_cache(r: int, p: int, distinct: int) -> None:
    world = shoal.world()
    fill = 2500  # more shapes than the caches hold: they are full from here on
    for count in range(1, fill + 1):
        shoal.allreduce(np.ones(count, np.float32))
        shoal.broadcast(np.ones(count, np.int8), root=count % p)
    gc.collect()
    before = rss_kib()
    for count in range(fill + 1, fill + 1 + distinct):
        shoal.allreduce(np.ones(count, np.float32))
        shoal.broadcast(np.ones(count, np.int8), root=count % p)
    gc.collect()
    grown = rss_kib() - before
    assert grown < 2 * 1024, f"RSS grew {grown} KiB over {2 * distinct} calls of distinct shapes"
    cap = world.plan_cache_capacity
    assert world.plans_cached == cap, f"{world.plans_cached} plans cached, capacity {cap}"
    # evicted shapes still run (rebuilt on demand) and agree across ranks
    x = np.full(7, r, np.float32)
    shoal.allreduce(x)
    assert np.all(x == p * (p - 1) / 2)
    print(f"plan cache: {world.plans_cached} of {cap}, RSS +{grown} KiB")


def main() -> None:
    what = sys.argv[1]
    shoal.init()
    r, p = shoal.rank(), shoal.size()
    if what == "ownership":
        check_ownership(r, p)
        check_wait_timeout_keeps_buffers(r, p)
        check_exports_released()
        check_wait_arguments()
    elif what == "aliasing":
        check_in_place_forms(r, p)
        check_overlaps_refused(r, p)
    elif what == "arguments":
        check_arguments(r, p)
    elif what == "plan_cache":
        check_plan_cache(r, p, int(sys.argv[2]))
    else:
        raise SystemExit(f"unknown check {what!r}")
    shoal.finalize()
    print(f"OK {what}")


if __name__ == "__main__":
    main()
