"""Runs every collective x algorithm over dtypes, ops, counts and roots on the
ranks of one job, checking each result against numpy. Launched by the tests
through ``shoal run``; exits non-zero with the failing case on a mismatch.

Inputs are small integers so that every reduction is exact in every dtype
(including float16 and bfloat16) whatever the combination order, and the
check can be exact.
"""

from __future__ import annotations

import os
import sys
import zlib
from typing import Callable

import numpy as np

import shoal

FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int8", "uint8", "int32", "int64")
BIG = int(os.environ.get("BIG_COUNT", "1048583"))  # a prime a little above a million
ONE_HOST_SHM = os.environ.get("SHOAL_TRANSPORT") not in ("tcp", "ucx") and "SHOAL_HOST_ID" not in os.environ
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
REDUCING = ("allreduce", "reduce", "reduce_scatter")
ROOTED = ("reduce", "broadcast", "gather", "scatter")


def runnable_here(algo: str) -> bool:
    """The shm_* algorithms read peers' memory: one host over shm only
    (tests/test_shm_collectives.py runs them all)."""
    return ONE_HOST_SHM or not algo.startswith("shm_")


def ops_for(dtype: str) -> list[str]:
    common = ["sum", "prod", "min", "max"]
    return common + (["avg"] if dtype in FLOATS else ["band", "bor", "bxor"])


def np_type(dtype: str) -> np.dtype:
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)


def values(dtype: str, op: str, rank: int, count: int, salt: int) -> np.ndarray:
    """The contribution of `rank` as float64 values exactly representable in `dtype`."""
    rng = np.random.default_rng([rank, count, salt])
    if op == "prod":
        v = rng.choice([-1.0, 1.0, 2.0] if dtype not in ("uint8",) else [1.0, 2.0], size=count)
    elif dtype == "uint8":
        v = rng.integers(0, 30, size=count).astype(np.float64)
    else:
        v = rng.integers(-15, 16, size=count).astype(np.float64)
    if op == "prod" and count:
        # keep products small: only a few ranks contribute 2s
        v[(np.arange(count) + rank) % 4 != 0] = np.sign(v[(np.arange(count) + rank) % 4 != 0])
        if dtype == "uint8":
            v = np.abs(v)
    return v


