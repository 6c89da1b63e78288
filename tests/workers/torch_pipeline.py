"""The CUDA path's pipeline (shoal/torch/_pipeline.py, _cuda.py) on CPU
tensors, with the host copy engine standing in for a CUDA copy stream:
real shoal ranks, real collectives, results against a torch reference.

    torch_pipeline.py results    every chunked and whole call, many jobs in
                                 flight mixed with host-path calls, a small
                                 staging pool; prints "OK torch pipeline"
    torch_pipeline.py group      the process group's calls (dist.all_reduce, ...,
                                 DDP) on CPU tensors routed through the pipeline
                                 (_cuda.use_host_engine), as CUDA tensors are;
                                 prints "OK torch pipeline group"
    torch_pipeline.py chunks     all_reduces in chunks of 1 MiB with ragged ends
                                 (whose host algorithm the test reads from the
                                 trace); prints "OK torch pipeline chunks"
    torch_pipeline.py failures   a failing copy fails its job (the next job
                                 still works); ranks chunking differently get
                                 a mismatch error; staging is given back each time;
                                 prints "RAISED <type>" and "OK torch pipeline failures"

The copies of rank r take r milliseconds each, so that a step issued before
its copy is done reads stale staging, and ranks issue at different times.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.futures import Future

import shoal
from shoal.torch import _cuda, _pipeline
from shoal.torch._copies import HostCopies
from shoal.torch._group import ShoalProcessGroup
from shoal.torch._host import _op_name, _reduction_for
from shoal.torch._pipeline import Job, Step
from shoal.torch._staging import MIN_CLASS, StagingPool, pageable
from shoal.torch._work import ShoalWork

CHUNK = 4096  # bytes: a few thousand elements make several chunks with a ragged last one
ReduceOp = torch.distributed.ReduceOp


def values(rank: int, numel: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank ``rank``'s data: small integers, so that sums are exact in every type."""
    base = (torch.arange(numel, dtype=torch.int64) * (rank + 3) + salt) % 7
    if dtype == torch.bool:
        return base % 3 == 0
    if dtype.is_complex:
        return torch.complex(base.double(), -base.double()).to(dtype)
    return base.to(dtype)


def reference(n: int, numel: int, dtype: torch.dtype, op: Any, salt: int = 0) -> torch.Tensor:
    stack = torch.stack([values(q, numel, dtype, salt) for q in range(n)]).to(
        torch.complex128 if dtype.is_complex else torch.float64
    )
    if op == ReduceOp.SUM:
        out = stack.sum(0)
    elif op == ReduceOp.MAX:
        out = stack.amax(0)
    elif op == ReduceOp.AVG:
        out = stack.mean(0)
    else:
        raise AssertionError(op)
    if dtype == torch.bool:
        return out != 0
    return out.to(dtype)


