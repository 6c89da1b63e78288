"""Back-to-back chain broadcasts between barriers on every rank of one host,
each result checked: the stream that found a deadlock when a barrier's
empty message, held over the run-ahead budget, was read in place from its
null address (4 ranks, 256 KiB, SHOAL_SHM_AHEAD_BYTES at 2 MiB). Launched by
tests/test_flow_control.py."""

from __future__ import annotations

import sys

import numpy as np

import shoal

ALGORITHM = sys.argv[1]
COUNT = 65536  # 256 KiB of float32
ROUNDS, CALLS = 10, 200


def main() -> None:
    g = shoal.init()
    x = np.empty(COUNT, dtype=np.float32)
    for r in range(ROUNDS):
        # The root's calls must go back to back (nothing between them), so
        # it runs ahead of its receivers; each round checks the last result.
        x[:] = r if g.rank == 0 else -1
        g.barrier()
        for _ in range(CALLS):
            g.broadcast(x, algorithm=ALGORITHM)
        if not (x == r).all():
            sys.exit(f"rank {g.rank}: round {r} got {x[0]}, {x[-1]}")
    shoal.finalize()
    print("done", flush=True)


if __name__ == "__main__":
    main()
