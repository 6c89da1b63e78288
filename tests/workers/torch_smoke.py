"""A short end-to-end run of the shoal torch backend: collectives, a
sub-group and a DDP step, then the process group is destroyed; with
``--generations 2`` it is created again (under torchrun, whose agent store
outlives the groups; with env:// under `shoal run` the second group's store
would race with the first one's shutdown, for any backend). Prints "OK torch smoke"."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import shoal.torch  # noqa: F401  (registers the backend)


def once(generation: int) -> None:
    dist.init_process_group("shoal")
    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.full((10,), float(r + generation))
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((10,), float(sum(q + generation for q in range(n))))), x
    evens = dist.new_group(list(range(0, n, 2)))
    if r % 2 == 0:
        y = torch.ones(3)
        dist.all_reduce(y, group=evens)
        assert torch.equal(y, torch.full((3,), float(len(range(0, n, 2)))))
    torch.manual_seed(r)  # different initial weights: DDP broadcasts rank 0's
    model = DDP(nn.Linear(4, 2))
    model(torch.randn(8, 4)).sum().backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(n)]
    dist.all_gather(everyone, flat)
    assert all(torch.equal(e, flat) for e in everyone)
    dist.destroy_process_group()


def main() -> None:
    generations = int(sys.argv[sys.argv.index("--generations") + 1]) if "--generations" in sys.argv else 1
    for g in range(generations):
        once(g)
    print("OK torch smoke", flush=True)


if __name__ == "__main__":
    main()
