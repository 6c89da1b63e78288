"""Every collective x algorithm over a few dtypes, ops and odd counts, exact
against numpy (the checks of collectives.py), sized for the UCX tests: small
and odd counts ride inline with their header, the large odd count sends its
payloads as separate UCX messages (rendezvous). Prints `OK <n> cases`.

    ucx_collectives.py [COLLECTIVES]   (comma-separated; default: all)
"""

from __future__ import annotations

import os
import sys

from collectives import Case, run_case

import shoal

COLLECTIVES = (
    "allreduce",
    "reduce",
    "reduce_scatter",
    "broadcast",
    "allgather",
    "gather",
    "scatter",
    "alltoall",
    "barrier",
)
REDUCTIONS = (("float32", "sum"), ("int32", "bxor"), ("float64", "max"), ("bfloat16", "sum"), ("int8", "prod"))
BIG = int(os.environ.get("BIG_COUNT", "262147"))  # odd; float32 blocks past the 64 KiB inline limit


def cases(only: set[str] | None) -> list[Case]:
    p = shoal.size()
    out = []
    for coll in COLLECTIVES:
        if only and coll not in only:
            continue
        reduces = coll in ("allreduce", "reduce", "reduce_scatter")
        root = p - 1 if coll in ("reduce", "broadcast", "gather", "scatter") else 0
        for algo in shoal.algorithms(coll):
            if algo.startswith("shm_"):
                continue  # reads peers' memory through the shm transport's window, which ucx has not
            for dt, op in REDUCTIONS if reduces else (("float32", "sum"), ("uint8", "sum")):
                for count in (0, 1, 7):
                    out.append(Case(coll, algo, dt, op, count, root))
            out.append(Case(coll, algo, "float32", "sum", BIG, root))
    return out


def main() -> int:
    only = set(sys.argv[1].split(",")) if len(sys.argv) > 1 and sys.argv[1] else None
    shoal.init()
    todo = cases(only)
    for case in todo:
        run_case(case)
    shoal.finalize()
    print(f"OK {len(todo)} cases", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
