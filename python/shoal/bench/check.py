"""Buffer layouts, input patterns and reference results, shared by every worker.

Sizes follow nccl-tests: the size of a call is the bytes of its largest
buffer, i.e. the whole buffer for allreduce, broadcast and reduce, the output
of allgather (n blocks), the input of reduce_scatter (n blocks) and either
buffer of alltoall (n blocks). Block collectives round the element count down
to a multiple of the number of ranks (at least one element per rank).

The check run fills inputs with small integers (1..11, or 1..2 for ``prod``)
so every reduction is exact in every dtype whatever the combination order,
and compares bit for bit with a numpy reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")
OPS = ("sum", "prod", "min", "max")
REDUCING = ("allreduce", "reduce", "reduce_scatter")
BLOCKED = ("allgather", "reduce_scatter", "alltoall")

#: nccl-tests' bus bandwidth factors: busbw = algbw * factor(n).
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def storage_dtype(dtype: str) -> np.dtype:
    """The numpy dtype holding ``dtype`` (bfloat16 lives in uint16)."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)


def itemsize(dtype: str) -> int:
    return storage_dtype(dtype).itemsize


@dataclass(frozen=True)
class Layout:
    """Element counts of one call: ``count`` is the size column's element count."""

    collective: str
    dtype: str
    nranks: int
    count: int  # elements of the largest buffer
    in_count: int
    out_count: int  # 0: in place (the input buffer is the output)

    @property
    def nbytes(self) -> int:
        return self.count * itemsize(self.dtype)

    @property
    def block(self) -> int:
        return self.count // self.nranks if self.collective in BLOCKED else self.count


def layout(collective: str, nbytes: int, dtype: str, nranks: int) -> Layout:
    count = max(nbytes // itemsize(dtype), 1)
    if collective in BLOCKED:
        count = max(count // nranks, 1) * nranks
    block = count // nranks
    ins, outs = {
        "allreduce": (count, 0),
        "broadcast": (count, 0),
        "reduce": (count, 0),
        "allgather": (block, count),
        "reduce_scatter": (count, block),
        "alltoall": (count, count),
    }[collective]
    return Layout(collective, dtype, nranks, count, ins, outs)


def allocate(lay: Layout) -> tuple[np.ndarray, np.ndarray | None]:
    """Input and output buffers (output None for in-place collectives), pages touched."""
    st = storage_dtype(lay.dtype)
    inp = np.zeros(lay.in_count, dtype=st)
    inp.fill(0)  # np.zeros maps pages lazily; touch them now, not in the first timed call
    out = None
    if lay.out_count:
        out = np.zeros(lay.out_count, dtype=st)
        out.fill(0)
    return inp, out


def values(rank: int, start: int, count: int, op: str) -> np.ndarray:
    """Rank ``rank``'s contribution to elements [start, start+count) as float64."""
    idx = np.arange(start, start + count, dtype=np.int64)
    if op == "prod":
        return np.asarray(1.0 + ((idx + rank) % 3 == 0), dtype=np.float64)
    return (((idx * 7 + rank * 3) % 11) + 1).astype(np.float64)


def is_integer(dtype: str) -> bool:
    """Integer element type (bfloat16 is stored in uint16 but is a float)."""
    return dtype != "bfloat16" and storage_dtype(dtype).kind in "iu"


def from_storage(arr: np.ndarray, dtype: str) -> np.ndarray:
    """``dtype`` storage as float64 values (the inverse of :func:`to_storage`)."""
    if dtype == "bfloat16":
        return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return arr.astype(np.float64)


def to_storage(v: np.ndarray, dtype: str) -> np.ndarray:
    """Float64 values (exactly representable) as ``dtype`` storage; integers wrap like C."""
    if dtype == "bfloat16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    st = storage_dtype(dtype)
    if st.kind in "iu":
        return v.astype(np.int64).astype(st)
    return v.astype(st)


def _reduced(nranks: int, start: int, count: int, op: str, dtype: str) -> np.ndarray:
    """The reduction over all ranks of their contributions, as ``dtype`` storage."""
    st = storage_dtype(dtype)
    acc = values(0, start, count, op)
    integer = is_integer(dtype)
    if integer:
        acc = acc.astype(np.int64)
    for r in range(1, nranks):
        v = values(r, start, count, op)
        v = v.astype(np.int64) if integer else v
        if op == "sum":
            acc += v
        elif op == "prod":
            acc *= v
        elif op == "min":
            np.minimum(acc, v, out=acc)
        elif op == "max":
            np.maximum(acc, v, out=acc)
        else:
            raise ValueError(f"unsupported op {op!r}")
    return acc.astype(st) if integer else to_storage(acc, dtype)


def fill_for_check(lay: Layout, rank: int, op: str, root: int, inp: np.ndarray, out: np.ndarray | None) -> None:
    """Inputs get this rank's pattern, outputs a sentinel (0, which no pattern value is)."""
    if lay.collective == "broadcast" and rank != root:
        inp[:] = 0
    else:
        inp[:] = to_storage(values(rank, 0, lay.in_count, op), lay.dtype)
    if out is not None:
        out[:] = 0


def expected(lay: Layout, rank: int, op: str, root: int) -> np.ndarray | None:
    """What the output (or in-place buffer) of ``rank`` must hold; None if unspecified (reduce off root)."""
    n, b, c = lay.nranks, lay.block, lay.count
    coll = lay.collective
    if coll == "allreduce":
        return _reduced(n, 0, c, op, lay.dtype)
    if coll == "reduce":
        return _reduced(n, 0, c, op, lay.dtype) if rank == root else None
    if coll == "broadcast":
        return to_storage(values(root, 0, c, op), lay.dtype)
    if coll == "allgather":
        return np.concatenate([to_storage(values(q, 0, b, op), lay.dtype) for q in range(n)])
    if coll == "reduce_scatter":
        return _reduced(n, rank * b, b, op, lay.dtype)
    if coll == "alltoall":
        return np.concatenate([to_storage(values(q, rank * b, b, op), lay.dtype) for q in range(n)])
    raise ValueError(f"unknown collective {coll!r}")


def count_errors(lay: Layout, rank: int, op: str, root: int, inp: np.ndarray, out: np.ndarray | None) -> int:
    """Elements of this rank's result that differ from the reference."""
    want = expected(lay, rank, op, root)
    if want is None:
        return 0
    got = inp if out is None else out
    if got.shape != want.shape:
        return int(want.size)
    return int(np.count_nonzero(got != want))
