"""API behaviour on a real job: async work, groups, send/recv, overrides,
argument errors. Launched by tests/test_api.py through `shoal run`."""

from __future__ import annotations

import time

import numpy as np

import shoal


def expect_error(exc: type[BaseException], fragment: str, fn, *args, **kwargs) -> None:  # noqa: ANN001
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert fragment in str(e), f"error {e!r} does not mention {fragment!r}"
        return
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__} ({fragment})")


def check_async(r: int, p: int) -> None:
    xs = [np.full(100_003, r + i, dtype=np.float64) for i in range(4)]
    works = [shoal.allreduce(x, async_op=True) for x in xs]
    for i, (w, x) in enumerate(zip(works, xs)):
        assert w.wait() is x
        assert w.is_completed()
        assert np.all(x == sum(q + i for q in range(p)))
    # a sync call after async ones keeps the issue order
    y = np.full(3, r, dtype=np.int32)
    w = shoal.broadcast(y, root=p - 1, async_op=True)
    z = np.array([r], dtype=np.int64)
    shoal.allreduce(z, op="max")
    w.wait()
    assert np.all(y == p - 1) and z[0] == p - 1


def check_groups(r: int, p: int) -> None:
    evens = list(range(0, p, 2))
    g = shoal.new_group(evens)
    if r % 2 == 0:
        assert g is not None and g.size == len(evens) and g.rank == r // 2
        x = np.array([r], dtype=np.int64)
        g.allreduce(x)
        assert x[0] == sum(evens), x
        out = g.allgather(np.array([r], dtype=np.int32))
        assert list(out.ravel()) == evens
    else:
        assert g is None
    # a group in reverse order: group rank 0 is the last world rank
    rev = shoal.new_group(list(range(p - 1, -1, -1)))
    b = np.array([r], dtype=np.int32)
    rev.broadcast(b, root=0)
    assert b[0] == p - 1


def check_keyed_groups(r: int, p: int) -> None:
    """Groups made by their members only (``new_group(ranks, key=)``): the other ranks do not call."""
    world = shoal.world()
    # the ranks make different numbers of groups first, so no count of groups made agrees
    for _ in range(r):
        solo = world.new_group([r], key="solo")
        assert solo is not None and solo.size == 1
    pair = [q for q in (r - r % 2, r - r % 2 + 1) if q < p]
    twice = [world.new_group(pair, key="pair"), world.new_group(pair, key="pair")]
    for i, g in enumerate(twice):
        assert g is not None and g.members == pair and g.rank == pair.index(r)
        x = np.array([r + 10 * i], dtype=np.int64)
        g.allreduce(x)
        assert x[0] == sum(q + 10 * i for q in pair), (i, x, pair)
    # the same key with other members is another group: a ring of neighbours, in reverse order
    if p >= 3 and r < 3:
        trio = world.new_group([2, 1, 0], key="pair")
        y = np.array([r], dtype=np.int32)
        trio.broadcast(y, root=0)
        assert y[0] == 2
    # groups every rank makes still line up afterwards
    g = world.new_group(list(range(p)))
    z = np.array([1.0])
    g.allreduce(z)
    assert z[0] == p
    expect_error(TypeError, "key must be a str", world.new_group, [r], key=3)


def check_send_recv(r: int, p: int) -> None:
    if p < 2:
        return
    if r == 0:
        for tag in (5, 5, 9):
            shoal.send(np.arange(7, dtype=np.int32) + tag, 1, tag=tag)
    elif r == 1:
        # receive the tag-9 message first: tags are matched, not arrival order
        c = np.empty(7, dtype=np.int32)
        shoal.recv(c, 0, tag=9)
        a, b = np.empty(7, dtype=np.int32), np.empty(7, dtype=np.int32)
        shoal.recv(a, 0, tag=5)
        shoal.recv(b, 0, tag=5)
        assert np.array_equal(c, np.arange(7) + 9) and np.array_equal(a, np.arange(7) + 5)
        assert np.array_equal(b, a)
    # large messages in both directions, each rank sending first: sends must not wait for the receiver
    if r < 2:
        big = np.full(1 << 20, r, dtype=np.float32)
        got = np.empty_like(big)
        shoal.send(big, 1 - r, tag=3)
        shoal.recv(got, 1 - r, tag=3)
        assert np.all(got == 1 - r)
    # one tag, several messages of different sizes and types, received after they all arrived
    if r == 0:
        shoal.send(np.ones(3, np.float32), 1, tag=4)
        shoal.send(np.ones(4, np.float16), 1, tag=4)
    elif r == 1:
        time.sleep(0.2)
        a, b = np.empty(3, np.float32), np.empty(4, np.float16)
        shoal.recv(a, 0, tag=4)
        shoal.recv(b, 0, tag=4)
        assert np.all(a == 1) and np.all(b == 1)
    shoal.barrier()


def check_arguments(r: int, p: int) -> None:
    x = np.zeros((4, 4), dtype=np.float32)
    expect_error(ValueError, "C-contiguous", shoal.allreduce, x[:, 1])
    ro = np.zeros(4, dtype=np.float32)
    ro.flags.writeable = False
    expect_error(ValueError, "read-only", shoal.allreduce, ro)
    expect_error(ValueError, "out must hold", shoal.allgather, np.zeros(3, np.float32), np.zeros(3 * p + 1, np.float32))
    expect_error(ValueError, "unsupported dtype", shoal.allreduce, np.zeros(3, np.complex64))
    expect_error(ValueError, "needs a floating-point", shoal.allreduce, np.zeros(3, np.int32), "avg")
    expect_error(ValueError, "needs an integer", shoal.allreduce, np.zeros(3, np.float32), "band")
    expect_error(ValueError, "unknown reduction op", shoal.allreduce, np.zeros(3, np.float32), "mean")
    expect_error(ValueError, "valid: ", shoal.allreduce, np.zeros(3, np.float32), algorithm="nope")
    expect_error(ValueError, "root", shoal.broadcast, np.zeros(3, np.float32), root=p)
    expect_error(ValueError, "not a multiple", shoal.reduce_scatter, np.zeros(p * 2 + 1, np.float32)) if p > 1 else None
    # per-rank counts the core refuses: one per rank, on the collectives that take them
    from shoal._shoal import Call

    comm = shoal.world()._comm
    x, out = np.zeros(1, np.float32), np.zeros(p + 1, np.float32)
    wrong = Call("allgather", counts=[1] * (p + 1), dtype="float32")
    expect_error(
        ValueError,
        f"allgather: counts has {p + 1} entries, expected {p} (one per rank)",
        comm.collective,
        wrong,
        x,
        out,
    )
    expect_error(ValueError, "ring", shoal.allgather, x, counts=[1] * p, algorithm="bruck") if p > 1 else None
    # any buffer-protocol object works, in place
    buf = bytearray([r + 1] * 5)
    shoal.allreduce(buf, op="max")
    assert bytes(buf) == bytes([p] * 5)
    # the communicator is still healthy after rejected calls
    y = np.ones(5, dtype=np.float16)
    shoal.allreduce(y)
    assert np.all(y == p)


def main() -> None:
    shoal.init()
    r, p = shoal.rank(), shoal.size()
    check_async(r, p)
    check_groups(r, p)
    check_keyed_groups(r, p)
    check_send_recv(r, p)
    check_arguments(r, p)
    shoal.finalize()
    print("OK api")


if __name__ == "__main__":
    main()
