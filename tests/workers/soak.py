"""A long mixed run: CALLS collectives of every kind, dtype and op, sync and
async (several in flight), on the world and on two disjoint sub-groups,
each result compared bit for bit with numpy. Every rank draws the same call
sequence from a shared seed and computes every rank's contribution itself,
so the reference needs no communication.

Resources are sampled at the first tenth, the middle and the end:
resident memory must not grow over the second half (caches and the
allocator settle in the first), and open file descriptors, threads and
shoal's /dev/shm entries must not grow after the first tenth. Prints one
JSON line per rank with the figures; exits non-zero on the first wrong
element or growth beyond the limits.

    shoal run -n 4 python tests/workers/soak.py 10000
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import shoal

DTYPES = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8")
COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "gather", "scatter")
MAX_IN_FLIGHT = 4
RSS_GROWTH_LIMIT = int(os.environ.get("SOAK_RSS_LIMIT", 8 << 20))  # bytes, second half


@dataclass
class Call:
    index: int
    collective: str
    dtype: str
    op: str
    count: int  # elements per block
    root: int
    group: str
    async_op: bool


def ops_for(dtype: str) -> list[str]:
    return ["sum", "min", "max"] + (["avg"] if dtype.startswith("float") else ["band", "bxor"])


def draw(rng: np.random.Generator, index: int) -> Call:
    dtype = str(rng.choice(DTYPES))
    counts = (1, 7, 64, 1000, 4099, 65537)
    return Call(
        index=index,
        collective=str(rng.choice(COLLECTIVES)),
        dtype=dtype,
        op=str(rng.choice(ops_for(dtype))),
        count=int(rng.choice(counts, p=(0.2, 0.2, 0.2, 0.2, 0.15, 0.05))),
        root=int(rng.integers(0, 1 << 16)),
        group=str(rng.choice(("world", "world", "evens", "odds"))),
        async_op=bool(rng.random() < 0.4),
    )


def contribution(call: Call, member: int, elements: int) -> np.ndarray:
    """Small integers, so every reduction is exact in every dtype and order."""
    rng = np.random.default_rng([call.index, member])
    low = 0 if call.dtype == "uint8" else -3
    return rng.integers(low, 4, size=elements).astype(call.dtype)


def reduce_all(call: Call, blocks: list[np.ndarray]) -> np.ndarray:
    stack = np.stack(blocks).astype(np.float64 if call.dtype.startswith("float") else np.int64)
    fns: dict[str, Callable[..., Any]] = {
        "sum": np.sum,
        "avg": np.mean,
        "min": np.min,
        "max": np.max,
        "band": np.bitwise_and.reduce,
        "bxor": np.bitwise_xor.reduce,
    }
    return fns[call.op](stack, axis=0).astype(call.dtype)


class Run:
    """One call on this rank: its buffers, the pending work and its expected result."""

    def __init__(self, call: Call, group: shoal.Group) -> None:
        self.call, self.group = call, group
        n, me, c = group.size, group.rank, call.count
        root = call.root % n
        mine = lambda member, k=c: contribution(call, member, k)  # noqa: E731
        kind = call.collective
        self.expected: np.ndarray | None
        if kind == "allreduce":
            self.buf = mine(me)
            self.expected = reduce_all(call, [mine(m) for m in range(n)])
            self.work = group.allreduce(self.buf, op=call.op, async_op=call.async_op)
        elif kind == "broadcast":
            self.buf = mine(me)
            self.expected = mine(root)
            self.work = group.broadcast(self.buf, root=root, async_op=call.async_op)
        elif kind == "reduce":
            self.buf = mine(me)
            self.expected = reduce_all(call, [mine(m) for m in range(n)]) if me == root else None
            self.work = group.reduce(self.buf, root=root, op=call.op, async_op=call.async_op)
        elif kind == "allgather":
            self.inp = mine(me)
            self.buf = np.empty((n, c), dtype=call.dtype)
            self.expected = np.stack([mine(m) for m in range(n)])
            self.work = group.allgather(self.inp, out=self.buf, async_op=call.async_op)
        elif kind == "reduce_scatter":
            self.inp = mine(me, n * c)
            self.buf = np.empty(c, dtype=call.dtype)
            self.expected = reduce_all(call, [mine(m, n * c) for m in range(n)])[me * c : (me + 1) * c]
            self.work = group.reduce_scatter(self.inp, out=self.buf, op=call.op, async_op=call.async_op)
        elif kind == "alltoall":
            self.inp = mine(me, n * c)
            self.buf = np.empty(n * c, dtype=call.dtype)
            self.expected = np.concatenate([mine(m, n * c)[me * c : (me + 1) * c] for m in range(n)])
            self.work = group.alltoall(self.inp, out=self.buf, async_op=call.async_op)
        elif kind == "gather":
            self.inp = mine(me)
            self.buf = np.empty((n, c), dtype=call.dtype) if me == root else None
            self.expected = np.stack([mine(m) for m in range(n)]) if me == root else None
            self.work = group.gather(self.inp, root=root, out=self.buf, async_op=call.async_op)
        else:  # scatter
            self.inp = mine(root, n * c) if me == root else None
            self.buf = np.empty(c, dtype=call.dtype)
            self.expected = mine(root, n * c)[me * c : (me + 1) * c]
            self.work = group.scatter(self.inp, out=self.buf, root=root, async_op=call.async_op)

    def finish(self) -> None:
        if self.call.async_op:
            self.work.wait()
        if self.expected is None:
            return
        got = np.asarray(self.buf).reshape(self.expected.shape)
        if not np.array_equal(got.view(np.uint8), self.expected.view(np.uint8)):
            bad = int(np.count_nonzero(got != self.expected))
            raise SystemExit(f"rank {shoal.rank()}: call {self.call} wrong in {bad} of {got.size} elements")


def resources(shm_prefix: str) -> dict[str, int]:
    status = open("/proc/self/status").read()
    rss = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    return {
        "rss": rss,
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": len(os.listdir("/proc/self/task")),
        "shm": sum(1 for f in os.listdir("/dev/shm") if f.startswith(shm_prefix)),
    }


def check_flat(me: int, samples: dict[str, dict[str, int]]) -> None:
    end = samples["end"]
    middle = samples.get("middle", end)
    warm = samples.get("warm", end)
    grew = end["rss"] - middle["rss"]
    if grew > RSS_GROWTH_LIMIT:
        raise SystemExit(f"rank {me}: resident memory grew by {grew >> 20} MiB over the second half")
    for what in ("fds", "threads", "shm"):
        if end[what] > warm[what]:
            raise SystemExit(f"rank {me}: {what} grew from {warm[what]} to {end[what]}")


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    world = shoal.init()
    me, n = world.rank, world.size
    groups = {
        "world": world,
        "evens": world.new_group(list(range(0, n, 2))),
        "odds": world.new_group(list(range(1, n, 2))) if n > 1 else None,
    }
    rng = np.random.default_rng(20261123)
    in_flight: list[Run] = []
    samples_at = {max(calls // 10, 1): "warm", max(calls // 2, 1): "middle"}
    samples: dict[str, dict[str, int]] = {}
    shm_prefix = "shoal-"
    for index in range(calls):
        call = draw(rng, index)
        group = groups[call.group]
        if index in samples_at:
            samples[samples_at[index]] = resources(shm_prefix)
        if group is None:
            continue
        run = Run(call, group)
        if call.async_op:
            in_flight.append(run)
        else:
            run.finish()
        if len(in_flight) >= MAX_IN_FLIGHT or not call.async_op:
            for pending in in_flight:
                pending.finish()
            in_flight.clear()
    for pending in in_flight:
        pending.finish()
    world.barrier()
    samples["end"] = resources(shm_prefix)
    print(json.dumps({"rank": me, "calls": calls, **samples}), flush=True)
    check_flat(me, samples)
    shoal.finalize()


if __name__ == "__main__":
    main()