def check(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    tol = 1e-2 if want.dtype in (torch.bfloat16, torch.float16) else 1e-6
    same = (
        torch.equal(got, want)
        if not want.is_floating_point()
        else torch.allclose(got.double(), want.double(), atol=tol)
    )
    if got.dtype == want.dtype and same:
        return
    wrong = ((got != want).nonzero().reshape(-1) if got.shape == want.shape else torch.arange(0))[:8]
    raise AssertionError(
        f"{what}: {got.dtype} {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)}, wrong at {wrong.tolist()}: "
        f"got {got.reshape(-1)[wrong]} want {want.reshape(-1)[wrong]}"
    )


def done(work: ShoalWork, copies: HostCopies) -> None:
    work.wait()
    assert work.is_completed() and work.is_success()
    assert copies.pool.lent_bytes == 0, f"{copies.pool.lent_bytes} bytes of staging still lent after completion"


def all_reduces(group: shoal.Group, copies: HostCopies) -> None:
    r, n = group.rank, group.size
    cases = [
        (torch.float32, 3001, ReduceOp.SUM),
        (torch.float32, 3001, ReduceOp.MAX),
        (torch.float32, 2048, ReduceOp.AVG),  # chunks end exactly at the end
        (torch.float64, 1025, ReduceOp.SUM),
        (torch.bfloat16, 4097, ReduceOp.SUM),
        (torch.float16, 2049, ReduceOp.SUM),
        (torch.int64, 999, ReduceOp.SUM),
        (torch.int8, 9001, ReduceOp.SUM),
        (torch.uint8, 5, ReduceOp.MAX),  # one chunk smaller than a chunk
        (torch.bool, 10000, ReduceOp.SUM),
        (torch.complex64, 777, ReduceOp.SUM),
        (torch.float32, 0, ReduceOp.SUM),  # nothing to do: completes at once
    ]
    for dtype, numel, op in cases:
        t = values(r, numel, dtype).reshape(-1, 1) if numel else values(r, 0, dtype)
        shoal_op = _reduction_for(dtype, _op_name(op))
        done(_cuda.all_reduce(group, [t], [shoal_op], copies, chunk_bytes=CHUNK), copies)
        check(t.reshape(-1), reference(n, numel, dtype, op), f"all_reduce {dtype} x{numel} {op}")

    # coalesced: one job for tensors of mixed types, as DDP's buckets and the coalescing manager
    ts = [values(r, 1500, torch.float32, 1), values(r, 2500, torch.int32, 2), values(r, 3, torch.bfloat16, 3)]
    done(_cuda.all_reduce(group, ts, ["sum"] * 3, copies, chunk_bytes=CHUNK), copies)
    for t, salt in zip(ts, (1, 2, 3)):
        check(t, reference(n, t.numel(), t.dtype, ReduceOp.SUM, salt), f"coalesced {t.dtype}")


def large_chunks(group: shoal.Group, copies: HostCopies) -> None:
    """All_reduces in chunks of 1 MiB, the last ragged: their host algorithm is
    chunk_algorithm's (shm_sharded by default on one host)."""
    r, n = group.rank, group.size
    for dtype, numel, op in [
        (torch.float32, 600_001, ReduceOp.SUM),
        (torch.bfloat16, 700_001, ReduceOp.SUM),
        (torch.int8, 2_500_001, ReduceOp.MAX),
        (torch.float64, 131_072, ReduceOp.SUM),  # exactly one chunk
    ]:
        t = values(r, numel, dtype)
        done(_cuda.all_reduce(group, [t], [_reduction_for(dtype, _op_name(op))], copies, chunk_bytes=1 << 20), copies)
        check(t, reference(n, numel, dtype, op), f"all_reduce {dtype} x{numel} {op} in chunks of 1 MiB")


def broadcast_and_reduce(group: shoal.Group, copies: HostCopies) -> None:
    r, n = group.rank, group.size
    root = n - 1
    t = values(r, 5003, torch.int32) if r == root else torch.full((5003,), -1, dtype=torch.int32)
    done(_cuda.broadcast(group, t, root, copies, chunk_bytes=CHUNK), copies)
    check(t, values(root, 5003, torch.int32), "broadcast")

    root = 1 % n
    t = values(r, 3333, torch.float64)
    done(_cuda.reduce(group, t, root, "sum", copies, chunk_bytes=CHUNK), copies)
    want = reference(n, 3333, torch.float64, ReduceOp.SUM) if r == root else values(r, 3333, torch.float64)
    check(t, want, f"reduce (rank {r}, root {root})")


def whole_calls(group: shoal.Group, copies: HostCopies) -> None:
    r, n = group.rank, group.size
    ins = [values(r, 1001, torch.float32), values(r, 6, torch.bfloat16, 1)]
    outs = [torch.empty(n * 1001), torch.empty(n * 6, dtype=torch.bfloat16)]
    done(_cuda.all_gather_into_tensor(group, outs, ins, copies), copies)
    check(outs[0], torch.cat([values(q, 1001, torch.float32) for q in range(n)]), "all_gather_into_tensor")
    check(outs[1], torch.cat([values(q, 6, torch.bfloat16, 1) for q in range(n)]), "all_gather coalesced")

    inp, out = values(r, n * 700, torch.float32, 4), torch.empty(700)
    done(_cuda.reduce_scatter_tensor(group, [out], [inp], ["max"], copies), copies)
    check(out, reference(n, n * 700, torch.float32, ReduceOp.MAX, 4)[r * 700 : (r + 1) * 700], "reduce_scatter_tensor")

    inp = torch.cat([torch.full((3,), 10 * r + d, dtype=torch.int64) for d in range(n)])
    out = torch.empty(3 * n, dtype=torch.int64)
    done(_cuda.all_to_all(group, out, inp, copies), copies)
    check(out, torch.cat([torch.full((3,), 10 * s + r, dtype=torch.int64) for s in range(n)]), "all_to_all")


def many_in_flight(group: shoal.Group, copies: HostCopies) -> None:
    """Jobs submitted back to back without waiting, with host-path calls of
    other sizes in between: every rank must issue shoal calls in one order
    (a host-path call overtaking a job's chunks is a MismatchError or a wrong sum)."""
    r, n = group.rank, group.size
    pg = ShoalProcessGroup(group, r, n)
    gen = torch.Generator().manual_seed(7)  # the same sizes on every rank
    pending: list[tuple[ShoalWork, torch.Tensor, torch.Tensor]] = []
    for k in range(16):
        numel = int(torch.randint(1, 6000, (1,), generator=gen))
        t = values(r, numel, torch.float32, k)
        pending.append(
            (
                _cuda.all_reduce(group, [t], ["sum"], copies, chunk_bytes=CHUNK),
                t,
                reference(n, numel, torch.float32, ReduceOp.SUM, k),
            )
        )
        if k % 3 == 0:
            host = torch.full((7 + k,), float(r + 1), dtype=torch.float64)
            pending.append(
                (pg.allreduce([host]), host, torch.full((7 + k,), float(sum(range(1, n + 1))), dtype=torch.float64))
            )
    seen: list[Any] = []
    last = pending[0][0].get_future().then(lambda fut: seen.append(fut.value()))
    for work, t, want in pending:
        work.wait()
        check(t, want, "a job among many in flight")
    last.wait()
    assert seen and seen[0][0] is pending[0][1], "the future's value is the call's tensors"
    assert copies.pool.lent_bytes == 0


def small_pool(group: shoal.Group) -> None:
    """A pool of three buffers serves jobs of many chunks (the issuer issues
    steps to get staging back) and a whole call larger than the pool."""
    r, n = group.rank, group.size
    pool = StagingPool(3 * MIN_CLASS, pageable)
    copies = HostCopies(pool, delay=0.001 * r)
    t = values(r, 40000, torch.float32)  # 40 chunks of 4 KiB
    done(_cuda.all_reduce(group, [t], ["sum"], copies, chunk_bytes=CHUNK), copies)
    check(t, reference(n, 40000, torch.float32, ReduceOp.SUM), "all_reduce through a small pool")
    assert pool.allocations <= 3 and pool.held_bytes <= pool.capacity, (pool.allocations, pool.held_bytes)

    inp, out = values(r, 20000, torch.float64), torch.empty(n * 20000, dtype=torch.float64)  # > the pool
    done(_cuda.all_gather_into_tensor(group, [out], [inp], copies), copies)
    check(out, torch.cat([values(q, 20000, torch.float64) for q in range(n)]), "a call larger than the pool")
    assert pool.held_bytes <= pool.capacity


def through_the_process_group(copies: HostCopies) -> None:
    """Every call the CUDA path serves, made through torch.distributed, lands
    in the pipeline with the right arguments (roots, ops, outputs)."""
    import torch.distributed as dist
    import torch.nn as nn
    from ddp_reference import assert_ddp_matches_one_process

    import shoal.torch  # noqa: F401  (registers the backend)

    dist.init_process_group("shoal")
    _cuda.use_host_engine(copies)
    r, n = dist.get_rank(), dist.get_world_size()
    total = float(sum(range(1, n + 1)))
    for async_op in (False, True):
        x = torch.full((3001,), float(r + 1))
        work = dist.all_reduce(x, op=ReduceOp.MAX, async_op=async_op)
        if async_op:
            work.wait()
        check(x, torch.full((3001,), float(n)), f"all_reduce MAX async_op={async_op}")
    x = values(r, 2048, torch.float32)
    dist.all_reduce(x, op=ReduceOp.AVG)
    check(x, reference(n, 2048, torch.float32, ReduceOp.AVG), "all_reduce AVG")

    root = n - 1
    b = values(r, 5003, torch.int32) if r == root else torch.full((5003,), -1, dtype=torch.int32)
    dist.broadcast(b, src=root)
    check(b, values(root, 5003, torch.int32), "broadcast")

    z = torch.full((1000,), float(r + 1))
    dist.reduce(z, dst=1 % n)
    check(z, torch.full((1000,), total if r == 1 % n else float(r + 1)), "reduce")

    out = torch.empty(n * 7, dtype=torch.bfloat16)
    dist.all_gather_into_tensor(out, values(r, 7, torch.bfloat16))
    check(out, torch.cat([values(q, 7, torch.bfloat16) for q in range(n)]), "all_gather_into_tensor")

    rs = torch.empty(300)
    dist.reduce_scatter_tensor(rs, values(r, n * 300, torch.float32, 5), op=ReduceOp.MAX)
    check(rs, reference(n, n * 300, torch.float32, ReduceOp.MAX, 5)[r * 300 : (r + 1) * 300], "reduce_scatter_tensor")

    a = torch.cat([torch.full((2, 3), float(10 * r + d)) for d in range(n)])
    got = torch.empty_like(a)
    dist.all_to_all_single(got, a)
    check(got, torch.cat([torch.full((2, 3), float(10 * s + r)) for s in range(n)]), "all_to_all_single")

    used = copies.pool.allocations
    assert used > 0, "the calls did not go through the pipeline"
    w = torch.full((5,), r + 1, dtype=torch.int16)  # reduced in a wider type: the host path
    dist.all_reduce(w)
    check(w, torch.full((5,), int(total), dtype=torch.int16), "int16 on the host path")

    # DDP: buckets through the pipeline (small chunks: several per bucket), against one-process training
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 64), nn.Tanh(), nn.Linear(64, 3))
    assert_ddp_matches_one_process(model, r, n, batch=8, steps=4, bucket_cap_mb=0.01)
    assert copies.pool.allocations >= used and copies.pool.lent_bytes == 0
    dist.destroy_process_group()


