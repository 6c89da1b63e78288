"""Hierarchical allreduce with the switch as the inter-host step
(algorithm="hierarchical_ina"), checked against numpy for the dtypes and ops
the switch aggregates and odd counts. Ranks learn their host from
SHOAL_HOST_ID (the test gives each block of ranks one). argv: iterations
(default 1). Prints what the selector picks for a large float32 allreduce
("choice=NAME") so the test can check the selection too.

Values are small integers so every result is exact whatever the order of
the additions."""

from __future__ import annotations

import os
import sys

import numpy as np
from collectives import combine, decode, encode, values, wrap

import shoal

ALGO = os.environ.get("INA_ALGO", "hierarchical_ina")
DTYPES = os.environ.get("INA_DTYPES", "float32,float16,bfloat16,int32").split(",")
COUNTS = [int(c) for c in os.environ.get("INA_COUNTS", "0,1,7,1001,100003").split(",")]
OPS = os.environ.get("INA_OPS", "sum,min,max,avg").split(",")


def check_one(dtype: str, op: str, count: int, salt: int) -> None:
    r, p = shoal.rank(), shoal.size()
    contrib = [values(dtype, op, q, count, salt) for q in range(p)]
    x = encode(contrib[r], dtype)
    shoal.allreduce(x, op, algorithm=ALGO or None, dtype=dtype)
    want = wrap(combine(np.stack(contrib), op, dtype), dtype) if count else np.zeros(0)
    got = decode(x, dtype)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)[:5]
        where = f"{ALGO} allreduce {dtype} {op} count={count} rank={r}"
        raise AssertionError(f"{where}: wrong at {bad}: {got[bad]} vs {want[bad]}")


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    shoal.init()
    choice = shoal.world().choose_algorithm("allreduce", 4 << 20, "float32")
    cases = 0
    for it in range(iterations):
        for dtype in DTYPES:
            for op in OPS:
                if op == "avg" and dtype == "int32":
                    continue
                for count in COUNTS:
                    check_one(dtype, op, count, salt=it)
                    cases += 1
    shoal.finalize()
    print(f"OK ina_hier {cases} cases choice={choice}", flush=True)


if __name__ == "__main__":
    main()
