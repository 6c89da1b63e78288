"""The calls flow control could slow down (docs/benchmarks.md, "Cost of flow
control"), timed on 2 ranks: allreduce at 8 B, 1 MiB and 16 MiB, and over
tcp also a 1 MiB broadcast and a ping-pong at 8 B and 1 MiB.

    SHOAL_TRANSPORT=tcp shoal run -n 2 python scripts/bench_flow_control.py tcp 3

Prints, from rank 0, one line `RESULT <case> <median us>` per case (the
median of REPEATS timings). Run two builds' jobs interleaved to compare them."""

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

import shoal

shoal.init()
r = shoal.rank()
transport, repeats = sys.argv[1], int(sys.argv[2])


def timed(fn: Callable[[], object], iters: int) -> float:
    for _ in range(max(3, iters // 5)):
        fn()
    shoal.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e6


def allreduce(nbytes: int) -> Callable[[], object]:
    x = np.ones(nbytes // 4, dtype=np.float32)
    return lambda: shoal.allreduce(x)


def broadcast(nbytes: int) -> Callable[[], object]:
    x = np.ones(nbytes, dtype=np.uint8)
    return lambda: shoal.broadcast(x, root=0)


def pingpong(nbytes: int) -> Callable[[], object]:
    x = np.ones(nbytes, dtype=np.uint8)

    def once() -> None:
        if r == 0:
            shoal.send(x, dst=1)
            shoal.recv(x, src=1)
        else:
            shoal.recv(x, src=0)
            shoal.send(x, dst=0)

    return once


cases = [
    ("allreduce-8B", allreduce(8), 2000),
    ("allreduce-1MiB", allreduce(1 << 20), 100),
    ("allreduce-16MiB", allreduce(16 << 20), 10),
]
if transport == "tcp":
    cases += [
        ("broadcast-1MiB", broadcast(1 << 20), 100),
        ("pingpong-8B", pingpong(8), 2000),
        ("pingpong-1MiB", pingpong(1 << 20), 100),
    ]
times = {name: [] for name, _, _ in cases}
for _ in range(repeats):
    for name, fn, iters in cases:
        times[name].append(timed(fn, iters))
if r == 0:
    for name, ts in times.items():
        print(f"RESULT {name} {statistics.median(ts):.1f}", flush=True)
shoal.finalize()
