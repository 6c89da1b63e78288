"""Large broadcasts and allgathers, read in place and (at 2 ranks of a host
with a core each) split between sender and receiver, each result checked
against numpy. Launched by tests/test_shm_split.py."""

from __future__ import annotations

import sys

import numpy as np

import shoal

MIB = 1 << 20


def check(what: str, got: np.ndarray, want: np.ndarray) -> None:
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        sys.exit(f"{what}: element {bad} is {got[bad]}, expected {want[bad]}")


def main() -> None:
    g = shoal.init()
    rank, world = g.rank, g.size
    # odd sizes: a split point inside a page, a tail that is not a whole chunk
    for dtype, count in [(np.float32, 4 * MIB + 13), (np.float64, 3 * MIB + 1)]:
        for algorithm in ["binomial", "pipelined_chain", "scatter_allgather"]:
            for root in range(world):
                want = np.arange(count, dtype=dtype) * (root + 1) + 0.5
                x = want.copy() if rank == root else np.full(count, -1, dtype=dtype)
                g.broadcast(x, root=root, algorithm=algorithm)
                check(f"broadcast {algorithm} {dtype.__name__} root {root}", x, want)
    block = 2 * MIB + 7
    for algorithm in ["ring", "recursive_doubling"]:
        if algorithm == "recursive_doubling" and world & (world - 1):
            continue
        mine = np.arange(block, dtype=np.float32) + 1000.0 * rank
        out = np.empty(block * world, dtype=np.float32)
        g.allgather(mine, out, algorithm=algorithm)
        want = np.concatenate([np.arange(block, dtype=np.float32) + 1000.0 * r for r in range(world)])
        check(f"allgather {algorithm}", out, want)
    shoal.finalize()
    print("done", flush=True)


if __name__ == "__main__":
    main()
