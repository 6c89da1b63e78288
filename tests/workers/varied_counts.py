"""Collectives with per-rank counts (allgather and reduce_scatter with
``counts``, alltoall with ``send_counts``/``recv_counts``) on the ranks of one
job, over dtypes and uneven counts with zeros, checked against numpy.
Launched by tests/test_collectives.py through ``shoal run``."""

from __future__ import annotations

import numpy as np

import shoal

DTYPES = ("float32", "float64", "float16", "int8", "uint8", "int32", "int64")
# per seed: a mix of zeros, ones and odd sizes, a different one per rank
SIZES = (0, 1, 5, 0, 13, 2, 31, 7)


def counts_for(seed: int, n: int) -> list[int]:
    return [SIZES[(q * 3 + seed) % len(SIZES)] for q in range(n)]


def contribution(rank: int, count: int, dtype: str, salt: int) -> np.ndarray:
    """Small integers, exact in every dtype, different per rank and salt."""
    return ((np.arange(count) * 7 + rank * 3 + salt) % 11).astype(dtype)


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: got {got.tolist()}, want {want.tolist()}")


def allgatherv(r: int, n: int, dtype: str, seed: int) -> None:
    counts = counts_for(seed, n)
    x = contribution(r, counts[r], dtype, seed)
    want = np.concatenate([contribution(q, counts[q], dtype, seed) for q in range(n)])
    check(shoal.allgather(x, counts=counts), want, f"allgather counts={counts} {dtype}")
    # in place: x is this rank's block of out
    out = np.zeros(sum(counts), dtype=dtype)
    start = sum(counts[:r])
    out[start : start + counts[r]] = x
    shoal.allgather(out[start : start + counts[r]], out=out, counts=counts)
    check(out, want, f"in-place allgather counts={counts} {dtype}")


def reduce_scatterv(r: int, n: int, dtype: str, seed: int) -> None:
    counts = counts_for(seed + 1, n)
    total, start = sum(counts), sum(counts[:r])
    inputs = [contribution(q, total, dtype, seed) for q in range(n)]
    for op, reduce in (("sum", np.sum), ("max", np.max)):
        want = reduce(np.stack(inputs).astype(np.float64), axis=0)[start : start + counts[r]].astype(dtype)
        got = shoal.reduce_scatter(inputs[r].copy(), op=op, counts=counts)
        check(got, want, f"reduce_scatter {op} counts={counts} {dtype}")
    # in place: out is this rank's block of x
    x = inputs[r].copy()
    shoal.reduce_scatter(x, out=x[start : start + counts[r]], counts=counts)
    want = np.sum(np.stack(inputs).astype(np.float64), axis=0)[start : start + counts[r]].astype(dtype)
    check(x[start : start + counts[r]], want, f"in-place reduce_scatter counts={counts} {dtype}")


def alltoallv(r: int, n: int, dtype: str, seed: int) -> None:
    # matrix[s][d]: what rank s sends to rank d
    matrix = [[SIZES[(s * 5 + d * 3 + seed) % len(SIZES)] for d in range(n)] for s in range(n)]
    sends = matrix[r]
    recvs = [matrix[s][r] for s in range(n)]
    x = contribution(r, sum(sends), dtype, seed)

    def block(s: int, d: int) -> np.ndarray:
        start = sum(matrix[s][:d])
        return contribution(s, sum(matrix[s]), dtype, seed)[start : start + matrix[s][d]]

    want = np.concatenate([block(s, r) for s in range(n)])
    check(shoal.alltoall(x, send_counts=sends, recv_counts=recvs), want, f"alltoall matrix={matrix} {dtype}")
    work = shoal.alltoall(x, send_counts=sends, async_op=True)
    check(work.wait(), want, f"async alltoall without recv_counts matrix={matrix} {dtype}")


def expect_value_error(fragment: str, fn, *args, **kwargs) -> None:  # noqa: ANN001
    try:
        fn(*args, **kwargs)
    except ValueError as e:
        assert fragment in str(e), f"{e} does not mention {fragment!r}"
        return
    raise AssertionError(f"no ValueError ({fragment})")


def errors(r: int, n: int) -> None:
    x = np.zeros(3, np.float32)
    expect_value_error("counts must be", shoal.allgather, x, counts=[3] * (n + 1))
    expect_value_error("x has 3 elements, but counts says", shoal.allgather, x, counts=[4] * n)
    expect_value_error("counts add up to", shoal.reduce_scatter, x, counts=[4] * n)
    expect_value_error("x has 3 elements, but send_counts says", shoal.alltoall, x, send_counts=[4] * n)
    # counts that do not match up are refused on every rank alike (after the counts' exchange)
    if n > 1:
        recvs = [2 if (r == 1 and s == 0) else 0 for s in range(n)]
        fragment = "rank 0 sends 0 elements to rank 1, but rank 1 expects 2"
        expect_value_error(fragment, shoal.alltoall, np.zeros(0, np.float32), send_counts=[0] * n, recv_counts=recvs)


def main() -> None:
    shoal.init()
    r, n = shoal.rank(), shoal.size()
    for seed in range(3):
        for dtype in DTYPES:
            allgatherv(r, n, dtype, seed)
            reduce_scatterv(r, n, dtype, seed)
            alltoallv(r, n, dtype, seed)
    errors(r, n)
    shoal.barrier()
    shoal.finalize()
    print("OK varied counts")


if __name__ == "__main__":
    main()