def failures(group: shoal.Group, copies: HostCopies) -> None:
    r, n = group.rank, group.size
    # a copy back that fails (a destination of the wrong size): the job fails, its staging comes back
    t, wrong = values(r, 100, torch.float32), torch.empty(99)
    step = Step(
        [(torch.float32, 100)], [(t, 0)], lambda s: group.allreduce(s[0].numpy(), "sum", async_op=True), [(0, wrong)]
    )
    future: Future = copies.new_future()
    _pipeline.submit(Job(copies, [step], future, [wrong], [t, wrong]))
    work = ShoalWork(future)
    try:
        work.wait()
        raise AssertionError("a failing copy did not fail the work")
    except RuntimeError as e:
        assert "99" in str(e), e
    assert not work.is_success() and isinstance(work.exception(), RuntimeError) and copies.pool.lent_bytes == 0

    # a copy in that fails (a source of the wrong size): nothing is issued, the staging comes back
    short = torch.empty(99)
    step = Step([(torch.float32, 100)], [(short, 0)], lambda s: group.allreduce(s[0].numpy(), async_op=True), [])
    future = copies.new_future()
    _pipeline.submit(Job(copies, [step], future, [short], [short]))
    try:
        ShoalWork(future).wait()
        raise AssertionError("a failing copy in did not fail the work")
    except RuntimeError as e:
        assert "99" in str(e), e
    assert copies.pool.lent_bytes == 0, copies.pool.lent_bytes

    # the communicator is fine: the next job works
    t = values(r, 3000, torch.float32)
    done(_cuda.all_reduce(group, [t], ["sum"], copies, chunk_bytes=CHUNK), copies)
    check(t, reference(n, 3000, torch.float32, ReduceOp.SUM), "after a failed job")

    # ranks that chunk differently issue different calls: shoal's mismatch check fails every rank's work
    t = values(r, 30000, torch.float32)
    work = _cuda.all_reduce(group, [t], ["sum"], copies, chunk_bytes=CHUNK * (1 + r))
    try:
        work.wait()
        raise AssertionError("mismatched chunks did not fail")
    except Exception as e:  # noqa: BLE001
        print(f"RAISED {type(e).__name__}: {e}", flush=True)
    assert copies.pool.lent_bytes == 0, copies.pool.lent_bytes


def main() -> None:
    mode = sys.argv[1]
    if mode == "group":
        through_the_process_group(HostCopies(delay=0.001 * int(os.environ["RANK"])))
        print("OK torch pipeline group", flush=True)
        return
    group = shoal.init()
    copies = HostCopies(delay=0.001 * group.rank)
    if mode == "results":
        all_reduces(group, copies)
        broadcast_and_reduce(group, copies)
        whole_calls(group, copies)
        many_in_flight(group, copies)
        small_pool(group)
        print("OK torch pipeline", flush=True)
    elif mode == "chunks":
        large_chunks(group, copies)
        print("OK torch pipeline chunks", flush=True)
    else:
        failures(group, copies)
        print("OK torch pipeline failures", flush=True)
        os._exit(0)  # the communicator is unusable after the mismatch: leave without teardown
    shoal.finalize()


if __name__ == "__main__":
    main()
