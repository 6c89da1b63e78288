"""API behaviour on a real job: async work, groups, send/recv, overrides,
argument errors. Launched by tests/test_api.py through `shoal run`."""

from __future__ import annotations

import time

import numpy as np

import shoal


def expect_error(
    exc: type[BaseException] | tuple[type[BaseException], ...],
    fragment: str,
    fn,  # noqa: ANN001
    *args,  # noqa: ANN002
    **kwargs,  # noqa: ANN003
) -> None:
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert fragment in str(e), f"error {e!r} does not mention {fragment!r}"
        return
    raise AssertionError(f"{fn.__name__} did not raise {exc} ({fragment})")


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


def rank_data(r: int, n: int, dtype: np.dtype) -> np.ndarray:
    """Small values every dtype holds, different on every rank (for sums of
    up to 4 ranks, products of 2 and 3: no overflow of int8)."""
    return ((np.arange(n) + r) % 3 + 1).astype(dtype)


def check_in_place_on_plain_buffers(r: int, p: int) -> None:
    """The core's direct path (`run_in_place`): it takes plain buffers of
    every type shoal has, types and counts them itself (checked against
    numpy), and declines everything else, which then fails as it always did."""
    import array

    comm = shoal.world()._comm
    kinds = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64, np.longlong, np.intc]
    for dtype in kinds:
        for n in (0, 1, 7, 1000):
            for op, fold in (("sum", np.add), ("max", np.maximum), ("prod", np.multiply)):
                if op == "prod" and p > 3:
                    continue
                x = rank_data(r, n, np.dtype(dtype))
                assert comm.run_in_place("allreduce", x, op, 0, None), (dtype, n, op)
                want = rank_data(0, n, np.dtype(dtype))
                for q in range(1, p):
                    want = fold(want, rank_data(q, n, np.dtype(dtype)))
                assert np.array_equal(x, want), (dtype, n, op, x, want)
        # a broadcast from the last rank, a 2-D array, through the Group
        b = np.full((3, 5), r, dtype=dtype)
        shoal.broadcast(b, root=p - 1)
        assert np.all(b == p - 1), (dtype, b)
        # a reduce to rank 0: the others' buffers may be read-only
        y = rank_data(r, 6, np.dtype(dtype))
        y.flags.writeable = r == 0
        assert comm.run_in_place("reduce", y, "min", 0, None)
        if r == 0:
            assert np.array_equal(y, np.minimum.reduce([rank_data(q, 6, np.dtype(dtype)) for q in range(p)]))
    # numpy arrays the core reads off their struct: a view's own part only,
    # any number of dimensions; and those it leaves to the buffer protocol
    # (unaligned, a subclass) run all the same
    base = np.arange(10, dtype=np.float64) + r
    assert comm.run_in_place("allreduce", base[3:7], "sum", 0, None)
    want = np.arange(10, dtype=np.float64) * p + sum(range(p))
    assert np.array_equal(base[3:7], want[3:7]) and np.array_equal(base[:3], np.arange(3.0) + r), base
    assert np.array_equal(base[7:], np.arange(7.0, 10.0) + r), base
    cube = np.full((2, 3, 4), r + 1, np.int32)
    assert comm.run_in_place("allreduce", cube, "sum", 0, None) and np.all(cube == p * (p + 1) // 2)
    scalar = np.array(r + 1.0, np.float32)  # 0-d: one element
    assert comm.run_in_place("allreduce", scalar, "max", 0, None) and scalar == p
    empty = np.zeros((0, 5), np.float32)
    assert comm.run_in_place("allreduce", empty, "sum", 0, None)
    unaligned = np.frombuffer(bytearray(4 * 3 + 1), np.float32, count=3, offset=1)
    assert not unaligned.flags.aligned
    unaligned[:] = r
    assert comm.run_in_place("allreduce", unaligned, "sum", 0, None) and np.all(unaligned == sum(range(p)))

    class Tagged(np.ndarray):
        pass

    sub = np.full(5, r, np.int64).view(Tagged)
    assert comm.run_in_place("allreduce", sub, "sum", 0, None) and np.all(sub == sum(range(p)))
    bcast = np.full((4, 3), r, np.float32).T  # Fortran order: declined
    assert not comm.run_in_place("broadcast", bcast, "sum", 0, None)
    # other buffer-protocol objects: their formats name their types
    d = array.array("d", [r + 0.5] * 3)
    assert comm.run_in_place("allreduce", d, "sum", 0, None)
    assert list(d) == [sum(q + 0.5 for q in range(p))] * 3
    m = memoryview(bytearray([r] * 4))
    assert comm.run_in_place("allreduce", m, "max", 0, None)
    assert bytes(m) == bytes([p - 1] * 4)
    # a name Python did not intern is matched by its value
    op = "".join(["s", "um"])
    z = np.ones(2, np.float32)
    assert comm.run_in_place("allreduce", z, op, 0, None) and np.all(z == p)
    # declined, having run nothing; the Group then names the problem
    x = np.zeros(4, np.float32)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    declined = [
        ((np.zeros((4, 4), np.float32)[:, 1], "sum", 0, None), "C-contiguous"),
        ((ro, "sum", 0, None), "read-only"),
        ((np.zeros(4, ">f4"), "sum", 0, None), "unsupported dtype"),
        ((np.zeros(4, np.bool_), "sum", 0, None), "unsupported dtype"),
        ((np.zeros(4, np.int16), "sum", 0, None), "unsupported dtype"),
        ((x, "mean", 0, None), "unknown reduction op"),
        ((x, 3, 0, None), "op"),
        ((np.zeros(3, np.int32), "avg", 0, None), "needs a floating-point"),
        ((x, "sum", 0, "nope"), "valid: "),
        ((x, "sum", 0, 5), "algorithm"),
        (("not a buffer", "sum", 0, None), "buffer protocol"),
    ]
    for (buf, op_, root, alg), fragment in declined:
        assert not comm.run_in_place("allreduce", buf, op_, root, alg), (buf, op_, alg)
        expect_error((ValueError, TypeError), fragment, shoal.allreduce, buf, op_, algorithm=alg)
    for root in (p, -1, 1.0, "0", None):
        assert not comm.run_in_place("broadcast", x, "sum", root, None), root
        expect_error((ValueError, TypeError), "root", shoal.broadcast, x, root=root)
    expect_error(ValueError, "not a collective that runs in place", comm.run_in_place, "allgather", x, "sum", 0, None)


def check_group_calls_bind_arguments_as_signatures_say(r: int, p: int) -> None:
    """Group's in-place collectives are native methods (GroupCalls): every
    way Python can pass their arguments binds as their signatures say,
    whether the short route or the checked method runs the call, and what
    does not fit raises as a Python method would."""
    import inspect

    g = shoal.world()
    total = p * (p + 1) // 2

    def fresh() -> np.ndarray:
        return np.full(3, r + 1, np.int64)

    sums = [
        lambda x: g.allreduce(x),
        lambda x: g.allreduce(x, "sum"),
        lambda x: g.allreduce(x=x),
        lambda x: g.allreduce(op="sum", x=x),
        lambda x: g.allreduce(x, op="sum", algorithm=None, async_op=False, dtype=None),
        lambda x: g.allreduce(x, dtype="int64"),  # a dtype named: the checked method
        lambda x: g.allreduce(x, algorithm="ring"),
        lambda x: g.allreduce(x, async_op=True).wait(),
    ]
    for i, call in enumerate(sums):
        x = fresh()
        assert call(x) is x and np.all(x == total), (i, x)
    x = fresh()
    g.allreduce(x, op="max")
    assert np.all(x == p), x
    for root in range(p):
        for call in (
            lambda b, root=root: g.broadcast(b, root),
            lambda b, root=root: g.broadcast(b, root=root),
            lambda b, root=root: g.broadcast(root=root, x=b, algorithm="binomial"),
        ):
            b = np.full(2, r, np.int32)
            assert call(b) is b and np.all(b == root), (root, b)
    y = fresh()
    g.reduce(y, p - 1, "max")
    assert r != p - 1 or np.all(y == p), y
    y = fresh()
    g.reduce(y, op="min", root=0)
    assert r != 0 or np.all(y == 1), y
    expect_error(TypeError, "required positional argument: 'x'", g.allreduce)
    expect_error(TypeError, "unexpected keyword argument 'root'", g.allreduce, fresh(), root=0)
    expect_error(TypeError, "positional arguments", g.allreduce, fresh(), "sum", "max")
    expect_error(TypeError, "multiple values for argument 'root'", g.broadcast, fresh(), 0, root=0)
    expect_error(TypeError, "multiple values for argument 'x'", g.reduce, fresh(), x=fresh())
    sig = "(x, root=0, op='sum', *, algorithm=None, async_op=False, dtype=None)"
    assert str(inspect.signature(g.reduce)) == sig, inspect.signature(g.reduce)
    assert g.allreduce.__doc__ is not None and "Reduces ``x`` across the group" in g.allreduce.__doc__
    closed = shoal.new_group(list(range(p)))
    assert closed is not None
    closed.close()
    assert closed._comm is None
    expect_error(RuntimeError, "this group was closed", closed.broadcast, fresh())


def check_gil_let_go_while_waiting(r: int, p: int) -> None:
    """A small call keeps the GIL only while its wait is short: while rank 0
    waits for a late peer, its other Python threads run."""
    import threading
    import time

    if p < 2:
        return
    ticks = 0
    stop = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    shoal.barrier()
    x = np.ones(3, np.float32)
    if r == 0:
        ticker = threading.Thread(target=tick)
        ticker.start()
        start = ticks
        time.sleep(0.05)  # the GIL let go: the ticker's pace
        before = ticks
        shoal.allreduce(x)
        during = ticks - before
        stop.set()
        ticker.join()
        # The call waits about 0.35 s. Holding the GIL, it would let the
        # ticker run only the 5 ms switch interval before it (0.1x).
        paced = before - start
        assert during > 2 * paced, f"other threads did not run while the call waited: {during} ticks, {paced} in 50 ms"
    else:
        if r == p - 1:
            time.sleep(0.4)
        shoal.allreduce(x)
    assert np.all(x == p), x


def main() -> None:
    shoal.init()
    r, p = shoal.rank(), shoal.size()
    check_async(r, p)
    check_groups(r, p)
    check_keyed_groups(r, p)
    check_send_recv(r, p)
    check_arguments(r, p)
    check_in_place_on_plain_buffers(r, p)
    check_group_calls_bind_arguments_as_signatures_say(r, p)
    check_gil_let_go_while_waiting(r, p)
    shoal.finalize()
    print("OK api")


if __name__ == "__main__":
    main()
