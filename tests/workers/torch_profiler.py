"""Every shoal op issued through torch.distributed shows in torch.profiler
traces as a ``shoal:<op>`` range, as Gloo's do. Prints "OK torch profiler"."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

import shoal.torch  # noqa: F401  (registers the backend)

dist.init_process_group("shoal")
r, n = dist.get_rank(), dist.get_world_size()
x = torch.ones(1000)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    dist.all_reduce(x)
    dist.all_reduce(x, async_op=True).wait()
    dist.broadcast(x, src=0)
    out = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(out, x)
    dist.barrier()
    if r == 0:
        dist.send(x, dst=1)
    elif r == 1:
        dist.recv(x, src=0)
names = {e.name for e in prof.events()}
expected = {"shoal:allreduce", "shoal:broadcast", "shoal:allgather", "shoal:barrier"}
expected |= {"shoal:send"} if r == 0 else {"shoal:recv"} if r == 1 else set()
missing = expected - names
assert not missing, (missing, sorted(n for n in names if "shoal" in n))
dist.destroy_process_group()
print("OK torch profiler", flush=True)
