"""What runs is what every rank agreed to: ranks that define or choose an
algorithm differently must all raise, not return wrong sums. Launched by
tests/test_agree.py (through `shoal run` or directly, one process per rank).

    agree.py definitions   even ranks register `halves` one way, odd ranks another
    agree.py same          every rank registers the same `halves`
    agree.py choice        allreduce by SHOAL_ALGO (the test sets it per rank)
    agree.py cost          even ranks register `halves` with a cost that wins, odd ranks nothing
    agree.py slow SECONDS  rank 1's builder sleeps SECONDS per call (SHOAL_TIMEOUT below it)

Prints `RAISED <type>: <message>` or `RESULT right` / `RESULT wrong`, then,
after a barrier that shows the group lives on, `ALIVE`.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from shoal import algo

RANK = int(os.environ["RANK"])
MODE = sys.argv[1]
BUILDS: list[int] = []


def halves(b: algo.Builder, shift: int) -> None:
    """A direct allreduce: block (r + shift) % p is reduced on rank r, then
    sent to every rank. Each shift is a correct algorithm; two ranks with
    different shifts exchange blocks of the same sizes and sum the wrong ones."""
    r, p = b.rank, b.world
    data = algo.output(0, b.count)
    b.copy(algo.input(0, b.count), data)
    blocks = data.split(p)
    mine = (r + shift) % p
    for q in range(p):
        if q != r:
            b.send(q, 0, blocks[(q + shift) % p])
    for q in range(p):
        if q != r:
            b.recv_reduce(q, 0, blocks[mine])
    for q in range(p):
        if q != r:
            b.send(q, 1, blocks[mine])
    for q in range(p):
        if q != r:
            b.recv(q, 1, blocks[(q + shift) % p])


def one_way(b: algo.Builder) -> None:
    halves(b, 0)


def another_way(b: algo.Builder) -> None:
    halves(b, 1)


def slowly(b: algo.Builder) -> None:
    BUILDS.append(b.rank)
    if RANK == 1:
        time.sleep(float(sys.argv[2]))
    halves(b, 0)


if MODE == "definitions":
    algo.register("allreduce", "halves")(one_way if RANK % 2 == 0 else another_way)
elif MODE == "same":
    algo.register("allreduce", "halves")(one_way)
elif MODE == "slow":
    algo.register("allreduce", "halves")(slowly)
elif MODE == "cost" and RANK % 2 == 0:
    # Chosen by the selector on the even ranks only (free), the built-ins elsewhere.
    algo.register("allreduce", "halves", cost=algo.Cost(0, 0))(one_way)

import shoal  # noqa: E402


def main() -> None:
    g = shoal.init()
    r, p = g.rank, g.size
    name = None if MODE in ("choice", "cost") else "halves"
    count = 12 * p
    x = np.arange(count, dtype=np.float64) * (r + 1)
    want = np.arange(count, dtype=np.float64) * sum(range(1, p + 1))
    try:
        if MODE == "definitions":
            assert algo.verify("halves", "allreduce", worlds=[p], counts=[count]) > 0  # each passes alone
        if MODE == "same":
            # Async calls of a shape prepared before its agreement ran wait for it.
            works = [g.allreduce(x.copy(), algorithm=name, async_op=True) for _ in range(3)]
            for w in works:
                assert w is not None
                w.wait()
        g.allreduce(x, algorithm=name)
        print(f"RESULT {'right' if np.array_equal(x, want) else 'wrong'}", flush=True)
    except (shoal.ShoalError, shoal.ShoalTimeoutError) as e:
        print(f"RAISED {type(e).__name__}: {e}", flush=True)
    if MODE in ("slow", "choice", "cost"):
        # slow: each rank's plan built once, by the first use's verification (the
        # agreement's digest reuses it); a timeout broke the group.
        # choice, cost: the ranks would disagree on every call again.
        print(f"BUILDS {BUILDS}", flush=True)
        return
    # The same verdict again for the same call, and the group still works.
    if MODE == "definitions":
        try:
            g.allreduce(x, algorithm=name)
            print("SECOND no error", flush=True)
        except shoal.ShoalError as e:
            print(f"SECOND {type(e).__name__}: {e}", flush=True)
    y = np.full(5, float(r))
    g.allreduce(y)
    assert np.all(y == sum(range(p))), y
    g.barrier()
    print("ALIVE", flush=True)
    shoal.finalize()


if __name__ == "__main__":
    main()
