"""Runs the shared-memory (`shm_*`) algorithms of every collective over
dtypes, ops and odd counts on the ranks of one job, checking each result
exactly against numpy (the inputs of collectives.py keep every reduction
exact). Argument: comma-separated counts. Exits non-zero on a mismatch."""

from __future__ import annotations

import sys

from collectives import REDUCING, ROOTED, Case, run_cases

import shoal

DTYPES = ("float32", "float64", "int32", "bfloat16", "float16")
OPS = ("sum", "prod", "min", "max")
COLLECTIVES = ("allreduce", "reduce_scatter", "broadcast", "allgather", "reduce", "gather", "scatter", "alltoall")


def cases(counts: list[int]) -> list[Case]:
    p = shoal.size()
    out = []
    for coll in COLLECTIVES:
        reduces = coll in REDUCING
        rooted = coll in ROOTED
        for algo in (a for a in shoal.algorithms(coll) if a.startswith("shm_")):
            for dt in DTYPES:
                for op in OPS if reduces else ["sum"]:
                    for count in counts:
                        root = (count + 1) % p if rooted else 0
                        out.append(Case(coll, algo, dt, op, count, root))
    assert out, "no shm_ algorithms"
    return out


def main() -> int:
    counts = [int(c) for c in sys.argv[1].split(",")]
    return run_cases(lambda: cases(counts))


if __name__ == "__main__":
    sys.exit(main())
