"""Memory-roofline reference: how fast N processes can copy memory at once.

Every process copies its own ``nbytes`` buffer (``numpy.copyto``) ``reps``
times; before each copy all processes meet at a barrier, so the copies run
concurrently. Per repetition the aggregate is ``N * nbytes / duration``;
figures are medians over repetitions. A repetition lasts from the first
process leaving the barrier to the last one finishing. "Copy bandwidth" counts bytes copied
(the memory traffic is 2-3x that: read, write, and the write-allocate read).

A collective moving large messages through shared memory has to copy each
byte at least once, so ``busbw / per-process copy bandwidth`` says how close
it comes to what the machine can move with N processes busy.

``python -m shoal.bench.roofline -n 4`` prints it alone.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from typing import Any

import numpy as np


def _copier(nbytes: int, reps: int, barrier: Any, results: Any, index: int) -> None:
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)
    dst.fill(1)  # touch every page before timing
    np.copyto(dst, src)
    spans = []
    for _ in range(reps):
        barrier.wait()
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
        np.copyto(dst, src)
        spans.append((t0, time.perf_counter()))
    results.put((index, spans))


def measure(nprocs: int, nbytes: int = 64 << 20, reps: int = 10) -> dict[str, Any]:
    """Copy bandwidth of ``nprocs`` concurrent processes (GB/s = 1e9 bytes/s)."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(nprocs)
    results = ctx.Queue()
    procs = [ctx.Process(target=_copier, args=(nbytes, reps, barrier, results, i)) for i in range(nprocs)]
    for p in procs:
        p.start()
    per_proc = dict(results.get(timeout=300) for _ in procs)
    for p in procs:
        p.join()
    # a repetition lasts from the first process leaving the barrier to the last
    # one finishing: with more processes than cores, some only start when a
    # core frees up, and that wait is part of what N processes can move
    spans = [
        max(per_proc[i][k][1] for i in range(nprocs)) - min(per_proc[i][k][0] for i in range(nprocs))
        for k in range(reps)
    ]
    aggregate = statistics.median(nprocs * nbytes / t / 1e9 for t in spans)
    own = [statistics.median(nbytes / (t1 - t0) / 1e9 for t0, t1 in per_proc[i]) for i in range(nprocs)]
    return {
        "processes": nprocs,
        "bytes_per_process": nbytes,
        "reps": reps,
        "aggregate_gbps": aggregate,
        "per_process_gbps": aggregate / nprocs,
        "per_process_own_gbps": own,
    }


def roofline(nprocs: int, nbytes: int = 64 << 20, reps: int = 10) -> dict[str, Any]:
    """The N-process figure, and one process alone for scale."""
    concurrent = measure(nprocs, nbytes, reps)
    alone = measure(1, nbytes, reps) if nprocs > 1 else concurrent
    return {
        "method": f"numpy.copyto of {nbytes >> 20} MiB per process, all processes at once (barrier per copy)",
        "concurrent": concurrent,
        "single": alone,
        "per_process_gbps": concurrent["per_process_gbps"],
        "aggregate_gbps": concurrent["aggregate_gbps"],
        "single_gbps": alone["aggregate_gbps"],
    }


def describe(r: dict[str, Any]) -> str:
    n = r["concurrent"]["processes"]
    return (
        f"memory roofline ({r['method']}): {n} processes: {r['per_process_gbps']:.2f} GB/s each, "
        f"{r['aggregate_gbps']:.2f} GB/s aggregate; 1 process alone: {r['single_gbps']:.2f} GB/s"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shoal.bench.roofline", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--nprocs", type=int, default=2)
    p.add_argument("--mib", type=int, default=64, help="MiB copied per process")
    p.add_argument("--reps", type=int, default=10)
    ns = p.parse_args(argv)
    print(describe(roofline(ns.nprocs, ns.mib << 20, ns.reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
