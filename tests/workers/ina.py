"""Allreduce through the aggregation switch (algorithm="ina"), checked against
numpy for several dtypes, ops and sizes. argv: iterations (default 1).

Values are small integers so every result is exact whatever the order in
which the switch adds the packets."""

from __future__ import annotations

import os
import sys

import numpy as np
from collectives import combine, decode, encode, values, wrap

import shoal

DTYPES = os.environ.get("INA_DTYPES", "float32,float16,bfloat16,int32").split(",")
COUNTS = [int(c) for c in os.environ.get("INA_COUNTS", "0,1,7,1000,100003").split(",")]


def check_one(dtype: str, op: str, count: int, salt: int) -> None:
    r, p = shoal.rank(), shoal.size()
    contrib = [values(dtype, op, q, count, salt) for q in range(p)]
    x = encode(contrib[r], dtype)
    shoal.allreduce(x, op, algorithm="ina", dtype=dtype)
    want = wrap(combine(np.stack(contrib), op, dtype), dtype) if count else np.zeros(0)
    got = decode(x, dtype)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)[:5]
        where = f"ina allreduce {dtype} {op} count={count} rank={r}"
        raise AssertionError(f"{where}: wrong at {bad}: {got[bad]} vs {want[bad]}")


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    shoal.init()
    cases = 0
    for it in range(iterations):
        for dtype in DTYPES:
            ops = ["sum", "min", "max"] + (["avg"] if dtype != "int32" else [])
            for op in ops:
                for count in COUNTS:
                    check_one(dtype, op, count, salt=it)
                    cases += 1
    shoal.finalize()
    print(f"OK ina {cases} cases", flush=True)


if __name__ == "__main__":
    main()
