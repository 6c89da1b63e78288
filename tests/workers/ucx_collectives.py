"""Every collective x algorithm over a few dtypes, ops and odd counts, exact
against numpy (the checks of collectives.py), sized for the UCX tests: small
and odd counts ride inline with their header, the large odd count sends its
payloads as separate UCX messages (rendezvous). Prints `OK <n> cases`.

    ucx_collectives.py [COLLECTIVES]   (comma-separated; default: all)
"""

from __future__ import annotations

import os
import sys

from collectives import COLLECTIVES, REDUCING, ROOTED, Case, only_collectives, run_cases, runnable_here

import shoal

REDUCTIONS = (("float32", "sum"), ("int32", "bxor"), ("float64", "max"), ("bfloat16", "sum"), ("int8", "prod"))
BIG = int(os.environ.get("BIG_COUNT", "262147"))  # odd; float32 blocks past the 64 KiB inline limit


def cases(only: set[str] | None) -> list[Case]:
    p = shoal.size()
    out = []
    for coll in COLLECTIVES:
        if only and coll not in only:
            continue
        reduces = coll in REDUCING
        root = p - 1 if coll in ROOTED else 0
        for algo in filter(runnable_here, shoal.algorithms(coll)):  # not shm_*: ucx lends no memory
            for dt, op in REDUCTIONS if reduces else (("float32", "sum"), ("uint8", "sum")):
                for count in (0, 1, 7):
                    out.append(Case(coll, algo, dt, op, count, root))
            out.append(Case(coll, algo, "float32", "sum", BIG, root))
    return out


def main() -> int:
    only = only_collectives()
    return run_cases(lambda: cases(only))


if __name__ == "__main__":
    sys.exit(main())
