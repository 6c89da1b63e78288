"""Sparse COO all_reduce (SUM) of the shoal backend against Gloo's output for
the same inputs (sparse and dense dimensions, ranks with different numbers
of entries, one with none, overlapping indices, asynchronous), and the
error of every sparse call shoal does not take. Launched by
tests/test_torch_backend.py; prints "OK torch sparse"."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

import shoal.torch  # noqa: F401  (registers the backend)


def sparse(rank: int, n: int, sparse_dims: int, dense: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Rank r has r + 1 entries (rank 1 none), some at the same indices as other ranks'."""
    nnz = 0 if rank == 1 else rank + 1
    g = torch.Generator().manual_seed(rank * 31 + sparse_dims)
    indices = torch.randint(0, n + 1, (sparse_dims, nnz), generator=g)
    values = torch.randint(-5, 6, (nnz, *dense), generator=g).to(dtype)
    return torch.sparse_coo_tensor(indices, values, (n + 1,) * sparse_dims + dense)


def same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.layout == b.layout == torch.sparse_coo, (what, a.layout, b.layout)
    a, b = a.coalesce(), b.coalesce()
    assert torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values()), (what, a, b)
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape)


def expect_error(fragment: str, fn: Any) -> None:
    try:
        fn()
    except (ValueError, RuntimeError) as e:
        assert fragment in str(e), f"{e!r} does not mention {fragment!r}"
        return
    raise AssertionError("no error")


def main() -> None:
    dist.init_process_group("shoal")
    r, n = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(list(range(n)), backend="gloo")
    for sparse_dims in (1, 2, 3):
        for dense in ((), (2,), (2, 3)):
            for dtype in (torch.float32, torch.float64, torch.int64):
                what = f"sparse_dims={sparse_dims} dense={dense} {dtype}"
                mine, ref = sparse(r, n, sparse_dims, dense, dtype), sparse(r, n, sparse_dims, dense, dtype)
                dist.all_reduce(mine)
                dist.all_reduce(ref, group=gloo)
                same(mine, ref, what)
    # asynchronous, and the work's result
    mine, ref = sparse(r, n, 2, (2,), torch.float32), sparse(r, n, 2, (2,), torch.float32)
    work = dist.all_reduce(mine, async_op=True)
    work.wait()
    dist.all_reduce(ref, group=gloo)
    same(mine, ref, "async")
    same(work.result()[0], ref, "async result")

    # what shoal does not take: a clear error, before anything is sent
    x = sparse(r, n, 1, (), torch.float32)
    expect_error("SUM only", lambda: dist.all_reduce(x, op=dist.ReduceOp.MAX))
    expect_error("sparse_coo tensors only in all_reduce with SUM", lambda: dist.broadcast(x, 0))
    expect_error("sparse_coo tensors only in all_reduce with SUM", lambda: dist.all_reduce_coalesced([x]))
    dist.barrier()
    print(f"rank {r}: OK torch sparse", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
