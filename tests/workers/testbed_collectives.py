"""Run by tests/test_testbed.py through `shoal testbed run`: collectives across emulated hosts.

Checks that the ranks see the testbed's hosts (``local_ranks`` = the ranks
in the same host namespace, from ``SHOAL_HOST_ID``), then float32 sum
allreduces of a few sizes (up to 1M elements) with the selector's choice and
with forced algorithms (the topology-aware "hierarchical" among them), and
broadcasts with "pc", "ta_pc" (topology-aware chain) and "binomial" from two
roots, all against numpy. Inputs are small integers, so every sum is exact
in float32 whatever the order of combination. Prints one line per check on
rank 0; exits non-zero (with the case) on a mismatch.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import shoal

SIZES = (1, 7, 1000, 65539, 1 << 20)
ALLREDUCE_ALGOS = [None, *os.environ.get("TESTBED_ALLREDUCE_ALGOS", "ring,rabenseifner,hierarchical").split(",")]
BROADCAST_ALGOS = ("pc", "ta_pc", "binomial")


def contribution(rank: int, count: int, salt: int) -> np.ndarray:
    rng = np.random.default_rng([rank, count, salt])
    return rng.integers(-8, 9, size=count).astype(np.float32)


def fail(what: str) -> None:
    print(f"FAIL rank {shoal.rank()}: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def main() -> int:
    g = shoal.init()
    r, n = g.rank, g.size
    say = print if r == 0 else (lambda *a, **k: None)

    # Hosts: every rank's host index (the namespace name's suffix), gathered; local ranks = same host.
    host = int(os.environ["SHOAL_HOST_ID"].rsplit("-h", 1)[1])
    hosts = shoal.allgather(np.array([host], dtype=np.int64)).reshape(-1)
    expected_local = [q for q in range(n) if hosts[q] == host]
    if sorted(g.local_ranks) != expected_local:
        fail(f"local_ranks {g.local_ranks}, expected {expected_local} (hosts of the ranks: {hosts.tolist()})")
    say(f"hosts of the ranks: {hosts.tolist()}; local_ranks of rank 0: {sorted(g.local_ranks)}", flush=True)

    for algo in ALLREDUCE_ALGOS:
        for count in SIZES:
            x = contribution(r, count, 1)
            want = sum(contribution(q, count, 1).astype(np.float64) for q in range(n))
            t0 = time.perf_counter()
            shoal.allreduce(x, op="sum", algorithm=algo)
            dt = time.perf_counter() - t0
            if not np.array_equal(x.astype(np.float64), want):
                bad = int(np.flatnonzero(x.astype(np.float64) != want)[0])
                fail(f"allreduce algorithm={algo} count={count}: element {bad} is {x[bad]}, expected {want[bad]}")
            used = algo or g.choose_algorithm("allreduce", count, "float32")
            say(f"allreduce {used:<14} count {count:>8}: ok ({dt * 1e3:.1f} ms)", flush=True)

    for algo in BROADCAST_ALGOS:
        for root in (0, n - 1):
            for count in (7, 1 << 20):
                x = contribution(r, count, 2) if r == root else np.zeros(count, dtype=np.float32)
                t0 = time.perf_counter()
                shoal.broadcast(x, root=root, algorithm=algo)
                dt = time.perf_counter() - t0
                if not np.array_equal(x, contribution(root, count, 2)):
                    fail(f"broadcast algorithm={algo} root={root} count={count}: wrong data")
                say(f"broadcast {algo:<9} root {root} count {count:>8}: ok ({dt * 1e3:.1f} ms)", flush=True)

    shoal.barrier()
    say("testbed collectives: all ok", flush=True)
    shoal.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
