"""FSDP on the shoal backend, on CPU: FSDP2 (`fully_shard`, where this torch
runs it on CPU: not 2.4 and 2.5) and FSDP1 (`FullyShardedDataParallel`). A
small model trains for a few steps; the unsharded parameters match
single-process training on the full batch. Also FSDP2 on a 2-D (replicate x
shard) mesh (HSDP; on CPU from a release after 2.7).
Launched by tests/test_torch_backend.py; prints "OK torch fsdp"."""

from __future__ import annotations

import copy
import importlib
import inspect
from types import ModuleType

import torch
import torch.distributed as dist
import torch.nn as nn

import shoal.torch  # noqa: F401  (registers the backend)

STEPS = 4
LOCAL_BATCH = 4


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    # odd sizes: FSDP pads shards that do not divide evenly
    return nn.Sequential(nn.Linear(7, 33), nn.Tanh(), nn.Linear(33, 17), nn.Tanh(), nn.Linear(17, 3))


def batch(step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(size, 7, generator=g), torch.randn(size, 3, generator=g)


def reference_params(n: int) -> list[torch.Tensor]:
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(STEPS):
        x, y = batch(step, LOCAL_BATCH * n)
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def train_sharded(model: nn.Module, r: int, n: int) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(STEPS):
        x, y = batch(step, LOCAL_BATCH * n)
        x, y = x.reshape(n, LOCAL_BATCH, -1)[r], y.reshape(n, LOCAL_BATCH, -1)[r]
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()


def fully_shard_function():  # noqa: ANN201
    """FSDP2's ``fully_shard``: in torch.distributed.fsdp from torch 2.6 on, under _composable before."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def fsdp2_internals() -> ModuleType:
    """The module of FSDP2's parameter groups, whose interfaces tell what this torch's FSDP2 runs on CPU."""
    for package in ("torch.distributed.fsdp._fully_shard", "torch.distributed._composable.fsdp"):
        try:
            return importlib.import_module(f"{package}._fsdp_param_group")
        except ImportError:
            continue
    raise AssertionError(f"FSDP2 not found in torch {torch.__version__}")


def fsdp2_runs_on_cpu() -> bool:
    """FSDP2 creates its streams for the parameters' device from the releases
    whose ``FSDPCommContext.lazy_init`` takes the device; before (2.4's
    ``init()``, 2.5's ``lazy_init()``) it creates CUDA streams or refuses."""
    lazy_init = getattr(fsdp2_internals().FSDPCommContext, "lazy_init", None)
    return lazy_init is not None and "device" in inspect.signature(lazy_init).parameters


def hsdp_runs_on_cpu() -> bool:
    """HSDP (FSDP2 on a 2-D mesh) insists on an all-reduce stream event, which
    CPU streams do not record, until ``AllReduceState.event`` became optional."""
    return "None" in str(fsdp2_internals().AllReduceState.__annotations__["event"])


def compare(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    assert len(got) == len(want)
    for i, (p, q) in enumerate(zip(got, want)):
        err = (p - q).abs().max().item()
        assert err < 1e-5, f"{what}: parameter {i} differs from single-process training by {err}"


def check_fsdp2(r: int, n: int, want: list[torch.Tensor]) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard = fully_shard_function()
    # a CPU mesh named, not fully_shard's default: that one is on the accelerator when there is
    # one, and sets every rank's CUDA device to its local rank (rank 1 of 2 on one GPU: no such device)
    mesh = init_device_mesh("cpu", (n,))
    model = make_model()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train_sharded(model, r, n)
    full = [p.full_tensor().detach() for p in model.parameters()]  # an all-gather of the shards
    compare(full, want, "FSDP2 fully_shard")


def check_hsdp(r: int, n: int, want: list[torch.Tensor]) -> None:
    """FSDP2 on a 2-D device mesh (replicated x sharded): the mesh makes sub-groups per dimension."""
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard = fully_shard_function()

    shard = 2 if n % 2 == 0 else 1
    mesh = init_device_mesh("cpu", (n // shard, shard), mesh_dim_names=("replicate", "shard"))
    model = make_model()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train_sharded(model, r, n)
    compare([p.full_tensor().detach() for p in model.parameters()], want, f"HSDP on a {tuple(mesh.shape)} mesh")


def check_fsdp1(r: int, n: int, want: list[torch.Tensor]) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    model = FSDP(copy.deepcopy(make_model()), device_id=torch.device("cpu"), use_orig_params=True)
    train_sharded(model, r, n)
    with FSDP.summon_full_params(model):
        full = [p.detach().clone() for p in model.parameters()]
    compare(full, want, "FSDP1 FullyShardedDataParallel")


def main() -> None:
    dist.init_process_group("shoal")
    r, n = dist.get_rank(), dist.get_world_size()
    want = reference_params(n)
    # the parts this torch's FSDP2 cannot run on CPU are skipped, visibly
    if fsdp2_runs_on_cpu():
        check_fsdp2(r, n, want)
    else:
        print(f"SKIPPED FSDP2: torch {torch.__version__}'s fully_shard needs CUDA", flush=True)
    if fsdp2_runs_on_cpu() and hsdp_runs_on_cpu():
        check_hsdp(r, n, want)
    else:
        print(f"SKIPPED HSDP: torch {torch.__version__}'s fully_shard on a 2-D mesh needs CUDA", flush=True)
    check_fsdp1(r, n, want)
    dist.destroy_process_group()
    print("OK torch fsdp", flush=True)


if __name__ == "__main__":
    main()
