"""CUDA tensors on the shoal backend (staged through host memory): results,
non-contiguous tensors, work on a side stream, and a DDP step. Launched by
tests/test_torch_backend.py when CUDA is available; prints "OK torch cuda"."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import shoal.torch  # noqa: F401  (registers the backend)


def main() -> None:
    dist.init_process_group("shoal")
    r, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", r % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    total = float(sum(range(n)))

    x = torch.full((1000,), float(r), device=dev)
    dist.all_reduce(x)
    assert x.is_cuda and torch.equal(x.cpu(), torch.full((1000,), total))

    # values written by a kernel on a side stream, reduced on that stream
    side = torch.cuda.Stream(dev)
    with torch.cuda.stream(side):
        y = torch.zeros(1 << 20, device=dev)
        y.add_(float(r + 1))
        work = dist.all_reduce(y, async_op=True)
    work.wait()
    assert torch.equal(y.cpu(), torch.full((1 << 20,), float(sum(q + 1 for q in range(n)))))

    wide = torch.zeros(4, 6, device=dev)
    nc = wide[:, ::2]
    nc.fill_(float(r))
    dist.all_reduce(nc, op=dist.ReduceOp.MAX)
    assert torch.equal(nc.cpu(), torch.full((4, 3), float(n - 1))) and torch.equal(
        wide[:, 1::2].cpu(), torch.zeros(4, 3)
    )

    b = torch.full((5,), float(r), device=dev, dtype=torch.bfloat16)
    dist.broadcast(b, src=n - 1)
    assert torch.equal(b.cpu(), torch.full((5,), float(n - 1), dtype=torch.bfloat16))

    out = torch.empty(2 * n, device=dev)
    dist.all_gather_into_tensor(out, torch.full((2,), float(r), device=dev))
    assert torch.equal(out.cpu(), torch.arange(n).repeat_interleave(2).float())

    rs = torch.empty(3, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(3 * n, dtype=torch.float32, device=dev))
    assert torch.equal(rs.cpu(), n * torch.arange(3 * r, 3 * r + 3, dtype=torch.float32))

    # uneven all_to_all_single: rank s sends s + d + 1 rows to rank d
    inp = torch.cat([torch.full((r + d + 1, 2), float(10 * r + d)) for d in range(n)]).to(dev)
    want = torch.cat([torch.full((s + r + 1, 2), float(10 * s + r)) for s in range(n)])
    got = torch.empty(want.shape, device=dev)
    dist.all_to_all_single(got, inp, [s + r + 1 for s in range(n)], [r + d + 1 for d in range(n)])
    assert torch.equal(got.cpu(), want)

    if n > 1:
        buf = torch.empty(7, device=dev)
        recv = dist.irecv(buf, src=(r - 1) % n)
        dist.send(torch.full((7,), float(r), device=dev), dst=(r + 1) % n)
        recv.wait()
        assert torch.equal(buf.cpu(), torch.full((7,), float((r - 1) % n)))

    torch.manual_seed(r)
    model = DDP(nn.Linear(8, 4).to(dev), device_ids=[dev.index])
    model(torch.randn(16, 8, device=dev)).sum().backward()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(n)]
    dist.all_gather(everyone, flat)
    assert all(torch.equal(e, flat) for e in everyone)

    dist.destroy_process_group()
    print("OK torch cuda", flush=True)


if __name__ == "__main__":
    main()