def encode(v: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return v.astype(dtype)


def decode(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def combine(stack: np.ndarray, op: str, dtype: str) -> np.ndarray:
    """Reference reduction over axis 0 of float64 contributions."""
    if op in ("band", "bor", "bxor"):
        ints = stack.astype(np.int64)
        f = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
        return f.reduce(ints, axis=0).astype(np.float64)
    if op == "avg":
        return encode_roundtrip(stack.sum(axis=0) / stack.shape[0], dtype)
    return {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}[op](stack, axis=0)


def encode_roundtrip(v: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":  # round to nearest even, like the core
        bits = v.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "float64":
        return v
    # the core divides in float64, rounds to float32, then to the dtype
    return v.astype(np.float32).astype(dtype).astype(np.float64)


def wrap(v: np.ndarray, dtype: str) -> np.ndarray:
    """Integer results wrap like the dtype."""
    if dtype in INTS:
        return v.astype(np.int64).astype(dtype).astype(np.float64)
    return v


class Case:
    def __init__(self, coll: str, algo: str, dtype: str, op: str, count: int, root: int) -> None:
        self.coll, self.algo, self.dtype, self.op, self.count, self.root = coll, algo, dtype, op, count, root

    def __str__(self) -> str:
        return (
            f"{self.coll}(algorithm={self.algo}, dtype={self.dtype}, op={self.op}, count={self.count}, "
            f"root={self.root}) world={shoal.size()} rank={shoal.rank()}"
        )


def check(case: Case, got: np.ndarray | None, want: np.ndarray | None) -> None:
    if want is None:
        return
    g = decode(np.asarray(got).reshape(-1), case.dtype)
    w = wrap(np.asarray(want, dtype=np.float64).reshape(-1), case.dtype)
    if g.shape != w.shape or not np.array_equal(g, w):
        bad = np.flatnonzero(g != w)[:5] if g.shape == w.shape else "shape"
        raise AssertionError(f"{case}: wrong result at {bad}: got {g[:8]} want {w[:8]}")


def run_case(case: Case) -> None:
    r, p, n, dt = shoal.rank(), shoal.size(), case.count, case.dtype
    salt = zlib.crc32(f"{case.coll}/{case.algo}/{case.op}".encode()) % 1000
    if case.coll == "allreduce":
        contrib = [values(dt, case.op, q, n, salt) for q in range(p)]
        x = encode(contrib[r], dt)
        shoal.allreduce(x, case.op, algorithm=case.algo, dtype=dt)
        check(case, x, combine(np.stack(contrib), case.op, dt) if n else np.zeros(0))
    elif case.coll == "reduce":
        contrib = [values(dt, case.op, q, n, salt) for q in range(p)]
        x = encode(contrib[r], dt)
        before = x.copy()
        shoal.reduce(x, case.root, case.op, algorithm=case.algo, dtype=dt)
        if r == case.root:
            check(case, x, combine(np.stack(contrib), case.op, dt) if n else np.zeros(0))
        elif not np.array_equal(x, before):
            raise AssertionError(f"{case}: a non-root buffer was modified")
    elif case.coll == "reduce_scatter":
        contrib = [values(dt, case.op, q, n * p, salt) for q in range(p)]
        out = np.empty(n, np_type(dt))
        shoal.reduce_scatter(encode(contrib[r], dt), out, case.op, algorithm=case.algo, dtype=dt)
        full = combine(np.stack(contrib), case.op, dt) if n else np.zeros(0)
        check(case, out, full[r * n : (r + 1) * n])
    elif case.coll == "broadcast":
        src = values(dt, "sum", case.root, n, salt)
        x = encode(src if r == case.root else np.full(n, 3.0), dt)
        shoal.broadcast(x, case.root, algorithm=case.algo, dtype=dt)
        check(case, x, src)
    elif case.coll == "allgather":
        blocks = [values(dt, "sum", q, n, salt) for q in range(p)]
        out = np.empty(n * p, np_type(dt))
        shoal.allgather(encode(blocks[r], dt), out, algorithm=case.algo, dtype=dt)
        check(case, out, np.concatenate(blocks))
    elif case.coll == "gather":
        blocks = [values(dt, "sum", q, n, salt) for q in range(p)]
        out = np.empty(n * p, np_type(dt)) if r == case.root else None
        res = shoal.gather(encode(blocks[r], dt), case.root, out, algorithm=case.algo, dtype=dt)
        check(case, res, np.concatenate(blocks) if r == case.root else None)
    elif case.coll == "scatter":
        full = values(dt, "sum", case.root, n * p, salt)
        out = np.empty(n, np_type(dt))
        x = encode(full, dt) if r == case.root else None
        shoal.scatter(x, out, case.root, algorithm=case.algo, dtype=dt)
        check(case, out, full[r * n : (r + 1) * n])
    elif case.coll == "alltoall":
        mats = [values(dt, "sum", q, n * p, salt) for q in range(p)]
        out = np.empty(n * p, np_type(dt))
        shoal.alltoall(encode(mats[r], dt), out, algorithm=case.algo, dtype=dt)
        check(case, out, np.concatenate([mats[q][r * n : (r + 1) * n] for q in range(p)]))
    elif case.coll == "barrier":
        shoal.barrier()
    else:
        raise ValueError(case.coll)


def cases(only: set[str] | None) -> list[Case]:
    p = shoal.size()
    roots = sorted({0, p - 1, p // 2})
    out = []
    for coll in COLLECTIVES:
        if only and coll not in only:
            continue
        reduces = coll in REDUCING
        rooted = coll in ROOTED
        for algo in filter(runnable_here, shoal.algorithms(coll)):
            for dt in FLOATS + INTS:
                for op in ops_for(dt) if reduces else ["sum"]:
                    for count in (0, 1, 7):
                        for root in roots if rooted else [0]:
                            out.append(Case(coll, algo, dt, op, count, root))
            # one large case per algorithm, and one large half-precision one for reductions
            out.append(Case(coll, algo, "float32", "sum", BIG, p - 1 if rooted else 0))
            if reduces:
                out.append(Case(coll, algo, "bfloat16", "max", BIG // 3, 0))
    return out


def run_cases(make_cases: Callable[[], list[Case]]) -> int:
    """Joins the job, runs the cases `make_cases` lists (it may ask the
    group's size), leaves, and prints `OK <n> cases`."""
    shoal.init()
    todo = make_cases()
    for case in todo:
        run_case(case)
    shoal.finalize()
    print(f"OK {len(todo)} cases", flush=True)
    return 0


def only_collectives() -> set[str] | None:
    """The collectives named by the first argument (comma-separated), or all."""
    return set(sys.argv[1].split(",")) if len(sys.argv) > 1 and sys.argv[1] else None


def main() -> int:
    only = only_collectives()
    return run_cases(lambda: cases(only))


if __name__ == "__main__":
    sys.exit(main())
