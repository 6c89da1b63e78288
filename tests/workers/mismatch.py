"""Ranks make calls that do not match; every rank must raise an error that
says so, not hang and not return as if all were well.

    mismatch.py WHAT
        WHAT in kind, count, dtype, op, root: the last rank's allreduce or
        broadcast differs from the others' in that one respect.
    mismatch.py calls SPEC_OTHERS SPEC_ODD ODD_RANK [ROUNDS]
        Rank ODD_RANK calls SPEC_ODD, every other rank SPEC_OTHERS, ROUNDS
        times (default 1), then a barrier. A SPEC is `collective[:key=value,...]`
        with keys root, count, dtype, op, algo (e.g. `broadcast:root=1,algo=pc`).

Prints `RAISED <error type> at round <k>: <message>` (`k` = ROUNDS for the
final barrier) or `NO ERROR`, then `RSS <kib at start> <kib at the end>`.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

import shoal


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def parse(spec: str) -> tuple[str, dict[str, Any]]:
    name, _, rest = spec.partition(":")
    args: dict[str, Any] = {"root": 0, "count": 1000, "dtype": "float32", "op": "sum", "algo": None}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        args[key] = int(value) if key in ("root", "count") else value
    return name, args


def call(spec: str) -> None:
    """Makes the collective call `spec` with buffers of the right sizes."""
    name, a = parse(spec)
    r, p = shoal.rank(), shoal.size()
    n, dt, algo = a["count"], np.dtype(a["dtype"]), a["algo"]
    root, op = a["root"], a["op"]
    x = np.ones(n, dtype=dt)
    if name == "allreduce":
        shoal.allreduce(x, op=op, algorithm=algo)
    elif name == "broadcast":
        shoal.broadcast(x, root=root, algorithm=algo)
    elif name == "reduce":
        shoal.reduce(x, root=root, op=op, algorithm=algo)
    elif name == "allgather":
        shoal.allgather(x, algorithm=algo)
    elif name == "reduce_scatter":
        shoal.reduce_scatter(np.ones(n * p, dtype=dt), op=op, algorithm=algo)
    elif name == "alltoall":
        shoal.alltoall(np.ones(n * p, dtype=dt), algorithm=algo)
    elif name == "gather":
        shoal.gather(x, root=root, algorithm=algo)
    elif name == "scatter":
        src = np.ones(n * p, dtype=dt) if r == root else None
        shoal.scatter(src, out=x, root=root, algorithm=algo)
    elif name == "barrier":
        shoal.barrier()
    else:
        raise SystemExit(f"unknown collective {name}")


def one_difference(what: str) -> None:
    r, p = shoal.rank(), shoal.size()
    odd = r == p - 1
    x = np.ones(1000, dtype=np.float32)
    if what == "kind":
        shoal.broadcast(x) if odd else shoal.allreduce(x)
    elif what == "count":
        shoal.allreduce(np.ones(999 if odd else 1000, dtype=np.float32))
    elif what == "dtype":
        shoal.allreduce(np.ones(1000, dtype=np.int32 if odd else np.float32))
    elif what == "op":
        shoal.allreduce(x, op="max" if odd else "sum")
    elif what == "root":
        shoal.broadcast(x, root=1 if odd else 0)
    elif what == "counts":
        counts = [q + 1 for q in range(p)]
        if odd:
            counts.reverse()
        shoal.allgather(np.ones(counts[r], dtype=np.float32), counts=counts)


def main() -> None:
    start = rss_kib()
    round_ = 0
    try:
        # a fast rank may reach the mismatch while a slow one is still in init's
        # calibration; the slow one then raises there, which is right too
        shoal.init()
        if sys.argv[1] == "calls":
            others, odd_spec, odd_rank = sys.argv[2], sys.argv[3], int(sys.argv[4])
            rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 1
            mine = odd_spec if shoal.rank() == odd_rank else others
            while round_ < rounds:
                call(mine)
                round_ += 1
        else:
            one_difference(sys.argv[1])
        shoal.barrier()
    except shoal.ShoalError as e:
        print(f"RAISED {type(e).__name__} at round {round_}: {e}", flush=True)
        print(f"RSS {start} {rss_kib()}", flush=True)
        sys.exit(3)
    print("NO ERROR", flush=True)
    print(f"RSS {start} {rss_kib()}", flush=True)


if __name__ == "__main__":
    main()
