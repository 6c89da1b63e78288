"""Calls whose algorithm is chosen as they run (SHOAL_ADAPT): many calls of a
few shapes above SHOAL_ADAPT_BYTES, each result checked against numpy, so
that every contender the calls explore runs and is checked. Launched by
tests/test_adapt.py through ``shoal run``; prints, on rank 0, the algorithm
leading each shape at the end. Arguments: the collectives, and optionally the
dtype (float32 by default)."""

from __future__ import annotations

import os
import sys

import numpy as np

import shoal

CALLS = 400  # a shape explores once its leader has run about 50 calls per contender
# 80 KB and 1.2 MB of 4-byte values, odd; ADAPT_COUNTS names others.
COUNTS = tuple(int(c) for c in os.environ.get("ADAPT_COUNTS", "20011,300007").split(","))


DTYPE = np.dtype(sys.argv[2] if len(sys.argv) > 2 else "float32")


def value(rank: int, call: int, n: int) -> np.ndarray:
    # Small integers: every sum is exact whatever the order of reduction.
    return ((np.arange(n) + 7 * rank + call) % 13).astype(DTYPE)


def run(g: shoal.Group, collective: str, n: int) -> None:
    world, rank = g.size, g.rank
    for call in range(CALLS):
        if collective == "broadcast":
            root = call % 2 % world
            x = value(rank, call, n) if rank == root else np.zeros(n, dtype=DTYPE)
            g.broadcast(x, root=root)
            expected = value(root, call, n)
        elif collective == "allgather":
            out = np.empty(n * world, dtype=DTYPE)
            g.allgather(value(rank, call, n), out)
            x, expected = out, np.concatenate([value(r, call, n) for r in range(world)])
        elif collective == "reduce_scatter":
            x = g.reduce_scatter(value(rank, call, n * world))
            expected = sum(value(r, call, n * world) for r in range(world))[rank * n : (rank + 1) * n]
        else:
            x = value(rank, call, n)
            g.allreduce(x)
            expected = sum(value(r, call, n) for r in range(world))
        if not np.array_equal(x, expected):
            bad = int(np.flatnonzero(x != expected)[0])
            sys.exit(f"rank {rank}: {collective} of {n} call {call}: [{bad}] = {x[bad]}, expected {expected[bad]}")


def main() -> None:
    g = shoal.init()
    for collective in sys.argv[1].split(","):
        for n in COUNTS:
            run(g, collective, n)
            if g.rank == 0:
                print("leads", collective, n, g.choose_algorithm(collective, n, DTYPE.name), flush=True)
    shoal.finalize()


if __name__ == "__main__":
    main()
