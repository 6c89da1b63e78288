"""The CUDA path on a GPU (shoal/torch/_cuda.py): results of every pipelined
call against a reference, no stall of the calling thread, stream semantics
of wait(), staging reuse, and DDP against single-process training.
Launched by tests/test_torch_cuda.py when CUDA is available (ranks may share
one GPU); prints "OK torch cuda pipeline".

The timing checks use ``torch.cuda._sleep`` (a kernel that spins for a number
of GPU cycles) to keep a stream busy for about two seconds: a call that waits
for the GPU on the CPU takes that long, one that does not returns at once.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn as nn
from ddp_reference import assert_ddp_matches_one_process

import shoal.torch  # noqa: F401  (registers the backend)
from shoal.torch import _copies

BUSY_SECONDS = 2.0


def cycles_per_second() -> float:
    """How many ``_sleep`` cycles the GPU spins per second (measured with events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    return 50_000_000 / (start.elapsed_time(end) / 1000)


def busy(cycles: float) -> None:
    """Keeps the current stream busy for about BUSY_SECONDS."""
    torch.cuda._sleep(int(cycles * BUSY_SECONDS))


def results(dev: torch.device, r: int, n: int) -> None:
    """Every pipelined call on sizes of several chunks (the default 4 MiB chunks), with ragged ends."""
    total = float(sum(range(1, n + 1)))
    x = torch.full((25_000_000 // 4 + 3,), float(r + 1), device=dev)  # 25 MB: 6 full chunks and a ragged one
    dist.all_reduce(x)
    assert torch.equal(x, torch.full_like(x, total)), "all_reduce float32"

    b = (torch.arange(3_000_001, device=dev) % 5 + r).to(torch.bfloat16)
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    assert torch.equal(b, (torch.arange(3_000_001, device=dev) % 5 + n - 1).to(torch.bfloat16)), "all_reduce bf16 max"

    c = torch.full((1_000_003,), r + 1, dtype=torch.int64, device=dev)
    dist.all_reduce(c, op=dist.ReduceOp.PRODUCT)
    assert torch.equal(c, torch.full_like(c, int(torch.arange(1, n + 1).prod()))), "all_reduce int64 product"

    root = n - 1
    y = (
        torch.arange(5_000_017, dtype=torch.float64, device=dev)
        if r == root
        else torch.zeros(5_000_017, dtype=torch.float64, device=dev)
    )
    dist.broadcast(y, src=root)
    assert torch.equal(y, torch.arange(5_000_017, dtype=torch.float64, device=dev)), "broadcast"

    z = torch.full((2_000_000,), float(r + 1), device=dev)
    dist.reduce(z, dst=0)
    assert torch.equal(z, torch.full_like(z, total if r == 0 else float(r + 1))), "reduce"

    out = torch.empty(n * 1_000_001, device=dev)
    dist.all_gather_into_tensor(out, torch.full((1_000_001,), float(r), device=dev))
    assert torch.equal(out, torch.arange(n, device=dev, dtype=torch.float32).repeat_interleave(1_000_001)), "all_gather"

    rs = torch.empty(1_000_000, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(n * 1_000_000, dtype=torch.float32, device=dev))
    want = n * torch.arange(r * 1_000_000, (r + 1) * 1_000_000, dtype=torch.float32, device=dev)
    assert torch.equal(rs, want), "reduce_scatter_tensor"

    a = torch.cat([torch.full((1000,), float(10 * r + d), device=dev) for d in range(n)])
    got = torch.empty_like(a)
    dist.all_to_all_single(got, a)
    assert torch.equal(got, torch.cat([torch.full((1000,), float(10 * s + r), device=dev) for s in range(n)])), (
        "all_to_all"
    )

    assert _copies._engines[dev].pool.allocations > 0, "the calls did not go through the pipeline"


def no_stall(dev: torch.device, r: int, n: int, cycles: float) -> None:
    total = float(sum(range(1, n + 1)))
    # 1. the call does not wait for the GPU, and its copies wait for the kernels issued before it
    x = torch.zeros(1 << 22, device=dev)
    busy(cycles)
    x.fill_(float(r + 1))  # runs after the busy kernel
    start = time.monotonic()
    work = dist.all_reduce(x, async_op=True)
    issued = time.monotonic() - start
    work.wait()
    assert issued < 0.3 * BUSY_SECONDS, f"all_reduce(async_op=True) blocked the caller {issued:.3f} s"
    assert torch.equal(x, torch.full_like(x, total)), "the copy did not wait for the caller's stream"

    # 2. wait() does not wait for GPU work issued after the call, nor synchronise the device
    x.fill_(float(r + 1))
    work = dist.all_reduce(x, async_op=True)
    busy(cycles)  # on the current stream, after the call
    side = torch.cuda.Stream(dev)
    with torch.cuda.stream(side):
        busy(cycles)
    start = time.monotonic()
    work.wait()
    waited = time.monotonic() - start
    assert waited < 0.6 * BUSY_SECONDS, f"work.wait() blocked {waited:.3f} s on later GPU work"
    torch.cuda.synchronize(dev)
    assert torch.equal(x, torch.full_like(x, total))

    # 3. after wait(), kernels on the current stream see the result (the stream waits for the copy back)
    big = torch.full((25_000_000,), float(r + 1), device=dev)  # 100 MB: the copy back takes milliseconds
    work = dist.all_reduce(big, async_op=True)
    work.wait()
    s = big.sum(dtype=torch.float64)  # issued at once on the current stream
    assert float(s) == total * big.numel(), f"a kernel after wait() read {float(s)} before the copy back ended"

    # 4. the future: then() callbacks run after the result and see it on their stream
    x.fill_(float(r + 1))
    doubled = dist.all_reduce(x, async_op=True).get_future().then(lambda f: f.value()[0] * 2).wait()
    assert torch.equal(doubled, torch.full_like(x, 2 * total)), "then() on the work's future"


def staging_is_reused(dev: torch.device) -> None:
    """Ten more calls allocate at most one call's worth of staging (without reuse: ten calls' worth)."""
    from shoal.torch._cuda import settings

    pool = _copies._engines[dev].pool
    x = torch.ones(25_000_000 // 4, device=dev)
    chunks_per_call = -(-x.numel() * 4 // settings().chunk_bytes)
    dist.all_reduce(x)
    before = pool.allocations
    for _ in range(10):
        dist.all_reduce(x)
    assert pool.allocations - before <= chunks_per_call, f"staging allocated again: {before} -> {pool.allocations}"
    assert pool.held_bytes <= pool.capacity and pool.lent_bytes == 0


def ddp_matches_one_process(dev: torch.device, r: int, n: int) -> None:
    """DDP on the GPU (small buckets, so several chunked all_reduces per step)
    against training the same model in one process on the whole batch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 8)).to(dev)
    assert_ddp_matches_one_process(model, r, n, batch=16, steps=5, rtol=1e-4, device_ids=[dev.index], bucket_cap_mb=0.1)


def main() -> None:
    dist.init_process_group("shoal")
    r, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", r % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    cycles = cycles_per_second()
    results(dev, r, n)
    no_stall(dev, r, n, cycles)
    staging_is_reused(dev)
    ddp_matches_one_process(dev, r, n)
    dist.destroy_process_group()
    print("OK torch cuda pipeline", flush=True)


if __name__ == "__main__":
    main()
