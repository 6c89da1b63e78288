"""DistributedDataParallel on the shoal backend: after a few steps every rank
holds the same parameters, and they match single-process training on the
full batch. Covers find_unused_parameters, buckets of mixed dtypes (float32,
float64, bfloat16), no_sync gradient accumulation, communication hooks
(PowerSGD's wait for collectives inside future callbacks) and DDP over a
sub-group. Launched by tests/test_torch_backend.py; prints
"OK torch ddp"."""

from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP

import shoal.torch  # noqa: F401  (registers the backend)

STEPS = 5
LOCAL_BATCH = 4


class Net(nn.Module):
    """A small MLP; `extra` is used only when the input asks for it (unused-parameter test)."""

    def __init__(self, dtype: torch.dtype = torch.float32, mixed: bool = False, extra: bool = False) -> None:
        super().__init__()
        self.a = nn.Linear(6, 16).to(dtype)
        # a float64 layer in between: DDP buckets float32 and float64 gradients apart
        self.b = nn.Linear(16, 16).to(torch.float64 if mixed else dtype)
        self.c = nn.Linear(16, 3).to(dtype)
        self.extra = nn.Linear(16, 16).to(dtype) if extra else None
        self.dtype = dtype

    def forward(self, x: torch.Tensor, use_extra: bool = False) -> torch.Tensor:
        h = torch.tanh(self.a(x.to(self.dtype)))
        h = torch.tanh(self.b(h.to(self.b.weight.dtype))).to(self.dtype)
        if use_extra:
            h = h + self.extra(h)
        return self.c(h)


def batch(step: int, size: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + micro)
    return torch.randn(size, 6, generator=g), torch.randn(size, 3, generator=g)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor, use_extra: bool) -> torch.Tensor:
    return ((model(x, use_extra).float() - y) ** 2).mean()


def shard(t: torch.Tensor, r: int, n: int) -> torch.Tensor:
    return t.reshape(n, -1, *t.shape[1:])[r]


def train(
    make: Callable[[], nn.Module],
    ranks: list[int],
    *,
    group: dist.ProcessGroup | None = None,
    use_extra: Callable[[int], bool] = lambda step: False,
    accumulate: int = 1,
    hook: Callable | None = None,
    hook_state: object = None,
    **ddp_kwargs: object,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Trains a DDP replica on this rank's shard and a single-process reference
    on the full batch; returns both parameter lists."""
    r, n = ranks.index(dist.get_rank()), len(ranks)
    torch.manual_seed(0)
    reference = make()
    replica = copy.deepcopy(reference)
    if dist.get_rank() == ranks[0]:
        with torch.no_grad():  # DDP must broadcast rank 0's parameters to the others
            for p in replica.parameters():
                p.add_(0.0)
    else:
        with torch.no_grad():
            for p in replica.parameters():
                p.mul_(-3.0)
    ddp = DDP(replica, process_group=group, **ddp_kwargs)
    if hook is not None:
        ddp.register_comm_hook(hook_state, hook)
    opt_ddp = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        extra = use_extra(step)
        opt_ddp.zero_grad()
        opt_ref.zero_grad()
        for micro in range(accumulate):
            x, y = batch(step, LOCAL_BATCH * n, micro)
            loss_of(reference, x, y, extra).backward()
            if micro < accumulate - 1:
                with ddp.no_sync():
                    loss_of(ddp, shard(x, r, n), shard(y, r, n), extra).backward()
            else:
                loss_of(ddp, shard(x, r, n), shard(y, r, n), extra).backward()
        opt_ddp.step()
        opt_ref.step()
    return [p.detach() for p in replica.parameters()], [p.detach() for p in reference.parameters()]


def check_same_everywhere(params: list[torch.Tensor], group: dist.ProcessGroup | None, what: str) -> None:
    flat = torch.cat([p.reshape(-1).double() for p in params])
    everyone = [torch.empty_like(flat) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, flat, group=group)
    for q, other in enumerate(everyone):
        assert torch.equal(other, flat), (
            f"{what}: rank {q} has other parameters (max diff {(other - flat).abs().max()})"
        )


def check_matches(params: list[torch.Tensor], ref: list[torch.Tensor], what: str, tol: float) -> None:
    for i, (p, q) in enumerate(zip(params, ref)):
        assert p.dtype == q.dtype, (what, p.dtype, q.dtype)
        err = (p.double() - q.double()).abs().max().item()
        assert err <= tol, f"{what}: parameter {i} differs from single-process training by {err}"


def run(what: str, make: Callable[[], nn.Module], tol: float = 1e-5, **kwargs: object) -> None:
    n = dist.get_world_size()
    params, ref = train(make, list(range(n)), **kwargs)
    check_same_everywhere(params, None, what)
    check_matches(params, ref, what, tol)


def check_no_work_left_held() -> None:
    """Where torch drops the Python object of a work held by C++ (torch 2.4),
    the backend holds its works until they are consumed: every work here was
    waited for (by this script or by torch), so none may stay held."""
    from shoal.torch import _work

    assert _work._keeper.held() == 0, f"{_work._keeper.held()} works still held"


def main() -> None:
    dist.init_process_group("shoal")
    n = dist.get_world_size()
    run("plain", Net)
    run(
        "find_unused_parameters",
        lambda: Net(extra=True),
        use_extra=lambda step: step % 2 == 1,
        find_unused_parameters=True,
    )
    run("mixed float32/float64 buckets", lambda: Net(mixed=True), bucket_cap_mb=0.001)
    run("no_sync accumulation", Net, accumulate=3)
    run("allreduce comm hook", Net, hook=default_hooks.allreduce_hook)
    run("bfloat16 parameters", lambda: Net(dtype=torch.bfloat16), tol=0.1)
    run("fp16 compression hook", Net, hook=default_hooks.fp16_compress_hook, tol=1e-2)
    # PowerSGD is lossy (rank-1 compression): only the replicas' agreement is checked. Its callbacks
    # wait for further collectives inside a future's callback, which must not block completions.
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    params, _ = train(Net, list(range(n)), hook=powerSGD.powerSGD_hook, hook_state=state)
    check_same_everywhere(params, None, "PowerSGD hook")
    if n >= 3:
        ranks = [0, n - 1]
        group = dist.new_group(ranks)
        if dist.get_rank() in ranks:
            params, ref = train(Net, ranks, group=group)
            check_same_everywhere(params, group, "sub-group")
            check_matches(params, ref, "sub-group", 1e-5)
    dist.barrier()
    check_no_work_left_held()
    dist.destroy_process_group()
    print("OK torch ddp", flush=True)


if __name__ == "__main__":
    main()
