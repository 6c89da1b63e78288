"""Python algorithms on a real job: the examples registered in a different
order on different ranks, run by name, through SHOAL_ALGO and the selector,
checked against numpy; plans built once per call shape; a broken algorithm
fails on every rank alike. Launched by tests/test_algo.py."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples" / "algorithms"
sys.path.insert(0, str(EXAMPLES))

from shoal import algo  # noqa: E402

RANK = int(os.environ["RANK"])
# Registration order differs between ranks; ids are hashes of names, so it must not matter.
MODULES = ["ring_allreduce", "torus_allreduce", "knomial_broadcast"]
for module in MODULES if RANK % 2 == 0 else reversed(MODULES):
    importlib.import_module(module)

import shoal  # noqa: E402

BUILDS: list[int] = []


@algo.register("allreduce", "counted_ring")
def counted_ring(b: algo.Builder) -> None:
    BUILDS.append(b.rank)
    algo.registered("allreduce", "py_ring").fn(b)  # type: ignore[union-attr]


@algo.register("allreduce", "broken")
def broken(b: algo.Builder) -> None:
    """Rank 1 never receives the last round's message."""
    b.copy(algo.input(0, b.count), algo.output(0, b.count))
    p = b.world
    for s in range(p - 1):
        b.send((b.rank + 1) % p, s, algo.output(0, b.count))
        if not (b.rank == 1 and s == p - 2):
            b.recv_reduce((b.rank - 1) % p, s, algo.output(0, b.count))


@algo.register("allreduce", "raises")
def raises(b: algo.Builder) -> None:
    b.copy(algo.input(0, b.count), algo.output(0, b.count))
    print(1 / 0)


def expect(exc: type[BaseException], fragment: str, fn, *args, **kwargs) -> BaseException:  # noqa: ANN001
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert fragment in str(e), f"{e!r} does not mention {fragment!r}"
        return e
    raise AssertionError(f"no {exc.__name__} ({fragment})")


def main() -> None:
    g = shoal.init()
    r, p = g.rank, g.size
    for count in (0, 1, 7, 1001, 40_000):
        base = np.arange(count, dtype=np.float64)
        for name in ("py_ring", "torus"):
            x = base * (r + 1) + r
            g.allreduce(x, algorithm=name)
            np.testing.assert_array_equal(x, base * sum(range(1, p + 1)) + sum(range(p)), err_msg=name)
            y = (base + r).astype(np.int32)
            w = g.allreduce(y, "max", algorithm=name, async_op=True)
            assert w is not None and w.wait() is y
            np.testing.assert_array_equal(y, (base + p - 1).astype(np.int32))
        for root in range(p):
            z = base + 100 * r
            g.broadcast(z, root, algorithm="knomial")
            np.testing.assert_array_equal(z, base + 100 * root)

    # Plans are built on a cache miss only: once for every rank (verified), then never again.
    x = np.ones(33, dtype=np.float32)
    for _ in range(5):
        g.allreduce(x, algorithm="counted_ring")
    assert BUILDS == list(range(p)), BUILDS
    assert np.all(x == p**5)

    forced = os.environ.get("SHOAL_ALGO")
    if forced:
        assert g.choose_algorithm("allreduce", 1000) == forced.split(":")[1]
        x = np.full(1000, float(r))
        g.allreduce(x)
        assert np.all(x == sum(range(p)))

    # A broken algorithm fails the same way on every rank, and the group lives on.
    if p > 1:
        err = expect(algo.VerifyError, "no matching message", g.allreduce, np.ones(4), algorithm="broken")
        assert isinstance(err, algo.VerifyError) and err.rank is not None and err.step is not None
    # An exception in an algorithm reaches the caller as it was raised.
    expect(ZeroDivisionError, "division by zero", g.allreduce, np.ones(3), algorithm="raises")
    x = np.ones(5)
    g.allreduce(x, algorithm="py_ring")
    assert np.all(x == p)

    # With a cost, the selector weighs it against the built-ins: a free one wins.
    before = g.choose_algorithm("allreduce", 12345)  # remembered for this shape...
    algo.register("allreduce", "free", cost=algo.Cost(0, 0))(algo.registered("allreduce", "py_ring").fn)  # type: ignore[union-attr]
    if not forced:
        assert before != "free" and g.choose_algorithm("allreduce", 12345) == "free"  # ...until a registration
        x = np.full(12345, 2.0)
        g.allreduce(x)
        assert np.all(x == 2.0 * p)

    expect(ValueError, "already has a built-in algorithm 'ring'", algo.register("allreduce", "ring"), counted_ring)
    expect(ValueError, "'torus' is already registered", algo.register("allreduce", "torus"), counted_ring)
    assert "torus" in shoal.algorithms("allreduce")
    g.barrier()
    print(f"OK algo rank {r}")
    shoal.finalize()


if __name__ == "__main__":
    main()
